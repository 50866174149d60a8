"""The front doors as benchmark sides: ``sluice.aio`` on an asyncio loop, ``sluice.sync`` on
a pool of threads, each in threads of their own so the benchmark's trio run only waits.

Each door keeps one runtime open for the whole run (as the trio side does) and runs phases on
request: ``calls`` streamed calls in a closed loop of ``concurrency`` workers, every event
iterated, exactly the trio side's ``--api stream`` pattern.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import sluice
import sluice.aio
import sluice.sync

from ._harness import PROMPT, Tally, record_outcome


class AioDoor:
    """``sluice.aio`` on an asyncio loop (uvloop if asked) running in its own thread."""

    def __init__(self, config: sluice.RuntimeConfig, *, uvloop: bool = False) -> None:

        self.loop: asyncio.AbstractEventLoop
        if uvloop:
            import uvloop as _uvloop

            self.loop = _uvloop.new_event_loop()
        else:
            self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="aio door")
        self._thread.start()
        self._opened = asyncio.Event()
        self._close = asyncio.Event()
        self._holder = asyncio.run_coroutine_threadsafe(self._hold(config), self.loop)
        self.rt: sluice.aio.Runtime | None = None
        asyncio.run_coroutine_threadsafe(self._opened.wait(), self.loop).result(60)

    async def _hold(self, config: sluice.RuntimeConfig) -> None:
        import sluice.aio

        async with sluice.aio.open_runtime(config) as rt:
            self.rt = rt
            self._opened.set()
            await self._close.wait()

    def phase(self, model: str, calls: int, concurrency: int, tally: Tally) -> None:
        """Blocks until ``calls`` calls are done (call it from a worker thread)."""
        phase = self._phase(model, calls, concurrency, tally)
        asyncio.run_coroutine_threadsafe(phase, self.loop).result()

    async def _phase(self, model: str, calls: int, concurrency: int, tally: Tally) -> None:
        rt = self.rt
        assert rt is not None
        left = calls

        async def worker() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                async with rt.stream(sluice.ChatRequest(model=model, messages=PROMPT)) as call:
                    async for _event in call:
                        pass
                record_outcome(tally, call.result, call.error)

        await asyncio.gather(*(worker() for _ in range(min(calls, concurrency))))

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self._close.set)
        self._holder.result(60)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(60)
        self.loop.close()


class SyncDoor:
    """``sluice.sync`` called from a pool of ``concurrency`` threads."""

    def __init__(self, config: sluice.RuntimeConfig, concurrency: int) -> None:
        import sluice.sync

        self._context = sluice.sync.open_runtime(config)
        self.rt: sluice.sync.Runtime = self._context.__enter__()
        self._pool = ThreadPoolExecutor(concurrency, thread_name_prefix="sync door")
        self._lock = threading.Lock()

    def phase(self, model: str, calls: int, concurrency: int, tally: Tally) -> None:
        """Blocks until ``calls`` calls are done."""
        rt = self.rt
        left = [calls]
        lock = self._lock

        def worker() -> None:
            while True:
                with lock:
                    if left[0] <= 0:
                        return
                    left[0] -= 1
                call = rt.stream(sluice.ChatRequest(model=model, messages=PROMPT))
                for _event in call:
                    pass
                with lock:
                    record_outcome(tally, call.result, call.error)

        futures = [self._pool.submit(worker) for _ in range(min(calls, concurrency))]
        for future in futures:
            future.result()

    def close(self) -> None:
        self._pool.shutdown()
        self._context.__exit__(None, None, None)


def open_door(api: str, config: sluice.RuntimeConfig, concurrency: int, **options: Any) -> Any:
    """The door ``api`` names (``aio``, ``aio_uvloop`` or ``sync``), its runtime open."""
    if api == "sync":
        return SyncDoor(config, concurrency)
    return AioDoor(config, uvloop=api == "aio_uvloop")
