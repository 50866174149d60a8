"""Added latency of ``sluice serve`` (and of LiteLLM's proxy) in front of a fast upstream.

One open-loop load generator sends streamed chat-completions requests at fixed rates (default
200, 500 and 1,000 per second) to each *target* in the same run:

* ``direct``: the upstream itself -- the nginx mock (``../shared/perf/serve.sh start``) or,
  with ``--sim``, a ``sluice sim`` process (for smoke tests; it is far slower than nginx);
* ``sluice-wN``: ``sluice serve --workers N`` in front of the upstream, for each N of
  ``--workers`` (default 1 and 2);
* ``litellm-wN``: LiteLLM's proxy in front of it (``--litellm PATH`` to its ``litellm``
  command, installed in a venv of its own -- never in this project's), when given.

Request *i* of a phase is due at ``t0 + i / rate``; its latency runs from that moment (so a
target that falls behind is charged for the queueing it causes) to the last byte of the
response, over keep-alive connections (a new one only when all are busy). "Added" latency is a
target's percentile minus the direct one's at the same rate. CPU per request is the target's
processes' user + system time over the phase (``/proc``), divided by its requests. The
generator runs in this process on trio with raw sockets; it is the same for every target.

    ../shared/perf/serve.sh start
    .venv/bin/python -m benchmarks.gateway --mock http://127.0.0.1:18080 --duration 10
    .venv/bin/python -m benchmarks.gateway --sim --rates 20,50 --duration 2 --workers 1

Prints one JSON line: per target and rate ``p50_ms``, ``p99_ms``, ``added_p50_ms``,
``added_p99_ms``, ``cpu_ms_per_request``, ``errors``; per target ``max_rate_p99_added_under_5ms``
(the highest rate measured whose added p99 is under 5 ms). A table goes to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import orjson
import trio

if TYPE_CHECKING:
    from collections.abc import Iterator

SLUICE = str(Path(sys.executable).with_name("sluice"))
_END = b"0\r\n\r\n"


# ---- the load generator -----------------------------------------------------------------------


def request_bytes(host: str, port: int, path: str, model: str, headers: dict[str, str]) -> bytes:
    body = orjson.dumps(
        {
            "model": model,
            "messages": [{"role": "user", "content": "Say something."}],
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    )
    head = f"POST {path} HTTP/1.1\r\nhost: {host}:{port}\r\ncontent-type: application/json\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return head.encode() + b"content-length: %d\r\n\r\n" % len(body) + body


async def one_phase(
    host: str, port: int, request: bytes, rate: float, duration: float
) -> tuple[list[float], int]:
    """Latencies (seconds) of the requests of one phase, and how many failed."""
    pool: list[trio.SocketStream] = []
    latencies: list[float] = []
    errors = 0

    async def one(due: float) -> None:
        nonlocal errors
        stream = pool.pop() if pool else None
        try:
            if stream is None:
                stream = await trio.open_tcp_stream(host, port)
            await stream.send_all(request)
            tail = b""
            first = True
            while not tail.endswith(_END):
                data = await stream.receive_some(65536)
                if not data:
                    raise trio.BrokenResourceError("closed mid-response")
                if first:
                    first = False
                    if not data.startswith(b"HTTP/1.1 200"):
                        raise RuntimeError(data[:200].decode(errors="replace"))
                tail = (tail + data)[-16:]
            latencies.append(trio.current_time() - due)
            pool.append(stream)
        except (OSError, trio.BrokenResourceError, RuntimeError):
            errors += 1
            if stream is not None:
                await trio.aclose_forcefully(stream)

    count = max(1, int(rate * duration))
    async with trio.open_nursery() as nursery:
        t0 = trio.current_time() + 0.05
        for i in range(count):
            due = t0 + i / rate
            await trio.sleep_until(due)
            nursery.start_soon(one, due)
    for stream in pool:
        await trio.aclose_forcefully(stream)
    return latencies, errors


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# ---- the targets' processes -------------------------------------------------------------------


def _family_cpu(pid: int) -> float:
    """CPU seconds of ``pid`` and all its descendants (``/proc``): its live threads' time on a
    CPU from ``schedstat`` (nanoseconds; ``stat``'s clock ticks of 10 ms are too coarse for a
    short phase of a fast server), or ``stat``'s user + system when that is more."""
    children: dict[int, list[int]] = {}
    times: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        ppid = int(fields[1])
        children.setdefault(ppid, []).append(int(entry))
        # The larger of the two: a thread that has exited is gone from schedstat, not from stat.
        ticks = (int(fields[11]) + int(fields[12])) / tick
        times[int(entry)] = max(ticks, _threads_cpu(int(entry)) or 0.0)
    total, pending = 0.0, [pid]
    while pending:
        p = pending.pop()
        total += times.get(p, 0.0)
        pending.extend(children.get(p, []))
    return total


def _threads_cpu(pid: int) -> float | None:
    """Seconds on a CPU of the live threads of ``pid`` (None if ``schedstat`` is missing)."""
    total = 0
    try:
        for thread in os.listdir(f"/proc/{pid}/task"):
            total += int(Path(f"/proc/{pid}/task/{thread}/schedstat").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return total / 1e9


@contextlib.contextmanager
def sluice_gateway(upstream: str, workers: int, scratch: Path):
    """``sluice serve`` in front of ``upstream`` (an OpenAI-compatible ``/v1`` base URL)."""
    config = scratch / f"gateway-{workers}.json"
    config.write_text(
        json.dumps(
            {
                "ledger": {"persist": False},
                "retry": {"max_attempts": 1},
                "providers": {
                    "mock": {"protocol": "openai", "base_url": upstream, "api_key": "sk-mock"}
                },
            }
        )
    )
    argv = [SLUICE, "serve", "--port", "0", "--no-auth", "--config", str(config)]
    argv += ["--workers", str(workers)]
    env = {**os.environ, "SLUICE_LEDGER_DB": "off"}
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    try:
        assert proc.stdout is not None
        banner = proc.stdout.readline()
        if "listening on" not in banner:
            raise RuntimeError(f"sluice serve did not start: {banner}{proc.stdout.read()}")
        port = int(banner.split("listening on ")[1].split()[0].rsplit(":", 1)[1])
        yield proc.pid, port, "/v1/chat/completions", "mock:gpt-4o-mini"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def litellm_proxy(
    litellm: str, upstream: str, workers: int, scratch: Path, port: int
) -> Iterator[tuple[int, int, str, str]]:
    config = scratch / f"litellm-{workers}.yaml"
    config.write_text(
        "model_list:\n"
        "  - model_name: mock\n"
        "    litellm_params:\n"
        "      model: openai/gpt-4o-mini\n"
        f"      api_base: {upstream}\n"
        "      api_key: sk-mock\n"
        "litellm_settings:\n"
        "  telemetry: false\n"
        "general_settings:\n"
        "  master_key: sk-bench-0123456789abcdef0123456789abcdef\n"
    )
    argv = [litellm, "--config", str(config), "--port", str(port), "--num_workers", str(workers)]
    log = open(scratch / f"litellm-{workers}.log", "w")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        import httpx

        while True:
            try:
                if (
                    httpx.get(f"http://127.0.0.1:{port}/health/liveliness", timeout=1).status_code
                    == 200
                ):
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                log.flush()
                tail = Path(log.name).read_text()[-500:]
                raise RuntimeError(f"litellm did not start: {tail}")
            time.sleep(0.5)
        yield proc.pid, port, "/v1/chat/completions", "mock"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


@contextlib.contextmanager
def sim_upstream():
    proc = subprocess.Popen(
        [SLUICE, "sim", "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        assert proc.stdout is not None
        banner = proc.stdout.readline()
        yield proc.pid, banner.split("listening on ")[1].strip()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


# ---- the run ----------------------------------------------------------------------------------


def measure(
    pid: int | None, host: str, port: int, path: str, model: str, rates: list[float], args: Any
) -> dict[str, Any]:
    token = "sk-bench-0123456789abcdef0123456789abcdef"  # LiteLLM's master key; others ignore it
    request = request_bytes(host, port, path, model, {"authorization": f"Bearer {token}"})
    out: dict[str, Any] = {}
    for rate in rates:
        trio.run(one_phase, host, port, request, rate, min(args.warmup, args.duration))
        cpu0 = _family_cpu(pid) if pid is not None else 0.0
        latencies, errors = trio.run(one_phase, host, port, request, rate, args.duration)
        cpu = (_family_cpu(pid) - cpu0) if pid is not None else None
        done = len(latencies)
        out[str(int(rate))] = {
            "requests": done,
            "errors": errors,
            "p50_ms": percentile(latencies, 0.50) * 1000,
            "p99_ms": percentile(latencies, 0.99) * 1000,
            "cpu_ms_per_request": None if cpu is None or not done else cpu / done * 1000,
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--mock", help="the nginx mock's root URL, e.g. http://127.0.0.1:18080")
    where.add_argument("--sim", action="store_true", help="use a `sluice sim` process upstream")
    parser.add_argument(
        "--rates", default="200,500,1000", help="requests per second, comma-separated"
    )
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per phase")
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds of warm-up per phase")
    parser.add_argument("--workers", default="1,2", help="gateway worker counts to run")
    parser.add_argument("--chunks", type=int, default=20, help="content chunks per reply (mock)")
    parser.add_argument("--litellm", help="path to a `litellm` command (its own venv)")
    parser.add_argument("--litellm-port", type=int, default=18499)
    args = parser.parse_args(argv)
    rates = [float(r) for r in args.rates.split(",")]
    workers = [int(w) for w in args.workers.split(",")]
    report: dict[str, Any] = {"rates": rates, "duration": args.duration, "targets": {}}
    with contextlib.ExitStack() as stack, tempfile.TemporaryDirectory() as scratch_dir:
        scratch = Path(scratch_dir)
        if args.sim:
            sim_pid, upstream = stack.enter_context(sim_upstream())
            parts = urlsplit(upstream)
            direct = (sim_pid, parts.hostname, parts.port, "/v1/chat/completions", "sim-small")
            report["upstream"] = "sluice sim"
        else:
            root = args.mock.rstrip("/")
            upstream = f"{root}/c{args.chunks}/t0/i0/v1"
            parts = urlsplit(root)
            direct = (
                None,
                parts.hostname,
                parts.port,
                f"/c{args.chunks}/t0/i0/v1/chat/completions",
                "m",
            )
            report["upstream"] = f"nginx mock, {args.chunks} chunks, burst"
        targets = report["targets"]
        targets["direct"] = measure(*direct, rates, args)
        for n in workers:
            with sluice_gateway(upstream, n, scratch) as (pid, port, path, model):
                targets[f"sluice-w{n}"] = measure(pid, "127.0.0.1", port, path, model, rates, args)
        if args.litellm:
            for n in workers:
                try:
                    with litellm_proxy(args.litellm, upstream, n, scratch, args.litellm_port) as t:
                        targets[f"litellm-w{n}"] = measure(t[0], "127.0.0.1", *t[1:], rates, args)
                except RuntimeError as exc:
                    targets[f"litellm-w{n}"] = {"skipped": str(exc)}
    base = targets["direct"]
    for name, phases in targets.items():
        if name == "direct" or "skipped" in phases:
            continue
        best = None
        for rate, phase in phases.items():
            phase["added_p50_ms"] = phase["p50_ms"] - base[rate]["p50_ms"]
            phase["added_p99_ms"] = phase["p99_ms"] - base[rate]["p99_ms"]
            if phase["added_p99_ms"] < 5 and phase["errors"] == 0:
                best = max(best or 0.0, float(rate))
        phases["max_rate_p99_added_under_5ms"] = best
    print(orjson.dumps(report).decode())
    _table(report)
    return 0


def _table(report: dict[str, Any]) -> None:
    lines = ["target        rate  p50ms  p99ms  +p50ms  +p99ms  cpu-ms/req  errors"]
    for name, phases in report["targets"].items():
        if "skipped" in phases:
            lines.append(f"{name:<12} skipped: {phases['skipped']}")
            continue
        for rate, p in phases.items():
            if not isinstance(p, dict):
                continue
            cpu = p["cpu_ms_per_request"]
            lines.append(
                f"{name:<12} {rate:>5} {p['p50_ms']:6.2f} {p['p99_ms']:6.2f} "
                f"{p.get('added_p50_ms', 0):7.2f} {p.get('added_p99_ms', 0):7.2f} "
                f"{'-' if cpu is None else f'{cpu:.3f}':>11} {p['errors']:>7}"
            )
    print("\n".join(lines), file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
