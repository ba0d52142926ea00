# The two commands of the README: `make demo` and `make test`. Both install what they need.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
# pytest-xdist workers for `make test`; the real-kernel tests run in serial lanes, each lane on
# one worker, one test at a time (docs/testing.md). TEST_WORKERS=0: all in this process.
TEST_WORKERS ?= 3

.PHONY: all bootstrap test test-unit lint demo bench clean package

all: test

bootstrap:
	@bash scripts/bootstrap.sh

lint: bootstrap
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy collector exporters bench

# Two phases: everything but the `alone` tests on parallel workers, then the `alone` tests
# (what-limited-it scenarios, the demo: they judge the whole machine's load and traffic) with
# nothing beside them. Exit 5 (nothing selected, e.g. PYTEST_ARGS naming one unit file) is no
# failure of a phase; bash's `tests/run-phases.sh` keeps the worst other exit code.
test: bootstrap lint
	TEST_WORKERS=$(TEST_WORKERS) bash tests/run-phases.sh $(PY) $(PYTEST_ARGS)

test-unit: bootstrap
	$(PY) -m pytest -ra tests/unit $(PYTEST_ARGS)

demo: bootstrap
	$(PY) -m collector.demo $(DEMO_ARGS)

bench: bootstrap
	$(PY) bench/agent_scrape.py
	$(PY) bench/blockio_read.py
	$(PY) -m bench.blockio_overhead

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .ruff_cache .mypy_cache

# dist/: the wheel, the Debian 12 package and the EL9 RPM (docs/install.md)
package: bootstrap
	@bash packaging/build.sh
