# Two commands set everything up on a fresh machine:
#   make run   - create .venv if missing, install, start the whole system with a demo workload
#   make test  - create .venv if missing, install with dev extras, run the whole suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: run test install install-dev bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@ $(VENV)/.installed

install: $(VENV)/.installed
install-dev: $(VENV)/.installed-dev

run: install
	$(BIN)/cardflow up --demo

test: install-dev
	$(BIN)/python -m pytest $(PYTEST_ARGS)

bench: install-dev
	$(BIN)/python bench/policies.py
	$(BIN)/python bench/scale.py
	$(BIN)/python bench/pipeline.py

clean:
	rm -rf $(VENV) .cardflow .pytest_cache .hypothesis
