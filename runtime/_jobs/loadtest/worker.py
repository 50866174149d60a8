"""A ``sluice loadtest --workers`` worker process: its share of the schedule, sent through a
runtime of its own (:mod:`sluice._cli.loadtest_workers` is the parent's side and says how they
talk).

It lives here, not beside the parent in :mod:`sluice._cli`, so that starting one
(``python -m sluice._jobs.loadtest.worker``) imports the load tester and the runtime only, not
the command line (cyclopts and every command), which a worker never uses: that import was a
good part of each worker's start-up CPU.
"""

from __future__ import annotations

import base64
import os
import pickle
import sys
import time
from typing import TYPE_CHECKING, Any

import attrs
import orjson
import trio

from ..._config import RuntimeConfig
from ..._errors import ConfigError
from .endpoints import DirectTarget
from .options import LoadTestOptions

if TYPE_CHECKING:
    from .run import Progress
    from .workers import Start

__all__ = ["CALIBRATION", "Lines", "Spec", "main"]

CALIBRATION = (10, 3.0)
"""The warm-up of the first worker under ``--workers auto`` (requests, seconds: whichever
comes first, at least the warm-up asked for): enough requests one after another to measure
what one costs the client."""


@attrs.frozen
class Spec:
    """What a worker runs: the options, the runtime config the parent built from them (its
    providers checked once, there; secrets travel only down the worker's stdin), and where
    its records go."""

    options: LoadTestOptions
    config: RuntimeConfig
    direct: DirectTarget | None
    folder: str
    records: str
    warmup: str
    calibrate: bool


class Lines:
    """JSON lines read from a stream."""

    def __init__(self, stream: trio.abc.ReceiveStream) -> None:
        self.stream = stream
        self.buffer = bytearray()

    async def next(self) -> dict[str, Any] | None:
        """The next message, None at the end of the stream."""
        while True:
            end = self.buffer.find(b"\n")
            if end >= 0:
                line = bytes(self.buffer[:end])
                del self.buffer[: end + 1]
                if line.strip():
                    message: dict[str, Any] = orjson.loads(line)
                    return message
                continue
            data = await self.stream.receive_some(65536)
            if not data:
                return None
            self.buffer += data


def _worker_test(spec: Spec) -> tuple[Any, Any]:
    """The worker's test (with the calibration warm-up when it measures its cost) and the
    simulator it starts in-process, if its provider is the simulator with no base URL."""
    from .options import build_test

    options = attrs.evolve(spec.options, server_metrics=None)
    test = build_test(options).test
    if spec.calibrate:
        count, seconds = CALIBRATION
        test = attrs.evolve(
            test,
            warmup=max(test.warmup, count),
            warmup_seconds=max(test.warmup_seconds, seconds),
        )
    simulator = None
    if options.provider == "sim" and options.base_url is None:
        from ...simulator import SimulatorConfig

        simulator = SimulatorConfig(output_tokens=1_000_000)
    return test, simulator


async def _worker(spec: Spec, out: trio.abc.SendStream, lines: Lines) -> None:
    from pathlib import Path

    from ..._runtime import open_runtime
    from .run import Interrupt, run_load
    from .workers import Share, Start, cpu_per_request

    async def emit(message: dict[str, Any]) -> None:
        await out.send_all(orjson.dumps(message) + b"\n")

    from ..._gc import freeze_setup, tune_for_service

    test, simulator = _worker_test(spec)
    tune_for_service()  # as the sluice command does: a worker is a process sluice owns
    interrupt = Interrupt()
    sends: list[float] = []
    started = trio.Event()
    begin: list[Start] = []
    cost: list[float | None] = [None]

    def on_send() -> None:
        if not started.is_set():
            sends.append(time.process_time())

    async def commands() -> None:
        while (message := await lines.next()) is not None:
            if "start" in message:
                t0 = message["start"] - time.perf_counter() + trio.current_time()
                begin.append(Start(t0, Share(message["index"], message["count"])))
                started.set()
            elif message.get("stop") == "cancelled":
                interrupt.cancel(message.get("cause", "Ctrl-C"))
            elif message.get("stop") == "drained":
                interrupt.drain(message.get("cause", "Ctrl-C"))
        interrupt.cancel("the parent process ended")
        started.set()

    async def start_at() -> Start:
        cost[0] = cpu_per_request(sends, time.process_time())
        freeze_setup()  # after the measure: a collection is no request's cost
        await emit({"ready": {"cpu_per_request": cost[0]}})
        await started.wait()
        return begin[0] if begin else Start(trio.current_time(), Share(0, 1))

    progress_messages: list[Progress] = []

    def progress(p: Progress) -> None:
        progress_messages.append(p)

    async def report_progress() -> None:
        while True:
            await trio.sleep(1.0)
            if progress_messages:
                await emit({"progress": attrs.asdict(progress_messages[-1])})
                progress_messages.clear()

    async with open_runtime(spec.config, simulator=simulator) as rt, trio.open_nursery() as nursery:
        nursery.start_soon(commands)
        nursery.start_soon(report_progress)
        run = await run_load(
            rt,
            test,
            progress=progress,
            on_send=on_send,
            interrupt=interrupt,
            direct=spec.direct,
            folder=Path(spec.folder),
            start_at=start_at,
            aggregates=False,  # the parent's, of every worker's records
        )
        nursery.cancel_scope.cancel()
    _write_lines(spec.records, run.records)
    _write_lines(spec.warmup, run.warmup)
    await emit({"done": {"started_at": run.started_at, "interrupted": run.interrupted}})


def _write_lines(path: str, records: Any) -> None:
    from .records import RecordDicts

    with open(path, "wb") as file:
        for line in RecordDicts(records).lines():
            file.write(line + b"\n")


def main() -> int:
    """A worker's process: the spec from stdin's first line, then the protocol above."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent passes a Ctrl-C on

    async def go() -> int:
        out = trio.lowlevel.FdStream(os.dup(sys.stdout.fileno()))
        lines = Lines(trio.lowlevel.FdStream(os.dup(sys.stdin.fileno())))
        first = await lines.next()
        if first is None:
            return 2  # the parent ended before it said what to run
        spec: Spec = pickle.loads(base64.b64decode(first["spec"]))
        try:
            await _worker(spec, out, lines)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return 1  # the parent is gone: nobody to tell
        except ConfigError as exc:
            await out.send_all(orjson.dumps({"error": str(exc), "kind": "config"}) + b"\n")
            return 2
        except OSError as exc:
            message = {"error": exc.strerror or str(exc), "kind": "os", "errno": exc.errno}
            message["filename"] = None if exc.filename is None else str(exc.filename)
            await out.send_all(orjson.dumps(message) + b"\n")
            return 1
        return 0

    return trio.run(go)


if __name__ == "__main__":
    raise SystemExit(main())
