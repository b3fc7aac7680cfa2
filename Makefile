# Two entry points (README quickstart): `make demo` and `make test`.
PY ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup demo test proto lint docs

$(BIN)/mpdp: pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,experiments,dask]'
	touch $(BIN)/mpdp

setup: $(BIN)/mpdp

demo: setup
	$(BIN)/mpdp demo

test: setup
	$(BIN)/python -m pytest -q

proto: setup
	$(BIN)/python tools/gen_proto.py

lint: setup
	$(BIN)/ruff check mpdp services
	$(BIN)/python tools/typecheck.py

# API reference from the docstrings (pdoc), into build/api/ (not committed)
docs: setup
	$(BIN)/python -m pdoc --docformat restructuredtext -o build/api mpdp
	@echo "API reference: build/api/index.html"
