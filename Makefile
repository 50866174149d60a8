# The two commands of the README, for a fresh machine (Debian, python3 with venv, make):
#   make demo   set up .venv, then run a 120-call batch against the built-in simulator
#   make test   set up .venv, then lint, type-check and run the whole test suite
# Both can be run again at any time: .venv is (re)installed only when pyproject.toml changes.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck

demo: $(STAMP)
	$(BIN)/sluice batch examples/demo_batch.jsonl -o out/demo_results.jsonl

test: lint typecheck
	$(BIN)/pytest -q

lint: $(STAMP)
	$(BIN)/ruff check runtime actors tests benchmarks

# mypy cannot follow setuptools' package-dir mapping; the script checks the code as `sluice`.
typecheck: $(STAMP)
	MYPY=$(BIN)/mypy bash scripts/typecheck

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@
