"""What the sluice.ray tests share: a local Ray kept small, the simulator over loopback counting
what reaches it, and the config that points sluice at it through a real Redis.

The simulator runs in a thread of the test process; Ray's actors are other processes and
reach it over HTTP, as they would reach a provider. It records, on its own clock, when each
generation request arrived and how it was answered.
"""

from __future__ import annotations

import bisect
import contextlib
import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

import sluice
from sluice.simulator import SimResponse, SimulatorApp, SimulatorConfig, serve_simulator

if TYPE_CHECKING:
    from collections.abc import Iterator

ROOT = Path(__file__).resolve().parents[1]
GENERATION = frozenset({"/v1/chat/completions"})


def start_ray() -> None:
    """A local Ray of two CPUs: no dashboard, a small object store, quiet progress."""
    import ray
    from ray.data import DataContext

    ray.init(
        num_cpus=2,
        include_dashboard=False,
        object_store_memory=96 * 1024 * 1024,
        log_to_driver=False,
        configure_logging=False,
        # Workers import tests.* (the test subclasses of Caller) and keep off the user's
        # ledger file, as the test process does.
        runtime_env={"env_vars": {"PYTHONPATH": str(ROOT), "SLUICE_LEDGER_DB": "off"}},
    )
    context = DataContext.get_current()
    context.enable_progress_bars = False
    context.print_on_execution_start = False


class CountingApp(SimulatorApp):
    """The simulator, noting each generation request's arrival time and answer status."""

    def __init__(self, config: SimulatorConfig | None = None) -> None:
        super().__init__(config)
        self.arrivals: list[float] = []
        self.statuses: list[int] = []
        self.prompts: list[bytes] = []

    async def handle(self, method: str, path: str, headers: Any, body: bytes) -> SimResponse:
        generation = method == "POST" and path.partition("?")[0] in GENERATION
        if generation:
            self.arrivals.append(time.monotonic())
            self.prompts.append(body)
        try:
            response = await super().handle(method, path, headers, body)
        except BaseException:
            if generation:
                self.statuses.append(0)  # a reset: no status at all
            raise
        if generation:
            self.statuses.append(response.status)
        return response

    @property
    def seen(self) -> int:
        return len(self.arrivals)


@contextlib.contextmanager
def simulator(config: SimulatorConfig | None = None) -> Iterator[tuple[str, CountingApp]]:
    """Serve a :class:`CountingApp` on 127.0.0.1 from a thread; yields its base URL."""
    app = CountingApp(config)
    ready = threading.Event()
    bound: list[int] = []
    stop: list[trio.CancelScope] = []
    token: list[trio.lowlevel.TrioToken] = []

    async def main() -> None:
        token.append(trio.lowlevel.current_trio_token())
        with trio.CancelScope() as scope:
            stop.append(scope)
            async with trio.open_nursery() as nursery:
                bound.append(await nursery.start(serve_simulator, app))
                ready.set()

    thread = threading.Thread(target=trio.run, args=(main,), name="simulator", daemon=True)
    thread.start()
    try:
        assert ready.wait(10), "the simulator did not start"
        yield f"http://127.0.0.1:{bound[0]}/v1", app
    finally:
        if token:
            with contextlib.suppress(trio.RunFinishedError):
                token[0].run_sync_soon(stop[0].cancel)
        thread.join(10)


def sim_config(url: str, redis_url: str, prefix: str, **rate_limit: Any) -> sluice.RuntimeConfig:
    """sluice pointed at the simulator as provider ``loop`` (OpenAI-compatible), sharing its
    quotas through ``redis_url`` under ``prefix``; ``rate_limit`` is the provider's."""
    return sluice.load_config(
        {
            "providers": {"loop": {"base_url": url, "api_key": "k", "rate_limit": rate_limit}},
            "store": redis_url,
            "store_prefix": prefix,
            "ledger": {"persist": False},
            # Errors are retried at once and often: the tests wait on faults, not backoff.
            "retry": {"jitter": 0.0, "base_delay": 0.05, "max_delay": 0.5},
        }
    )


def most_in_any_window(arrivals: list[float], period: float) -> int:
    """The most arrivals in any half-open interval ``[t, t + period)``."""
    times = sorted(arrivals)
    return max((bisect.bisect_left(times, t + period) - i for i, t in enumerate(times)), default=0)


def questions(n: int, start: int = 0) -> list[dict[str, Any]]:
    return [{"id": i, "question": f"question number {i}"} for i in range(start, start + n)]


def env_for_driver() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "SLUICE_LEDGER_DB": "off"}
