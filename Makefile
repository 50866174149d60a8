# The two commands of the README, for a fresh machine (Debian, python3 with venv, make):
#   make demo   set up .venv, then run a 120-call batch against the built-in simulator
#   make test   set up .venv, then lint, type-check and run the whole test suite
# Both can be run again at any time: .venv is (re)installed only when pyproject.toml or the list
# of modules changes.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
MODULE_LIST := $(VENV)/.modules

.PHONY: demo test lint typecheck redis-server FORCE

demo: $(STAMP)
	$(BIN)/sluice batch examples/demo_batch.jsonl -o out/demo_results.jsonl --overwrite

# Three passes: the tests that may share the cores, one xdist worker per core; then the "serial"
# ones alone (they count calls per window of wall time; see tests/conftest.py); then the
# full-size real-time runs (marked "minutes": several minutes each, mostly waiting on a quota,
# so the stack dump that shows a hang waits 15 minutes instead of the suite's 2).
test: lint typecheck redis-server
	$(BIN)/pytest -q -n auto -m "not serial and not minutes"
	$(BIN)/pytest -q -m "serial and not minutes"
	$(BIN)/pytest -q -m minutes -o faulthandler_timeout=900

# The shared-quota tests run a real Debian redis-server: installed here (quietly) when it is
# missing and we are root with apt-get; otherwise those tests skip, or fail under CI=true.
redis-server:
	@command -v redis-server >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null \
	  && apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	  redis-server >/dev/null; } || echo "redis-server is missing: the Redis tests will skip"

lint: $(STAMP)
	$(BIN)/ruff check runtime actors tests benchmarks
	$(BIN)/lint-imports

# Strict for the package, a looser stated profile for tests and benchmarks (pyproject.toml).
typecheck: $(STAMP)
	$(BIN)/mypy -p sluice -p tests -p benchmarks

# The editable install is setuptools' "strict" mode: it lays out the package under its import
# names (sluice -> runtime/, sluice.actors -> actors/) as a tree of links in build/, so mypy and
# the layer check read it as installed. A module added or removed needs a new tree, hence the
# module list as a prerequisite (rewritten only when it changes).
$(STAMP): pyproject.toml $(MODULE_LIST)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]' --config-settings editable_mode=strict
	touch $@

$(MODULE_LIST): FORCE
	@mkdir -p $(VENV)
	@find runtime actors -name '*.py' -not -path '*/__pycache__/*' | LC_ALL=C sort > $@.new
	@cmp -s $@.new $@ && rm $@.new || mv $@.new $@

FORCE:
