"""Shared pieces of the benchmarks: closed-loop phases, CPU/wall accounting, the bare client.

A *phase* runs a fixed number of streamed chat calls with a fixed concurrency and measures the
client process's CPU time (``time.process_time``: user + system, all threads) and wall time
around exactly that work. Both contenders run in the same ``trio.run`` so they share the
interpreter, the imports and the warm caches; only the code path per call differs.
"""

from __future__ import annotations

import contextlib
import gc
import os
import re
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import orjson
import trio

import sluice

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterator

__all__ = [
    "BareClient",
    "Expect",
    "Phase",
    "Tally",
    "closed_loop",
    "machine_busy_s",
    "median",
    "mock_url",
    "run_phase",
    "run_sluice",
    "sim_server",
    "versions",
]

PROMPT = "hi"
API_KEY = "sk-mock"


@contextlib.contextmanager
def sim_server(chunks: int) -> Iterator[str]:
    """A ``sluice sim`` process of its own replying with ``chunks`` content chunks: its
    ``/v1`` root while the block runs; stopped after it."""
    command = str(Path(sys.executable).with_name("sluice"))
    sim = subprocess.Popen(
        [command, "sim", "--port", "0", "--output-tokens", str(chunks)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert sim.stdout is not None
        banner = sim.stdout.readline()
        if "listening on " not in banner:
            raise SystemExit(f"sluice sim did not start: {banner}")
        yield banner.split("listening on ")[1].strip()
    finally:
        sim.terminate()
        sim.wait(timeout=10)


# The nginx mock of shared/perf takes its parameters as a path prefix: /c<N>/t<T>/i<I>[/min]/v1.
_MOCK_PATH = re.compile(r"/c(\d+)/t(\d+)/i(\d+)(?:/min)?/v1/?$")


def mock_url(
    base_url: str, chunks: int | None, ttft_ms: int, itl_ms: int
) -> tuple[str, int | None]:
    """The ``/v1`` root to call and the number of content chunks to expect (None: unknown).

    * A URL ending in ``/v1`` is used as it is. If it has the nginx mock's
      ``/c<N>/t<T>/i<I>/v1`` form, N is the expected chunk count (``chunks`` must agree).
    * Any other URL is taken as the nginx mock's root and ``/c<chunks>/t<ttft>/i<itl>/v1`` is
      appended (``chunks`` defaults to 20).
    """
    root = base_url.rstrip("/")
    if root.endswith("/v1"):
        found = _MOCK_PATH.search(root)
        if found is None:
            return root, chunks
        in_url = int(found.group(1))
        if chunks is not None and chunks != in_url:
            raise ValueError(f"--chunks {chunks} contradicts the URL's /c{in_url}/ path")
        return root, in_url
    chunks = 20 if chunks is None else chunks
    return f"{root}/c{chunks}/t{ttft_ms}/i{itl_ms}/v1", chunks


@dataclass(frozen=True)
class Expect:
    """What every successful call must return, when the server is known (mock or simulator)."""

    chunks: int | None
    """Content chunks per reply, which both mocks also report as ``completion_tokens``."""


@dataclass
class Tally:
    """Outcomes of one phase."""

    expect: Expect
    ok: int = 0
    errors: int = 0
    mismatched: int = 0
    """Calls that ended without error but with the wrong number of output tokens."""
    first_errors: list[str] = field(default_factory=list)
    sample_text: str | None = None

    @property
    def done(self) -> int:
        return self.ok + self.errors + self.mismatched

    def success(self, output_tokens: int | None, text: str) -> None:
        want = self.expect.chunks
        if want is not None and output_tokens != want:
            self.mismatched += 1
            self._note(f"expected {want} output tokens, got {output_tokens}")
            return
        self.ok += 1
        if self.sample_text is None:
            self.sample_text = text

    def failure(self, exc: BaseException) -> None:
        self.errors += 1
        text, kind = str(exc), type(exc).__name__
        self._note(text if kind in text else f"{kind}: {text}")

    def _note(self, what: str) -> None:
        if len(self.first_errors) < 5:
            self.first_errors.append(what[:300])


@dataclass(frozen=True)
class Phase:
    """The measurement of one phase."""

    name: str
    calls: int
    ok: int
    errors: int
    mismatched: int
    cpu_s: float
    wall_s: float
    timed_out: bool
    first_errors: list[str]
    sample_text: str | None
    other_cpu_s: float | None
    """CPU time the rest of the machine used meanwhile (other processes, e.g. the server)."""

    @property
    def cpu_s_per_1k(self) -> float:
        return 1000 * self.cpu_s / max(1, self.ok + self.errors + self.mismatched)

    @property
    def calls_per_s(self) -> float:
        return (self.ok + self.errors + self.mismatched) / self.wall_s if self.wall_s else 0.0


async def run_phase(
    name: str,
    calls: int,
    expect: Expect,
    body: Callable[[Tally], Awaitable[None]],
    *,
    max_seconds: float,
) -> Phase:
    """Run ``body`` (which must finish ``calls`` calls into the tally) and measure it.

    A phase that runs longer than ``max_seconds`` is cancelled and marked ``timed_out``; the
    calls it did not finish count as errors.
    """
    gc.collect()
    tally = Tally(expect)
    busy0 = machine_busy_s()
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    with trio.move_on_after(max_seconds) as scope:
        await body(tally)
    wall = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    busy1 = machine_busy_s()
    missing = calls - tally.done
    if missing > 0:
        tally.errors += missing
        tally._note(
            f"{missing} calls did not finish" + (" (timed out)" if scope.cancel_called else "")
        )
    return Phase(
        name=name,
        calls=calls,
        ok=tally.ok,
        errors=tally.errors,
        mismatched=tally.mismatched,
        cpu_s=cpu,
        wall_s=wall,
        timed_out=scope.cancel_called,
        first_errors=tally.first_errors,
        sample_text=tally.sample_text,
        other_cpu_s=None if busy0 is None or busy1 is None else max(0.0, busy1 - busy0 - cpu),
    )


def machine_busy_s() -> float | None:
    """CPU seconds all processors have spent busy since boot (Linux ``/proc/stat``), or None."""
    try:
        with open("/proc/stat", "rb") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != b"cpu":
        return None
    # user nice system idle iowait irq softirq steal ...: busy = all but idle and iowait
    ticks = [int(x) for x in fields[1:9]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


async def closed_loop(calls: int, concurrency: int, one: Callable[[int], Awaitable[None]]) -> None:
    """``concurrency`` workers, each taking the next call until ``calls`` have been started.

    ``one`` gets the worker's number.
    """
    left = calls

    async def worker(number: int) -> None:
        nonlocal left
        while left > 0:
            left -= 1
            await one(number)

    async with trio.open_nursery() as nursery:
        for number in range(min(calls, concurrency)):
            nursery.start_soon(worker, number)


class BareClient:
    """The reference: trio + one shared ``httpx.AsyncClient``, ``aiter_lines``, orjson per line.

    Mirrors ``shared/perf/client_trio_httpx.py``: the pool is sized to the concurrency, the body
    is serialized per call and is byte for byte what sluice sends for the same request. With
    ``per_worker`` each worker gets its own 1-connection client instead (the reference's
    ``--variant perworker``), which sidesteps httpcore 1.0's scan of the whole pool per request.
    """

    def __init__(
        self, base_url: str, model: str, concurrency: int, per_worker: bool = False
    ) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.body = {
            "model": model,
            "messages": [{"role": "user", "content": PROMPT}],
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        self.headers = {
            "content-type": "application/json",
            "accept": "text/event-stream",
            "authorization": f"Bearer {API_KEY}",
        }
        if per_worker:
            limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
            self.clients = [
                httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(60.0))
                for _ in range(concurrency)
            ]
        else:
            limits = httpx.Limits(
                max_connections=concurrency, max_keepalive_connections=concurrency
            )
            self.clients = [httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(60.0))]

    async def aclose(self) -> None:
        for client in self.clients:
            await client.aclose()

    async def one(self, client: httpx.AsyncClient, tally: Tally) -> None:
        try:
            output_tokens, text = await self._stream(client)
        except Exception as exc:
            tally.failure(exc)
        else:
            tally.success(output_tokens, text)

    async def _stream(self, client: httpx.AsyncClient) -> tuple[int | None, str]:
        parts: list[str] = []
        output_tokens = None
        body = orjson.dumps(self.body)
        async with client.stream("POST", self.url, content=body, headers=self.headers) as r:
            if r.status_code != 200:
                await r.aread()
                raise RuntimeError(f"HTTP {r.status_code}: {r.content[:200]!r}")
            async for line in r.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    continue  # read to the end so the connection goes back to the pool
                chunk = orjson.loads(data)
                choices = chunk.get("choices")
                if choices:
                    content = choices[0]["delta"].get("content")
                    if content:
                        parts.append(content)
                usage = chunk.get("usage")
                if usage:
                    output_tokens = usage.get("completion_tokens")
        return output_tokens, "".join(parts)

    async def run(self, calls: int, concurrency: int, tally: Tally) -> None:
        clients = self.clients
        await closed_loop(calls, concurrency, lambda i: self.one(clients[i % len(clients)], tally))


def record_outcome(
    tally: Tally, result: sluice.ChatResult | None, error: BaseException | None
) -> None:
    if result is not None:
        tally.success(result.usage.output_tokens, result.text)
    else:
        tally.failure(error or RuntimeError("neither result nor error"))


async def run_sluice(
    rt: sluice.Runtime, model: str, calls: int, concurrency: int, api: str, tally: Tally
) -> None:
    """``calls`` streamed calls through the whole runtime, at most ``concurrency`` at once.

    ``api``: ``map`` (``rt.map``), ``chat`` (``await rt.chat`` per call in a closed loop) or
    ``stream`` (``async with rt.stream`` per call, iterating every event).
    """
    if api == "map":
        requests = (sluice.ChatRequest(model=model, messages=PROMPT) for _ in range(calls))
        async with rt.map(requests, max_in_flight=concurrency) as outcomes:
            async for outcome in outcomes:
                record_outcome(tally, outcome.result, outcome.error)
        return

    async def chat(_worker: int) -> None:
        try:
            result = await rt.chat(sluice.ChatRequest(model=model, messages=PROMPT))
        except sluice.SluiceError as exc:
            record_outcome(tally, None, exc)
        else:
            record_outcome(tally, result, None)

    async def stream(_worker: int) -> None:
        async with rt.stream(sluice.ChatRequest(model=model, messages=PROMPT)) as call:
            async for _event in call:
                pass
        record_outcome(tally, call.result, call.error)

    if api == "chat":
        await closed_loop(calls, concurrency, chat)
    elif api == "stream":
        await closed_loop(calls, concurrency, stream)
    else:
        raise ValueError(f"unknown api {api!r}")


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def versions() -> dict[str, Any]:
    found: dict[str, Any] = {
        "python": sys.version.split()[0],
        "sluice_source": os.path.dirname(os.path.abspath(sluice.__file__)),
    }
    for package in ("sluice", "trio", "httpx", "httpcore", "h11", "orjson"):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = None
    return found
