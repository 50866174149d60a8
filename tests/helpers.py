"""Helpers shared by the tests (test modules import from here, never from each other)."""

from __future__ import annotations

import contextlib
import functools
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

import httpx
import orjson
import trio

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterator

    import sluice
    from sluice import CallEvent, ChatRequest
    from sluice._runtime import CallStream

P = ParamSpec("P")
T = TypeVar("T")


def virtual_deadline(
    seconds: float,
) -> Callable[[Callable[P, Awaitable[T]]], Callable[P, Awaitable[T]]]:
    """Fail the test if it runs longer than ``seconds`` of trio time."""

    def decorate(fn: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]:
        @functools.wraps(fn)
        async def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
            with trio.fail_after(seconds):
                return await fn(*args, **kwargs)

        return wrapper

    return decorate


def memory_transport(app, nursery: trio.Nursery):
    """sluice's own HTTP/1.1 transport, connected to a simulator app over in-memory streams.

    Every connection the pool opens is a ``memory_stream_pair`` whose server end is served by
    the simulator's real HTTP/1.1 server loop in ``nursery``: real bytes, no sockets, so
    ``autojump_clock`` is safe.
    """
    import trio.testing

    from sluice.simulator._server import serve_connection
    from sluice.transport import FastTransport

    async def open_stream(host: str, port: int) -> trio.abc.Stream:
        client, server = trio.testing.memory_stream_pair()
        nursery.start_soon(serve_connection, app, server)
        return client

    return FastTransport(open_stream=open_stream, max_connections=1000)


SLUICE = str(Path(sys.executable).with_name("sluice"))
"""The installed ``sluice`` command of the interpreter running the tests."""


@contextlib.contextmanager
def sim_process(*flags: str) -> Iterator[str]:
    """``sluice sim --port 0 FLAGS`` in a subprocess on loopback; yields its base URL (``/v1``).

    The server prints its address once it listens, so the URL is ready when yielded; it is
    terminated (and waited for) when the block ends, whatever happened inside.
    """
    argv = [SLUICE, "sim", "--port", "0", *flags]
    with subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as proc:
        try:
            assert proc.stdout is not None
            banner = proc.stdout.readline()
            assert "listening on " in banner, banner + proc.stdout.read()
            yield banner.split("listening on ")[1].strip()
        finally:
            proc.terminate()
            proc.wait(timeout=10)


def start_batch(*args: str) -> subprocess.Popen[bytes]:
    """``sluice batch ARGS`` in a subprocess, its output piped."""
    return subprocess.Popen(
        [SLUICE, "batch", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )


def count_lines(path: Path) -> int:
    """How many whole lines ``path`` holds (0 before it exists)."""
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def whole_lines(path: Path) -> list[dict[str, Any]]:
    """Every line of ``path``, parsed: each must be complete JSON ending in a newline."""
    data = path.read_bytes() if path.exists() else b""
    assert data == b"" or data.endswith(b"\n")
    return [orjson.loads(line) for line in data.splitlines()]


def wait_for_lines(proc: subprocess.Popen[bytes], out: Path, n: int, timeout: float = 60) -> int:
    """Poll (a synchronous test, a real process) until ``out`` holds ``n`` lines; return how
    many it holds then. Fails if ``proc`` exits first or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while (found := count_lines(out)) < n:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the batch made no progress"
        time.sleep(0.005)
    return found


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    """An environment with nothing of the machine's sluice setup: no config, keys or ledger."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith("SLUICE_") and not name.endswith(("_API_KEY", "_KEY"))
    }
    env.update(
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / "config"),
        XDG_DATA_HOME=str(home / "data"),
        SLUICE_LEDGER_DB="off",
    )
    env.update(extra)
    return env


def request_line(custom_id: str, model: str = "sim:sim-small") -> str:
    body = {"model": model, "messages": [{"role": "user", "content": f"say {custom_id}"}]}
    return orjson.dumps(
        {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": body}
    ).decode()


class Recorder(httpx.AsyncBaseTransport):
    """Wraps a transport; records when each request was sent and whether its body was read out."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.sent_at: list[float] = []
        self.closed_early: list[bool] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.sent_at.append(trio.current_time())
        response = await self.inner.handle_async_request(request)
        index = len(self.closed_early)
        self.closed_early.append(False)
        stream = response.stream
        assert isinstance(stream, httpx.AsyncByteStream)
        inner: httpx.AsyncByteStream = stream
        recorder = self

        class Stream(httpx.AsyncByteStream):
            """A plain iterator (not an async generator), so leaving early warns about nothing."""

            def __init__(self) -> None:
                self.pieces = inner.__aiter__()
                self.finished = False

            def __aiter__(self) -> Stream:
                return self

            async def __anext__(self) -> bytes:
                try:
                    return await self.pieces.__anext__()
                except StopAsyncIteration:
                    self.finished = True
                    raise

            async def aclose(self) -> None:
                recorder.closed_early[index] = not self.finished
                await inner.aclose()

        return httpx.Response(response.status_code, headers=response.headers, stream=Stream())


async def collect(
    rt: sluice.Runtime, request: ChatRequest | str, prompt: str = "hi"
) -> tuple[list[CallEvent], CallStream]:
    """Every event of one call, and its stream (for ``result`` and ``error``)."""
    async with (
        rt.stream(request, prompt) if isinstance(request, str) else rt.stream(request) as call
    ):
        events = [event async for event in call]
    return events, call
