"""Helpers shared by the tests."""

from __future__ import annotations

import contextlib
import functools
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, ParamSpec, TypeVar

import trio

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterator

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


def memory_transport(app, nursery: trio.Nursery):  # type: ignore[no-untyped-def]
    """sluice's own HTTP/1.1 transport, connected to a simulator app over in-memory streams.

    Every connection the pool opens is a ``memory_stream_pair`` whose server end is served by
    the simulator's real HTTP/1.1 server loop in ``nursery``: real bytes, no sockets, so
    ``autojump_clock`` is safe.
    """
    import trio.testing

    from sluice.simulator.server import serve_connection
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
