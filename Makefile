# The two commands of the README, for a fresh machine (Debian, python3 with venv, make):
#   make demo   set up .venv, then run a 120-call batch against the built-in simulator
#   make test   set up .venv, then lint, type-check and run the whole test suite
# Both can be run again at any time: .venv is (re)installed only when pyproject.toml changes.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck redis-server

demo: $(STAMP)
	$(BIN)/sluice batch examples/demo_batch.jsonl -o out/demo_results.jsonl

test: lint typecheck redis-server
	$(BIN)/pytest -q

# The shared-quota tests run a real Debian redis-server: installed here (quietly) when it is
# missing and we are root with apt-get; otherwise those tests skip, or fail under CI=true.
redis-server:
	@command -v redis-server >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null \
	  && apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	  redis-server >/dev/null; } || echo "redis-server is missing: the Redis tests will skip"

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
