"""Added latency and CPU of ``sluice serve`` (and of LiteLLM's proxy) in front of a paced upstream.

One open-loop load generator (:mod:`benchmarks._open_loop`) sends streamed chat-completions
requests at fixed rates (default 200, 500, 1,000 and 2,000 per second) to each *target*:

* ``direct``: the upstream itself. By default that is :mod:`benchmarks._paced_upstream` in a
  process of its own, which spaces a reply's chunks as a model emits them (``--ttft-ms``,
  ``--itl-ms``, ``--chunks``); ``--nginx URL`` uses the nginx mock of ``shared/perf`` instead,
  paced by the same options (``--itl-ms 0`` is its burst mode: the whole reply in one read,
  which lets a gateway coalesce writes as no real upstream does). ``direct`` is also the check
  that the upstream and the generator alone keep up at that rate;
* ``sluice-wN``: ``sluice serve --workers N`` in front of the upstream, for each N of
  ``--workers`` (default 1 and 2);
* ``litellm-wN``: LiteLLM's proxy with N workers in front of it (``--litellm PATH`` to its
  ``litellm`` command, installed in a venv of its own, never this project's), when given.

Every target process is started before the first phase and stays up to the end. For each rate
the targets take turns, in an order rotated by one from rate to rate; each turn is a warm-up at
that rate (``--warmup`` seconds, discarded), an idle settle (``--settle``, then until the
target's processes are idle, at most ``--quiesce`` seconds), then the measured phase
(``--duration``) on the connections the warm-up opened; then the generator closes its
connections and again waits (at most ``--quiesce`` seconds) until the target is idle, so that
a target still working off a backlog does not take the next one's CPU.

Request *i* of a phase is due at ``t0 + i / rate``; its latency runs from that moment to the
response's last byte, so a target that falls behind is charged for the queue it causes. A
response counts as a success only if it is a 200 with a complete body that holds no error
event and ends with ``data: [DONE]``. "Added" latency is a target's percentile minus the direct
one's at the same rate. CPU per request is the target's processes' CPU time over the phase
(``/proc``, children included) divided by the requests sent; the upstream's and the
generator's own CPU are reported beside it, and ``other_cpu_util`` is what the rest of the
machine used meanwhile, in cores (``/proc/stat`` busy time minus the three).

The generator's *send lag* (actual send minus due time) is reported per phase; a phase whose
lag p99 exceeds ``--max-lag-ms`` is marked invalid (the generator did not keep its schedule),
and so is the whole run, which then exits with status 1.

    .venv/bin/python -m benchmarks.gateway --duration 10 --litellm /tmp/litellm/bin/litellm
    .venv/bin/python -m benchmarks.gateway --rates 20 --duration 1 --workers 1   # smoke test

Prints one JSON line and a table on stderr; the fields are listed in ``benchmarks/README.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import orjson

from ._harness import machine_busy_s, versions
from ._open_loop import Generator, PhaseResult, lag_ms, percentile, request_bytes

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["family_cpu", "main", "percentile", "request_bytes"]

SLUICE = str(Path(sys.executable).with_name("sluice"))
MASTER_KEY = "sk-bench-0123456789abcdef0123456789abcdef"  # LiteLLM's; sluice runs --no-auth


# ---- CPU accounting ---------------------------------------------------------------------------


def family_cpu(pid: int) -> float:
    """CPU seconds of ``pid`` and all its descendants (see :func:`cpu_snapshot`)."""
    return cpu_snapshot().family(pid)


@dataclass(frozen=True)
class CpuSnapshot:
    children: dict[int, list[int]]
    times: dict[int, float]

    def family(self, pid: int) -> float:
        """CPU seconds of ``pid`` and all its descendants at the snapshot."""
        total, pending = 0.0, [pid]
        while pending:
            p = pending.pop()
            total += self.times.get(p, 0.0)
            pending.extend(self.children.get(p, []))
        return total


def cpu_snapshot() -> CpuSnapshot:
    """Every process's CPU seconds and parent (``/proc``): its live threads' time on a CPU from
    ``schedstat`` (nanoseconds; ``stat``'s clock ticks of 10 ms are too coarse for a short phase
    of a fast server), or ``stat``'s user + system when that is more."""
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
    return CpuSnapshot(children, times)


def _threads_cpu(pid: int) -> float | None:
    """Seconds on a CPU of the live threads of ``pid`` (None if ``schedstat`` is missing)."""
    total = 0
    try:
        for thread in os.listdir(f"/proc/{pid}/task"):
            total += int(Path(f"/proc/{pid}/task/{thread}/schedstat").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return total / 1e9


# ---- the targets' processes -------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    name: str
    pid: int | None
    """The process (with its children) whose CPU is the target's; None when unknown (nginx)."""
    host: str
    port: int
    path: str
    model: str


def _stop(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def paced_upstream(args: argparse.Namespace) -> Iterator[tuple[Target, str]]:
    """The paced upstream in its own process: the ``direct`` target and its ``/v1`` URL."""
    argv = [sys.executable, "-m", "benchmarks._paced_upstream", "--port", "0"]
    argv += ["--ttft-ms", str(args.ttft_ms), "--itl-ms", str(args.itl_ms)]
    argv += ["--chunks", str(args.chunks), "--fail-every", str(args.fail_every)]
    root = Path(__file__).resolve().parent.parent
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, cwd=root)
    try:
        assert proc.stdout is not None
        banner = proc.stdout.readline()
        if "listening on" not in banner:
            raise RuntimeError(f"the paced upstream did not start: {banner!r}")
        port = int(banner.rsplit(":", 1)[1])
        target = Target("direct", proc.pid, "127.0.0.1", port, "/v1/chat/completions", "m")
        yield target, f"http://127.0.0.1:{port}/v1"
    finally:
        _stop(proc)


def nginx_upstream(args: argparse.Namespace) -> tuple[Target, str]:
    """The nginx mock at ``--nginx`` (already running), paced through its path prefix."""
    root = args.nginx.rstrip("/")
    prefix = f"/c{args.chunks}/t{round(args.ttft_ms)}/i{round(args.itl_ms)}/v1"
    parts = urlsplit(root)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    return Target("direct", None, host, port, f"{prefix}/chat/completions", "m"), root + prefix


@contextlib.contextmanager
def sluice_gateway(upstream: str, workers: int, scratch: Path) -> Iterator[Target]:
    """``sluice serve --workers N`` in front of ``upstream`` (an OpenAI-compatible ``/v1`` URL)."""
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
        # Its later output (one line per worker, logs) goes nowhere rather than filling a pipe.
        proc.stdout.close()
        yield Target(
            f"sluice-w{workers}",
            proc.pid,
            "127.0.0.1",
            port,
            "/v1/chat/completions",
            "mock:gpt-4o-mini",
        )
    finally:
        _stop(proc)


@contextlib.contextmanager
def litellm_proxy(litellm: str, upstream: str, workers: int, scratch: Path) -> Iterator[Target]:
    """LiteLLM's proxy (``litellm --num_workers N``) in front of ``upstream``."""
    import httpx

    port = _free_port()
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
        f"  master_key: {MASTER_KEY}\n"
    )
    argv = [litellm, "--config", str(config), "--port", str(port), "--num_workers", str(workers)]
    if workers > 1:
        # uvicorn kills a worker not up within 5 s and starts another: on a busy box LiteLLM's
        # imports take longer than that, and the workers are replaced forever.
        argv += ["--timeout_worker_healthcheck", "180"]
    log = scratch / f"litellm-{workers}.log"
    # The bundled model cost map, not three attempts to fetch it from GitHub at start; logs at
    # ERROR, as LiteLLM's production guide advises.
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR"}
    with open(log, "w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 180
        while True:
            with contextlib.suppress(httpx.HTTPError):
                url = f"http://127.0.0.1:{port}/health/liveliness"
                if httpx.get(url, timeout=1).status_code == 200:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"litellm did not start: {log.read_text()[-500:]}")
            time.sleep(0.5)
        yield Target(
            f"litellm-w{workers}", proc.pid, "127.0.0.1", port, "/v1/chat/completions", "mock"
        )
    finally:
        _stop(proc)


def litellm_version(litellm: str) -> str | None:
    python = Path(litellm).with_name("python")
    done = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('litellm'))"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    return done.stdout.strip() or None


# ---- one turn of one target -------------------------------------------------------------------


def _ms(seconds: float) -> float | None:
    return None if math.isnan(seconds) or math.isinf(seconds) else round(seconds * 1000, 3)


def measure_turn(
    target: Target,
    upstream_pid: int | None,
    idle: list[int],
    rate: float,
    args: argparse.Namespace,
) -> dict[str, Any]:
    """Warm-up, settle and the measured phase of ``target`` at ``rate``, as a report entry.

    ``idle`` are the pids of the benchmark's other targets (idle meanwhile; their CPU is
    reported apart from the rest of the machine's)."""
    request = request_bytes(
        target.host, target.port, target.path, target.model,
        {"authorization": f"Bearer {MASTER_KEY}"},
    )  # fmt: skip
    expect = None if args.fail_every else args.chunks
    generator = Generator(
        target.host, target.port, request, max_connections=args.max_connections,
        expect_tokens=expect,
    )  # fmt: skip
    try:
        warm = generator.phase(rate, args.warmup, args.drain) if args.warmup > 0 else None
        gc.collect()
        time.sleep(args.settle)
        # A target the warm-up overloaded is still working off what the generator gave up on.
        settled_s = quiesce(target.pid, args.quiesce) if target.pid is not None else 0.0
        snap0 = cpu_snapshot()
        busy0, own0 = machine_busy_s(), time.process_time()
        result = generator.phase(rate, args.duration, args.drain)
        busy1, own1 = machine_busy_s(), time.process_time()
        snap1 = cpu_snapshot()
    finally:
        generator.close()
    quiet_s = quiesce(target.pid, args.quiesce) if target.pid is not None else 0.0

    def used(pid: int | None) -> float | None:
        return None if pid is None else snap1.family(pid) - snap0.family(pid)

    own = own1 - own0
    target_cpu = used(target.pid)
    upstream_cpu = used(upstream_pid)
    idle_cpu = sum(used(pid) or 0.0 for pid in idle)
    other = None
    if busy0 is not None and busy1 is not None:
        ours = own + (target_cpu or 0.0) + idle_cpu
        if target.pid != upstream_pid:
            ours += upstream_cpu or 0.0
        other = max(0.0, busy1 - busy0 - ours) / result.wall_s
    entry = _entry(result, warm, own, target_cpu, upstream_cpu, other, args)
    entry["idle_targets_cpu_util"] = round(idle_cpu / result.wall_s, 3)
    entry["quiesce_s"] = round(quiet_s, 1)
    entry["settle_quiesce_s"] = round(settled_s, 1)
    return entry


def quiesce(pid: int, limit: float, idle_util: float = 0.05) -> float:
    """Wait (at most ``limit`` seconds) until ``pid``'s processes use under ``idle_util`` of a
    CPU over half a second: an overloaded target still working off requests the generator gave
    up on must not steal the CPU of the next target's turn. Returns the seconds waited."""
    start = time.monotonic()
    before = family_cpu(pid)
    while time.monotonic() - start < limit:
        time.sleep(0.5)
        now = family_cpu(pid)
        if now - before < idle_util * 0.5:
            break
        before = now
    return time.monotonic() - start


def _entry(
    result: PhaseResult,
    warm: PhaseResult | None,
    own_cpu: float,
    target_cpu: float | None,
    upstream_cpu: float | None,
    other_util: float | None,
    args: argparse.Namespace,
) -> dict[str, Any]:
    sent = max(1, result.sent)
    # A failed request never got its answer: infinitely slow, so a percentile it reaches is
    # null rather than the latency of the lucky few that made it through an overload.
    everyone = result.latencies + [math.inf] * result.error_count
    lags = lag_ms(result)
    invalid = None
    if lags["send_lag_p99_ms"] > args.max_lag_ms:
        invalid = (
            f"the generator fell behind: send lag p99 {lags['send_lag_p99_ms']:.1f} ms "
            f"> {args.max_lag_ms} ms"
        )
    return {
        "requests": result.sent,
        "ok": result.ok,
        "errors": result.error_count,
        "error_kinds": result.errors,
        "usage_mismatch": result.usage_mismatch,
        "warmup_errors": None if warm is None else warm.error_count,
        "p50_ms": _ms(percentile(everyone, 0.50)),
        "p99_ms": _ms(percentile(everyone, 0.99)),
        "ttfb_p50_ms": _ms(percentile(result.first_bytes, 0.50)),
        "ttfb_p99_ms": _ms(percentile(result.first_bytes, 0.99)),
        "cpu_ms_per_request": None if target_cpu is None else round(target_cpu / sent * 1000, 4),
        "upstream_cpu_ms_per_request": (
            None if upstream_cpu is None else round(upstream_cpu / sent * 1000, 4)
        ),
        "generator_cpu_ms_per_request": round(own_cpu / sent * 1000, 4),
        "generator_cpu_util": round(own_cpu / result.wall_s, 3),
        "other_cpu_util": None if other_util is None else round(other_util, 3),
        **{k: round(v, 3) for k, v in lags.items()},
        "valid": invalid is None,
        "invalid": invalid,
    }


# ---- the run ----------------------------------------------------------------------------------


def interleaved(names: list[str], rate_index: int) -> list[str]:
    """The targets' order at the ``rate_index``-th rate: the list rotated by that many places."""
    shift = rate_index % len(names)
    return names[shift:] + names[:shift]


def add_comparisons(report: dict[str, Any], threshold_ms: float = 5.0) -> None:
    """Fill in added latency per phase and, per target, the highest rate that stays under
    ``threshold_ms`` of added p99: that rate and every lower one measured valid, error-free
    and under the threshold (None when even the lowest is not)."""
    targets = report["targets"]
    base = targets["direct"]
    best_sluice: dict[str, float | None] = {}
    for name, phases in targets.items():
        if name == "direct" or "skipped" in phases:
            continue
        best: float | None = None
        holding = True  # every rate so far met the criterion
        for rate in sorted(report["rates"]):
            key = _key(rate)
            phase, direct = phases[key], base[key]
            for q in ("p50_ms", "p99_ms"):
                mine, theirs = phase[q], direct[q]
                added = None if mine is None or theirs is None else round(mine - theirs, 3)
                phase[f"added_{q}"] = added
            good = (
                phase["valid"]
                and direct["valid"]
                and phase["errors"] == 0
                and phase["added_p99_ms"] is not None
                and phase["added_p99_ms"] < threshold_ms
            )
            holding = holding and good
            if holding:
                best = rate
        phases["max_rate_p99_added_under_5ms"] = best
        if name.startswith("sluice-"):
            best_sluice[name] = best
    report["sluice_max_rate_p99_added_under_5ms"] = best_sluice


def _key(rate: float) -> str:
    return str(int(rate)) if rate == int(rate) else str(rate)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="200,500,1000,2000", help="requests/s, comma-separated")
    parser.add_argument("--duration", type=float, default=10.0, help="measured seconds per turn")
    parser.add_argument("--warmup", type=float, default=3.0, help="warm-up seconds per turn")
    parser.add_argument("--settle", type=float, default=1.0, help="idle seconds after warm-up")
    parser.add_argument(
        "--drain", type=float, default=5.0, help="seconds to wait after the last request is due"
    )
    parser.add_argument("--workers", default="1,2", help="sluice (and LiteLLM) worker counts")
    parser.add_argument("--chunks", type=int, default=20, help="content chunks per reply")
    parser.add_argument("--ttft-ms", type=float, default=50.0, help="upstream time to first chunk")
    parser.add_argument("--itl-ms", type=float, default=15.0, help="upstream gap between chunks")
    parser.add_argument(
        "--fail-every",
        type=int,
        default=0,
        help="the paced upstream ends every Nth reply with an error event",
    )
    parser.add_argument(
        "--quiesce", type=float, default=60.0,
        help="after a turn, seconds to wait at most for the target's CPU to go idle",
    )  # fmt: skip
    parser.add_argument("--nginx", help="the nginx mock's root URL instead of the paced upstream")
    parser.add_argument("--litellm", help="path to a `litellm` command (its own venv)")
    parser.add_argument(
        "--max-lag-ms", type=float, default=2.0, help="send lag p99 above which a phase is invalid"
    )
    parser.add_argument("--max-connections", type=int, default=4000)
    args = parser.parse_args(argv)
    rates = [float(r) for r in args.rates.split(",")]
    workers = [int(w) for w in args.workers.split(",") if w]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

    report: dict[str, Any] = {
        "rates": rates,
        "duration": args.duration,
        "warmup": args.warmup,
        "settle": args.settle,
        "max_lag_ms": args.max_lag_ms,
        "upstream": {
            "kind": "nginx mock" if args.nginx else "paced (benchmarks._paced_upstream)",
            "chunks": args.chunks,
            "ttft_ms": args.ttft_ms,
            "itl_ms": args.itl_ms,
            "ideal_ms": args.ttft_ms + (args.chunks + 1) * args.itl_ms,
            "fail_every": args.fail_every,
        },
        "order": {},
        "targets": {},
    }
    with contextlib.ExitStack() as stack, tempfile.TemporaryDirectory() as scratch_dir:
        scratch = Path(scratch_dir)
        if args.nginx:
            if args.fail_every:
                parser.error("--fail-every needs the paced upstream, not --nginx")
            direct, upstream = nginx_upstream(args)
        else:
            direct, upstream = stack.enter_context(paced_upstream(args))
        targets = [direct]
        for n in workers:
            targets.append(stack.enter_context(sluice_gateway(upstream, n, scratch)))
        if args.litellm:
            report["litellm"] = litellm_version(args.litellm)
            for n in workers:
                try:
                    targets.append(
                        stack.enter_context(litellm_proxy(args.litellm, upstream, n, scratch))
                    )
                except RuntimeError as exc:
                    report["targets"][f"litellm-w{n}"] = {"skipped": str(exc)}
        by_name = {t.name: t for t in targets}
        names = [t.name for t in targets]
        load0 = os.getloadavg()[0]
        for index, rate in enumerate(rates):
            order = interleaved(names, index)
            report["order"][_key(rate)] = order
            for name in order:
                idle = [t.pid for t in targets if t.name != name and t.pid is not None]
                idle = [pid for pid in idle if pid != direct.pid]
                entry = measure_turn(by_name[name], direct.pid, idle, rate, args)
                report["targets"].setdefault(name, {})[_key(rate)] = entry
                print(f"{name} at {rate:g}/s: {_line(entry)}", file=sys.stderr, flush=True)
        report["loadavg_1m"] = [round(load0, 2), round(os.getloadavg()[0], 2)]
    # The order targets were started in, whatever order they were measured in.
    report["targets"] = {
        n: report["targets"][n] for n in [*names, *report["targets"]] if n in report["targets"]
    }
    add_comparisons(report)
    phases = [p for t in report["targets"].values() for p in t.values() if isinstance(p, dict)]
    report["valid"] = all(p["valid"] for p in phases)
    report["cpus"] = os.cpu_count()
    report["date"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    report.update(versions())
    print(orjson.dumps(report).decode())
    _table(report)
    return 0 if report["valid"] else 1


def _line(p: dict[str, Any]) -> str:
    def f(value: float | None, spec: str = ".2f") -> str:
        return "-" if value is None else format(value, spec)

    return (
        f"p50 {f(p['p50_ms'])} p99 {f(p['p99_ms'])} ms, cpu {f(p['cpu_ms_per_request'], '.3f')} "
        f"ms/req, errors {p['errors']}, lag p99 {f(p['send_lag_p99_ms'])} ms, "
        f"other cpu {f(p['other_cpu_util'])}"
    )


def _table(report: dict[str, Any]) -> None:
    def f(value: float | None, width: int, spec: str = ".2f") -> str:
        return ("-" if value is None else format(value, spec)).rjust(width)

    lines = [
        "target        rate    p50    p99   +p50   +p99  cpu/req  up/req gen/req  errors  "
        "lag99  other  valid"
    ]
    for name, phases in report["targets"].items():
        if "skipped" in phases:
            lines.append(f"{name:<12} skipped: {phases['skipped']}")
            continue
        for rate, p in phases.items():
            if not isinstance(p, dict):
                continue
            lines.append(
                f"{name:<12} {rate:>5} {f(p['p50_ms'], 6, '.1f')} {f(p['p99_ms'], 6, '.1f')} "
                f"{f(p.get('added_p50_ms'), 6)} {f(p.get('added_p99_ms'), 6)} "
                f"{f(p['cpu_ms_per_request'], 8, '.3f')} "
                f"{f(p['upstream_cpu_ms_per_request'], 7, '.3f')} "
                f"{f(p['generator_cpu_ms_per_request'], 7, '.3f')} {p['errors']:>7} "
                f"{f(p['send_lag_p99_ms'], 6)} {f(p['other_cpu_util'], 6)} "
                f"{'yes' if p['valid'] else 'NO':>6}"
            )
        best = phases.get("max_rate_p99_added_under_5ms")
        if name != "direct":
            lines.append(f"{name:<12} highest rate with added p99 < 5 ms: {best}")
    print("\n".join(lines), file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
