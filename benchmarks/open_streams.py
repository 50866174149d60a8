"""How much memory does an open stream cost? N slow streamed calls held open at once.

    python -m benchmarks.open_streams --base-url http://127.0.0.1:18080 --streams 10000
    python -m benchmarks.open_streams --base-url http://127.0.0.1:18080 --streams 10000 --rounds 2
    python -m benchmarks.open_streams --sim --streams 200 --chunks 5 --ttft-ms 200 --itl-ms 200

Runs N streamed chat calls through the whole runtime at once (``rt.map`` with
``max_in_flight=N``; the provider's pool has ``max_connections=N``) against a slow server: the
nginx mock of ``shared/perf`` sends the headers and the first chunk after ``--ttft-ms``, then a
chunk every ``--itl-ms`` (defaults: 20 chunks, 1 s, 3 s: a 61-second stream, long enough for
all N calls to be open at once even though opening 10,000 connections takes a while). A sampler
task reads this process's RSS (``/proc/self/statm``) and the runtime's statistics every
``--sample-interval`` seconds: *admitted* calls (the RateLimiter's open streams, admission to
end) and of those the ones *streaming* (first chunk received, not yet finished).

Reported: RSS after a warm-up (the baseline), the peak RSS, RSS while the most streams were
streaming, ``kb_per_open_stream`` = (that RSS - baseline) / streams streaming then, completed
and failed counts, wall and CPU time (this process, the nginx workers, the rest of the machine),
a once-a-second timeline, and the file-descriptor limit this process raised its soft
RLIMIT_NOFILE to (the hard limit; every stream needs one socket). For the nginx mock it also
reports the server's ``worker_connections`` / ``worker_rlimit_nofile`` (from the config
``serve.sh`` generated) and the open-file limit of its worker processes: a server that caps
below N is reported, not hidden. ``--rounds 2`` runs the N streams twice in one runtime: RSS
after the second round shows whether the first round's memory is reused or leaked.

Bounded in time: after ``--max-seconds`` the calls still running are cancelled and counted as
not finished. ``--sim`` serves sluice's simulator in this process instead of nginx (for a quick
check; the server's own per-connection memory and CPU are then counted too).
"""

from __future__ import annotations

import argparse
import collections
import datetime
import gc
import os
import re
import resource
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
import trio

import sluice

from ._harness import API_KEY, PROMPT, machine_busy_s, mock_url, versions

if TYPE_CHECKING:
    from collections.abc import Callable

MODEL = "mock"
PROVIDER = "slow"
WARM_PROVIDER = "warm"
_MOCK_TIMING = re.compile(r"/t\d+/i\d+(?=(?:/min)?/v1/?$)")
_PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024
_FD_HEADROOM = 64
"""File descriptors kept for everything but the streams' sockets (stdio, epoll, the runtime)."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.open_streams",
        description="RSS per open stream: N slow streamed calls through sluice at once.",
    )
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--base-url",
        help="the server's /v1 root; a URL not ending in /v1 is the nginx mock's root "
        "(shared/perf/serve.sh) and /c<chunks>/t<ttft>/i<itl>/v1 is appended",
    )
    where.add_argument(
        "--sim", action="store_true", help="serve sluice's simulator in this process"
    )
    p.add_argument("--streams", type=int, default=10_000, help="calls open at once (10000)")
    p.add_argument("--chunks", type=int, default=None, help="content chunks per reply (20)")
    p.add_argument("--ttft-ms", type=int, default=1000, help="time to the first chunk (1000 ms)")
    p.add_argument("--itl-ms", type=int, default=3000, help="gap between chunks (3000 ms)")
    p.add_argument(
        "--warmup",
        type=int,
        default=64,
        help="warm-up calls before the baseline RSS is taken; against the nginx mock they go to "
        "its burst variant of the URL (64)",
    )
    p.add_argument(
        "--sample-interval", type=float, default=0.1, help="seconds between samples (0.1)"
    )
    p.add_argument(
        "--max-seconds",
        type=float,
        default=None,
        help="cap on the measured run (default: 3 x a stream's length + 60 s)",
    )
    p.add_argument(
        "--nginx-run-dir",
        default=None,
        help="serve.sh's run dir, to report the mock's connection limits (default: "
        "$PERF_RUN_DIR or ~/.cache/sluice-perf-mock)",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run the N streams this many times in one runtime; RSS after each round shows "
        "whether memory is reused or leaks (1)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    a = p.parse_args(argv)
    if a.streams < 1 or a.warmup < 0 or a.rounds < 1:
        p.error("--streams and --rounds must be at least 1 and --warmup not negative")
    if a.itl_ms < 0 or a.ttft_ms < 0:
        p.error("--itl-ms and --ttft-ms must not be negative")
    if a.base_url is not None:
        try:
            a.url, a.chunks = mock_url(a.base_url, a.chunks, a.ttft_ms, a.itl_ms)
        except ValueError as exc:
            p.error(str(exc))
    elif a.chunks is None:
        a.chunks = 20
    stream_s = (a.ttft_ms + (a.chunks or 20) * a.itl_ms) / 1000
    a.stream_s = stream_s
    if a.max_seconds is None:
        a.max_seconds = 3 * stream_s + 60
    return a


def _burst_url(url: str) -> str:
    """The nginx mock's ``/c<N>/t<T>/i<I>/v1`` URL without the waits (others unchanged)."""
    return _MOCK_TIMING.sub("/t0/i0", url)


def rss_kb() -> int:
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[1]) * _PAGE_KB


def open_fds() -> int | None:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return None


def raise_fd_limit() -> dict[str, int]:
    """Raise the soft RLIMIT_NOFILE to the hard limit; report both before and after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    new_soft = soft
    if hard == resource.RLIM_INFINITY or soft < hard:
        new_soft = hard if hard != resource.RLIM_INFINITY else max(soft, 1_048_576)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (new_soft, hard))
        except (ValueError, OSError):
            new_soft = soft
    return {"soft_before": soft, "soft": new_soft, "hard": hard}


def nginx_limits(run_dir: str | None) -> dict[str, Any] | None:
    """The nginx mock's configured and actual connection limits, when it runs from serve.sh."""
    if run_dir is None:
        run_dir = os.environ.get("PERF_RUN_DIR") or str(
            Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sluice-perf-mock"
        )
    conf_path = Path(run_dir) / "nginx.conf"
    try:
        conf = conf_path.read_text()
    except OSError:
        return None
    found: dict[str, Any] = {"config": str(conf_path)}
    for name in ("worker_processes", "worker_connections", "worker_rlimit_nofile"):
        match = re.search(rf"^\s*{name}\s+(\w+)\s*;", conf, re.MULTILINE)
        found[name] = None if match is None else _int_or_text(match.group(1))
    workers = []
    try:
        master = int((Path(run_dir) / "nginx.pid").read_text().strip())
    except (OSError, ValueError):
        master = None
    if master is not None:
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
                if int(stat.rsplit(")", 1)[1].split()[1]) != master:
                    continue
                limits = Path(f"/proc/{entry}/limits").read_text()
            except (OSError, IndexError, ValueError):
                continue
            match = re.search(r"^Max open files\s+(\S+)\s+(\S+)", limits, re.MULTILINE)
            workers.append(
                {"pid": int(entry), "max_open_files": _int_or_text(match.group(1))}
                if match
                else {"pid": int(entry)}
            )
    found["master_pid"] = master
    found["workers"] = workers
    caps = []
    wc, wp = found["worker_connections"], found["worker_processes"]
    if isinstance(wc, int):
        caps.append(wc * (wp if isinstance(wp, int) else 1))
    files = [w.get("max_open_files") for w in workers]
    counts = [n for n in files if isinstance(n, int)]
    if files and len(counts) == len(files):
        caps.append(sum(counts))
    # Each worker also holds its listening socket, log files and a few more descriptors.
    found["connection_cap"] = min(caps) if caps else None
    return found


def _int_or_text(text: str) -> int | str:
    try:
        return int(text)
    except ValueError:
        return text


def process_cpu_s(pids: list[int]) -> float | None:
    """User + system CPU seconds of other processes (the nginx workers), from /proc."""
    if not pids:
        return None
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            pass
    return total / os.sysconf("SC_CLK_TCK")


class Sampler:
    """Samples RSS and the runtime's admitted / streaming counts while the streams run."""

    def __init__(
        self,
        rt: sluice.Runtime,
        baseline_kb: int,
        interval: float,
        done: Callable[[], int],
        server_pids: list[int],
        progress: bool,
    ) -> None:
        self.rt = rt
        self.baseline_kb = baseline_kb
        self.interval = interval
        self.done = done
        self.server_pids = server_pids
        self.progress = progress
        self.timeline: list[list[float]] = []
        """About once a second: [seconds, admitted, streaming, finished, RSS MB, open fds,
        this process's CPU seconds so far, the server workers' CPU seconds so far]."""
        self.samples = 0
        self.peak_kb = baseline_kb
        self.admitted_at_peak = 0
        self.streaming_at_peak = 0
        self.max_admitted = 0
        self.max_streaming = 0
        self.kb_at_max_streaming = baseline_kb
        self.t_max_streaming: float | None = None
        self.max_fds = 0
        self.t0 = time.perf_counter()
        self.cpu0 = time.process_time()
        self.server_cpu0 = process_cpu_s(server_pids)
        self.busy0 = machine_busy_s()

    async def counts(self) -> tuple[int, int]:
        stats = await self.rt.statistics()
        admitted = sum(getattr(q, "open_streams", 0) for q in stats.quotas.values())
        pending = sum(getattr(q, "pending", 0) for q in stats.quotas.values())
        return admitted, admitted - pending

    def server_cpu(self) -> float | None:
        now = process_cpu_s(self.server_pids)
        return None if now is None or self.server_cpu0 is None else now - self.server_cpu0

    def other_cpu(self, own_cpu: float) -> float | None:
        """CPU seconds the rest of the machine used (not this process, not the server)."""
        now = machine_busy_s()
        if now is None or self.busy0 is None:
            return None
        return max(0.0, now - self.busy0 - own_cpu - (self.server_cpu() or 0.0))

    async def run(self) -> None:
        tick = 0
        every = max(1, round(1 / self.interval))
        while True:
            kb = rss_kb()
            admitted, streaming = await self.counts()
            self.samples += 1
            if kb > self.peak_kb:
                self.peak_kb, self.admitted_at_peak, self.streaming_at_peak = (
                    kb,
                    admitted,
                    streaming,
                )
            self.max_admitted = max(self.max_admitted, admitted)
            # RSS while the most streams were open: the highest sample at that count.
            if streaming > self.max_streaming:
                self.t_max_streaming = time.perf_counter() - self.t0
                self.max_streaming, self.kb_at_max_streaming = streaming, kb
            elif streaming == self.max_streaming and kb > self.kb_at_max_streaming:
                self.kb_at_max_streaming = kb
            if tick % every == 0:  # listing 10k descriptors costs a few ms: once a second
                fds = open_fds() or 0
                self.max_fds = max(self.max_fds, fds)
                t = round(time.perf_counter() - self.t0, 1)
                cpu = round(time.process_time() - self.cpu0, 2)
                server = self.server_cpu()
                other = self.other_cpu(cpu)
                row = [t, admitted, streaming, self.done(), round(kb / 1024, 1), fds, cpu]
                row.append(round(server, 2) if server is not None else -1)
                row.append(round(other, 2) if other is not None else -1)
                self.timeline.append(row)
                if self.progress:
                    print(
                        f"# {t:6.1f} s: admitted {admitted}, streaming {streaming}, finished "
                        f"{row[3]}, RSS {row[4]} MB, fds {fds}, CPU {cpu} s"
                        + (f", server CPU {server:.2f} s" if server is not None else "")
                        + (f", other CPU {other:.2f} s" if other is not None else ""),
                        file=sys.stderr,
                        flush=True,
                    )
            tick += 1
            await trio.sleep(self.interval)


class Outcomes:
    """What the calls of one round ended with."""

    def __init__(self, chunks: int | None) -> None:
        self.chunks = chunks
        self.ok = 0
        self.errors = 0
        self.mismatched = 0
        self.kinds: collections.Counter[str] = collections.Counter()
        self.first_errors: list[str] = []

    @property
    def done(self) -> int:
        return self.ok + self.errors + self.mismatched

    def record(self, outcome: sluice.MapOutcome) -> None:
        result = outcome.result
        if result is not None:
            if self.chunks is None or result.usage.output_tokens == self.chunks:
                self.ok += 1
                return
            self.mismatched += 1
            self._note(f"expected {self.chunks} output tokens, got {result.usage.output_tokens}")
            return
        self.errors += 1
        self.kinds[type(outcome.error).__name__] += 1
        self._note(f"{type(outcome.error).__name__}: {outcome.error}")

    def _note(self, what: str) -> None:
        if len(self.first_errors) < 5:
            self.first_errors.append(what[:300])


async def one_round(
    a: argparse.Namespace, rt: sluice.Runtime, model: str, server_pids: list[int]
) -> dict[str, Any]:
    """N calls at once; the measurements of this round."""
    gc.collect()
    baseline_kb = rss_kb()
    fds_before = open_fds()
    outcomes = Outcomes(a.chunks)
    sampler = Sampler(
        rt, baseline_kb, a.sample_interval, lambda: outcomes.done, server_pids, not a.quiet
    )
    requests = (sluice.ChatRequest(model=model, messages=PROMPT) for _ in range(a.streams))
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    async with trio.open_nursery() as watch:
        watch.start_soon(sampler.run)
        with trio.move_on_after(a.max_seconds) as scope:
            async with rt.map(requests, max_in_flight=a.streams) as results:
                async for outcome in results:
                    outcomes.record(outcome)
        watch.cancel_scope.cancel()
    wall = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    server_cpu = sampler.server_cpu()
    other_cpu = sampler.other_cpu(cpu)
    # Every call has ended: what is still in flight is a leak.
    await trio.sleep(0.2)
    gc.collect()
    after_kb = rss_kb()
    left = await rt.statistics()
    streaming = sampler.max_streaming
    return {
        "completed": outcomes.ok,
        "errors": outcomes.errors + outcomes.mismatched,
        "not_finished": a.streams - outcomes.done,
        "error_kinds": dict(outcomes.kinds),
        "first_errors": outcomes.first_errors,
        "timed_out": scope.cancel_called,
        "rss_before_mb": round(baseline_kb / 1024, 1),
        "rss_peak_mb": round(sampler.peak_kb / 1024, 1),
        "rss_at_max_streaming_mb": round(sampler.kb_at_max_streaming / 1024, 1),
        "rss_after_mb": round(after_kb / 1024, 1),
        "max_streaming": streaming,
        "max_admitted": sampler.max_admitted,
        "streaming_at_peak_rss": sampler.streaming_at_peak,
        "admitted_at_peak_rss": sampler.admitted_at_peak,
        "kb_per_open_stream": (
            round((sampler.kb_at_max_streaming - baseline_kb) / streaming, 2) if streaming else None
        ),
        "kb_per_admitted_at_peak": (
            round((sampler.peak_kb - baseline_kb) / sampler.admitted_at_peak, 2)
            if sampler.admitted_at_peak
            else None
        ),
        "seconds_to_max_streaming": (
            round(sampler.t_max_streaming, 2) if sampler.t_max_streaming is not None else None
        ),
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        "cpu_ms_per_stream": round(1000 * cpu / max(1, outcomes.done), 3),
        "cpu_util": round(cpu / wall, 3) if wall else None,
        "server_cpu_s": round(server_cpu, 2) if server_cpu is not None else None,
        "other_cpu_util": round(other_cpu / wall, 3) if other_cpu is not None and wall else None,
        "samples": sampler.samples,
        "fds_before": fds_before,
        "max_open_fds": sampler.max_fds,
        "left_in_flight": {
            "calls": left.calls_in_flight,
            "attempts": dict(left.attempts_in_flight),
            "admitted": sum(getattr(q, "open_streams", 0) for q in left.quotas.values()),
        },
        "timeline": sampler.timeline,
    }


async def run(a: argparse.Namespace) -> dict[str, Any]:
    limits = raise_fd_limit()
    needed = a.streams + _FD_HEADROOM
    if a.sim:
        needed += a.streams  # the in-process server holds the other end of each connection
    if limits["soft"] < needed:
        raise SystemExit(
            f"RLIMIT_NOFILE is {limits['soft']} (hard {limits['hard']}): {a.streams} streams "
            f"need about {needed} file descriptors; raise the hard limit (ulimit -Hn) or lower "
            "--streams"
        )
    server_limits = None if a.sim else nginx_limits(a.nginx_run_dir)
    cap = server_limits.get("connection_cap") if server_limits else None
    if isinstance(cap, int) and cap < a.streams:
        print(
            f"# warning: the nginx mock allows about {cap} connections, fewer than "
            f"--streams {a.streams}",
            file=sys.stderr,
            flush=True,
        )
    server_pids = [w["pid"] for w in server_limits["workers"]] if server_limits else []

    from sluice.simulator import SimulatorConfig, serve_simulator

    rounds: list[dict[str, Any]] = []
    async with trio.open_nursery() as services:
        if a.sim:
            sim = SimulatorConfig(
                output_tokens=a.chunks,
                ttft=a.ttft_ms / 1000,
                tokens_per_second=1000 / a.itl_ms if a.itl_ms else 0.0,
            )
            port = await services.start(serve_simulator, sim)
            base_url = f"http://127.0.0.1:{port}/v1"
            server = "in-process sim"
        else:
            base_url, server = a.url, "external"
        # The warm-up loads and exercises every code path a call takes; against the nginx mock
        # it uses a burst variant of the URL (through a second provider of the same kind), so
        # it takes milliseconds instead of a slow stream's length.
        warm_url = _burst_url(base_url)
        providers = {
            PROVIDER: sluice.ProviderConfig(
                base_url=base_url,
                api_key=sluice.Secret(API_KEY),
                max_connections=max(a.streams, a.warmup, 1),
            )
        }
        if warm_url != base_url:
            providers[WARM_PROVIDER] = sluice.ProviderConfig(
                base_url=warm_url, api_key=sluice.Secret(API_KEY), max_connections=64
            )
        config = sluice.RuntimeConfig(providers=providers)
        model = f"{PROVIDER}:{MODEL}"
        warm_model = f"{WARM_PROVIDER if warm_url != base_url else PROVIDER}:{MODEL}"
        async with sluice.open_runtime(config) as rt:
            warm_errors = 0
            if a.warmup:
                warm = (
                    sluice.ChatRequest(model=warm_model, messages=PROMPT) for _ in range(a.warmup)
                )
                async with rt.map(warm, max_in_flight=min(a.warmup, 64)) as outcomes:
                    async for outcome in outcomes:
                        warm_errors += outcome.error is not None
            for i in range(a.rounds):
                if a.rounds > 1 and not a.quiet:
                    print(f"# round {i + 1} of {a.rounds}", file=sys.stderr, flush=True)
                rounds.append(await one_round(a, rt, model, server_pids))
        services.cancel_scope.cancel()

    out: dict[str, Any] = {
        "streams": a.streams,
        "chunks": a.chunks,
        "ttft_ms": a.ttft_ms,
        "itl_ms": a.itl_ms,
        "stream_s": a.stream_s,
        "warmup": a.warmup,
        "warmup_errors": warm_errors,
        **{k: v for k, v in rounds[0].items() if k != "timeline"},
    }
    if a.rounds > 1:
        out["rounds"] = [{k: v for k, v in r.items() if k != "timeline"} for r in rounds]
        out["rss_growth_after_first_round_mb"] = round(
            rounds[-1]["rss_after_mb"] - rounds[0]["rss_after_mb"], 1
        )
        out["completed_all_rounds"] = sum(r["completed"] for r in rounds)
        out["errors_all_rounds"] = sum(r["errors"] + r["not_finished"] for r in rounds)
    out.update(
        {
            "timeline_columns": [
                "s",
                "admitted",
                "streaming",
                "finished",
                "rss_mb",
                "fds",
                "cpu_s",
                "server_cpu_s",
                "other_cpu_s",
            ],
            "timeline": rounds[0]["timeline"],
            "rlimit_nofile": limits,
            "server": server,
            "base_url": base_url,
            "server_limits": server_limits,
            **versions(),
            "cpus": os.cpu_count(),
            "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        }
    )
    if a.sim:
        out["server_note"] = "the simulator runs in this process: its memory is counted too"
    return out


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    report = trio.run(run, a)
    sys.stdout.buffer.write(orjson.dumps(report) + b"\n")
    sys.stdout.flush()
    bad = report.get("errors_all_rounds", report["errors"] + report["not_finished"])
    return 1 if bad or report["timed_out"] else 0


if __name__ == "__main__":
    sys.exit(main())
