"""Rules for every test here.

- Timing logic runs under ``autojump_clock`` over in-memory transports (``httpx.MockTransport``
  or the simulator's ``mock_transport``, trio memory streams), never real sockets: autojump can
  fire while bytes are in flight. Times are asserted exactly.
- Every actor test has a trio-time deadline (``virtual_deadline`` or ``trio.fail_after``), so a
  deadlock fails fast instead of spinning the autojump clock forever.
- Randomness comes from a seeded ``random.Random``; jitter is set to 0 where a test needs an
  exact schedule.
- End-to-end tests over loopback use the real clock with short timeouts and assert behaviour,
  not timing.
- No autouse async fixtures (pytest-trio never runs them). The one sync autouse fixture turns
  the ledger file off (``SLUICE_LEDGER_DB=off``).
- ``make test`` runs the suite in two passes: everything not marked ``serial`` spread over one
  worker per core (pytest-xdist), then the ``serial`` tests alone. Serial are the modules in
  ``SERIAL_MODULES``: real processes and real clocks whose assertions count calls per window of
  wall time or bound measured latencies, which a second worker's load on the same cores would
  skew. Each xdist worker has its own session, hence its own ``redis_url`` server.
"""

import os
import signal
from pathlib import Path

import pytest
from hypothesis import settings

# A suite started in the background by a non-interactive shell (``make test &``) inherits
# SIGINT ignored, and Python then keeps it ignored: the Ctrl-C tests need Python's own handler.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# In CI, property tests run a fixed, derandomized set of examples: a red build then always
# means a change broke something, never that a new random example turned up an old bug
# (those are found locally, where examples stay random). No deadline: CI boxes are shared.
settings.register_profile("ci", derandomize=True, deadline=None)
settings.register_profile("dev", deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")


SERIAL_MODULES = frozenset(
    {
        "test_batch_pacing",
        "test_groups_shared",
        "test_loadtest_accuracy",
        "test_loadtest_edges",
        "test_loadtest_sim",
        "test_ray",
        "test_redis_gauges",
        "test_redis_outages",
        "test_redis_shards",
        "test_redis_shared",
        "test_shared_budget_faults",
        "test_store_epoch",
    }
)
"""Modules whose tests measure wall-clock rates or latencies of real processes: run alone."""


def pytest_configure(config: pytest.Config) -> None:
    here = Path(__file__).parent
    if missing := sorted(m for m in SERIAL_MODULES if not (here / f"{m}.py").exists()):
        # A renamed module would otherwise join the parallel pass without a word.
        raise pytest.UsageError(f"tests/conftest.py SERIAL_MODULES names no file: {missing}")
    config.addinivalue_line(
        "markers", "serial: measures wall-clock time; `make test` runs it after the parallel pass"
    )


@pytest.fixture(autouse=True)
def _no_ledger_file(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep every test off the user's ledger file (``~/.local/share/sluice``): a runtime
    persists its ledger only where a test says so (``ledger.path`` or ``ledger_store``).
    Sync, so pytest-trio runs it; subprocesses inherit the variable."""
    monkeypatch.setenv("SLUICE_LEDGER_DB", "off")


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory):
    """A ``redis-server`` shared by the session's tests (each test uses its own key prefix)."""
    from tests.redis_server import RedisServer

    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server.url
    server.stop()


@pytest.fixture
def redis_server(tmp_path):
    """A ``redis-server`` of the test's own, which the test may stop and start again."""
    from tests.redis_server import RedisServer

    server = RedisServer(tmp_path)
    server.start()
    yield server
    server.stop()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the tests of :data:`SERIAL_MODULES` ``serial``. Tests marked ``minutes`` (full-size
    real-time runs) are deselected unless the ``-m`` expression names them (``make test`` runs
    them in a pass of their own, ``pytest -m minutes``); the suite also keeps scaled versions."""
    for item in items:
        if item.path.stem in SERIAL_MODULES:
            item.add_marker(pytest.mark.serial)
    if "minutes" in (config.getoption("markexpr") or ""):
        return
    keep = [item for item in items if item.get_closest_marker("minutes") is None]
    if len(keep) < len(items):
        config.hook.pytest_deselected(items=[i for i in items if i not in keep])
        items[:] = keep
