# Everything a fresh machine needs is installed from here and pyproject.toml.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test install bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

## The demo: local Salesforce emulator + CDC events landing + Dagster UI with sensors running.
run: $(STAMP)
	$(BIN)/python -m demo

## The test suite (real Spark, real Delta tables, real HTTPS emulator, real Dagster).
test: $(STAMP)
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .demo
