# Everything a fresh machine needs is installed from here and pyproject.toml.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
E2E_STAMP := $(VENV)/.installed-e2e
DOCS_STAMP := $(VENV)/.installed-docs
LINT_STAMP := $(VENV)/.installed-lint
## The versions CI tested (`make lock` writes it): every pip install below passes it with -c, so a fresh machine gets
## them, not whatever was released since; pyproject.toml keeps the ranges a release may use.
CONSTRAINTS := constraints.txt
PIP_INSTALL := $(BIN)/pip install --quiet -c $(CONSTRAINTS)

.PHONY: run run-org test test-cluster test-scale install bench clean browser e2e lock

$(STAMP): pyproject.toml $(CONSTRAINTS)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(PIP_INSTALL) -e '.[test,emulator]'
	touch $(STAMP)

install: $(STAMP)

## constraints.txt anew (demo/lock.py): the venv brought to pyproject.toml's ranges without the old pins (a version
## still in range is kept; `make lock UPGRADE=1` takes the newest releases instead), then its versions written down.
## Then `make test`, and commit both files (docs/development/index.md: updating the pins).
lock:
	test -x $(BIN)/pip || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet $(if $(UPGRADE),--upgrade --upgrade-strategy eager) -e '.[test,emulator,docs,lint]'
	$(BIN)/python -m demo.lock > $(CONSTRAINTS).new
	mv $(CONSTRAINTS).new $(CONSTRAINTS)
	touch $(STAMP) $(DOCS_STAMP) $(LINT_STAMP)

## The demo: local Salesforce emulator + CDC events landing + Dagster UI with sensors running. The Dagster instance is
## SQLite in .demo/dagster_home; `make run PG=1` puts it on a local PostgreSQL cluster in .demo/postgres instead
## (initdb/pg_ctl, 127.0.0.1 only, a generated password; docs/operations/dagster-postgres.md).
run: $(STAMP)
	$(BIN)/python -m demo $(if $(PG),--postgres)

## The same stack against a real org: Spark Connect + CDC subscriber + Dagster UI with sensors, from the SF_* variables
## (docs/guides/real-org.md: the checklist); refuses, naming them, when they are missing. State in .org/.
run-org: $(STAMP)
	$(BIN)/python -m demo --org

## The test suite (real Spark, real Delta tables, real HTTPS emulator, real Dagster), spread over PYTEST_WORKERS
## processes by pytest-xdist, each with its own Spark session: one per core (tests/spark_ops, all Spark work, took as
## long in 2 workers as in one on 2 cores, and longer in 3; the tests that wait on subprocesses and the emulator gain).
## PYTEST_WORKERS=0 runs it in one process (serial: for debugging, with -s or --pdb); worksteal hands a long test's
## neighbours to an idle worker. The 25 slowest tests are listed at the end: where the suite's time goes.
PYTEST_WORKERS ?= 2
PYTEST_XDIST = -n $(PYTEST_WORKERS) --dist worksteal
test: $(STAMP)
	$(BIN)/python -m pytest -q --durations=25 $(PYTEST_XDIST)

## The runs on a standalone Spark cluster (a master and two workers on loopback, from PySpark's own launcher), directly
## and through a Spark Connect server attached to it; replicas compared with a local run (minutes; needs root for
## the workers' private mount, demo/spark_cluster.py). CI runs it after `make test`.
test-cluster: $(STAMP)
	$(BIN)/python -m pytest -q -m cluster tests/resources/test_spark_cluster.py

## At the scale of a large org: one replication.yaml of 200 objects (tests/scale; minutes; CI runs it too).
test-scale: $(STAMP)
	$(BIN)/python -m pytest -q -m scale tests/scale

## Headless Chromium (Debian's `chromium`) for the browser check of the UI (tests/e2e/test_ui.py); needs root.
browser:
	@test -x /usr/bin/chromium || (apt-get update -qq && apt-get install -y -qq chromium)

## End-to-end: the real Dagster daemon and webserver against the emulator (minutes; screenshots to docs/screenshots).
$(E2E_STAMP): $(STAMP)
	$(PIP_INSTALL) -e '.[test,emulator,e2e]'
	touch $(E2E_STAMP)

e2e: $(E2E_STAMP) browser
	$(BIN)/python -m pytest -q -s -m e2e tests/e2e

## The documentation site into site/ (docs/, mkdocs.yml; generated parts from docs/generate.py): --strict, so a broken
## link or anchor fails the build. CI runs it.
.PHONY: docs install-docs
$(DOCS_STAMP): $(STAMP)
	$(PIP_INSTALL) -e '.[test,emulator,docs]'
	touch $(DOCS_STAMP)

install-docs: $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	$(BIN)/mkdocs build --strict

## ruff (lint, then the format check) over the repository, mypy over the product packages (pyproject.toml [tool.ruff],
## [tool.mypy]; the `lint` extra pins both). CI runs it before the tests. `ruff format .` fixes what the check finds.
.PHONY: lint install-lint
$(LINT_STAMP): $(STAMP)
	$(PIP_INSTALL) -e '.[test,emulator,lint]'
	touch $(LINT_STAMP)

install-lint: $(LINT_STAMP)

lint: $(LINT_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .demo site
