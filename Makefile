# The two commands of the README: `make demo` and `make test`. Both install what they need.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: all bootstrap test test-unit lint demo bench clean

all: test

bootstrap:
	@bash scripts/bootstrap.sh

lint: bootstrap
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy collector exporters bench

test: bootstrap lint
	$(PY) -m pytest -ra --durations=25 $(PYTEST_ARGS)

test-unit: bootstrap
	$(PY) -m pytest -ra tests/unit $(PYTEST_ARGS)

demo: bootstrap
	$(PY) -m collector.demo $(DEMO_ARGS)

bench: bootstrap
	$(PY) bench/agent_scrape.py
	$(PY) bench/blockio_read.py
	$(PY) -m bench.blockio_overhead

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache .mypy_cache
