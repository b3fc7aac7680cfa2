# Two entry points (README quickstart): `make demo` and `make test`; `make test-fast` is the quick loop while editing.
PY ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup setup-dev demo test test-fast proto lint docs

# The demo's venv: the core package only (the services, the CLI, the protocols), pip's progress shown.
$(BIN)/mpdp: pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	@echo "installing mpdp and its dependencies into $(VENV) (the core package; \`make test\` adds the test, plot and data-source extras)"
	$(BIN)/python -m pip install --progress-bar on -e .
	touch $(BIN)/mpdp

# The tests' extras on top: pytest, lint and API-reference tools (dev), matplotlib (experiments), and every data
# source: Parquet (parquet), PostgreSQL (postgres), Dask (dask).
$(VENV)/.extras-dev: $(BIN)/mpdp
	@echo "installing the test, plot and data-source extras into $(VENV)"
	$(BIN)/python -m pip install --progress-bar on -e '.[dev,experiments,parquet,postgres,dask]'
	touch $(VENV)/.extras-dev

setup: $(BIN)/mpdp

setup-dev: $(VENV)/.extras-dev

demo: setup
	$(BIN)/mpdp demo

test: setup-dev
	$(BIN)/python -m pytest -q --durations=30

# The quick loop: core and protocol unit tests (no processes, no sockets; tests/conftest.py says which), in minutes.
test-fast: setup-dev
	$(BIN)/python -m pytest -q -m fast -p no:cacheprovider

proto: setup-dev
	$(BIN)/python tools/gen_proto.py

lint: setup-dev
	$(BIN)/ruff check mpdp services
	$(BIN)/python tools/typecheck.py

# API reference from the docstrings (pdoc), into build/api/ (not committed)
docs: setup-dev
	$(BIN)/python -m pdoc --docformat restructuredtext -o build/api mpdp
	@echo "API reference: build/api/index.html"
