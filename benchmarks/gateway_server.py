"""The gateway's HTTP server against hypercorn (trio worker) on the same trivial streaming app.

Both servers answer every request with the same 20-chunk SSE body, written chunk by chunk (21
writes), so the difference is the server alone: request parsing, framing, the ASGI hop. Each
runs in its own process; the open-loop generator of :mod:`benchmarks._open_loop` sends requests
at ``--rate`` for ``--duration`` seconds, and the server process's CPU time is divided by the
requests answered. This is the measurement behind serving the gateway with its own h11-style
loop rather than hypercorn (see ``sluice._gateway.http``).

    python3 -m venv /tmp/hc && /tmp/hc/bin/pip install hypercorn trio   # never in .venv
    .venv/bin/python -m benchmarks.gateway_server --hypercorn /tmp/hc/bin/hypercorn --rate 300

Prints one JSON line: per server ``cpu_us_per_request``, ``p50_ms``, ``p99_ms``, ``errors``.
Without ``--hypercorn`` only sluice's server is measured.
"""

from __future__ import annotations

import argparse
import contextlib
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
import trio

from ._open_loop import Generator, percentile, request_bytes
from .gateway import family_cpu

CHUNK = (
    b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m",'
    b'"choices":[{"index":0,"delta":{"content":" alpha"},"logprobs":null,'
    b'"finish_reason":null}]}\n\n'
)
DONE = b"data: [DONE]\n\n"

ASGI_APP = f"""
CHUNK = {CHUNK!r}
DONE = {DONE!r}

async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({{"type": "lifespan.startup.complete"}})
            else:
                await send({{"type": "lifespan.shutdown.complete"}})
                return
    more = True
    while more:
        more = (await receive()).get("more_body", False)
    headers = [(b"content-type", b"text/event-stream")]
    await send({{"type": "http.response.start", "status": 200, "headers": headers}})
    for _ in range(20):
        await send({{"type": "http.response.body", "body": CHUNK, "more_body": True}})
    await send({{"type": "http.response.body", "body": DONE, "more_body": False}})
"""


async def _handler(request: Any, respond: Any) -> None:
    respond.start(200, [(b"content-type", b"text/event-stream")])
    for _ in range(20):
        await respond.write(CHUNK)
    await respond.finish(DONE)


async def _serve_own(port: int) -> None:
    from sluice._gateway.http import Server

    listeners = await trio.open_tcp_listeners(port, host="127.0.0.1")
    await Server(_handler).serve_listener(listeners[0])


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait_listening(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("the server exited at start")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.1)
    raise RuntimeError("the server did not start listening")


@contextlib.contextmanager
def _process(argv: list[str], port: int, cwd: str | None = None):
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_listening(port, proc)
        yield proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _measure(pid: int, port: int, rate: float, duration: float) -> dict[str, Any]:
    request = request_bytes("127.0.0.1", port, "/v1/chat/completions", "m", {})
    generator = Generator("127.0.0.1", port, request)
    try:
        generator.phase(rate, min(1.0, duration), drain=10.0)
        before = family_cpu(pid)
        result = generator.phase(rate, duration, drain=10.0)
        cpu = family_cpu(pid) - before
    finally:
        generator.close()
    return {
        "requests": result.ok,
        "errors": result.error_count,
        "cpu_us_per_request": cpu / max(1, result.ok) * 1e6,
        "p50_ms": percentile(result.latencies, 0.5) * 1000,
        "p99_ms": percentile(result.latencies, 0.99) * 1000,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=300.0)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--hypercorn", help="path to a `hypercorn` command (its own venv)")
    parser.add_argument("--serve-own", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_own:
        trio.run(_serve_own, args.serve_own)
        return 0
    report: dict[str, Any] = {"rate": args.rate, "duration": args.duration}
    port = _free_port()
    own = [sys.executable, "-m", "benchmarks.gateway_server", "--serve-own", str(port)]
    with _process(own, port) as pid:
        report["sluice"] = _measure(pid, port, args.rate, args.duration)
    if args.hypercorn:
        with tempfile.TemporaryDirectory() as scratch:
            (Path(scratch) / "bench_asgi.py").write_text(ASGI_APP)
            port = _free_port()
            argv_hc = [args.hypercorn, "--worker-class", "trio", "--bind", f"127.0.0.1:{port}"]
            with _process([*argv_hc, "bench_asgi:app"], port, cwd=scratch) as pid:
                report["hypercorn"] = _measure(pid, port, args.rate, args.duration)
    print(orjson.dumps(report).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
