# Two entry points (README quickstart): `make demo` and `make test`.
PY ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup demo test proto

$(BIN)/mpdp: pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(BIN)/mpdp

setup: $(BIN)/mpdp

demo: setup
	$(BIN)/mpdp demo

test: setup
	$(BIN)/python -m pytest -q

proto: setup
	$(BIN)/python tools/gen_proto.py
