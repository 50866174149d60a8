"""The send lag of ``sluice loadtest --workers`` at a rate, and the largest rate it holds.

    ../shared/perf/serve.sh start        # the nginx mock on 127.0.0.1:18080 (MOCK_PORT)
    python -m benchmarks.loadtest_rate --base-url http://127.0.0.1:18080 --rate 1000
    python -m benchmarks.loadtest_rate --base-url http://127.0.0.1:18080 --workers 1,2,4 --find-max
    python -m benchmarks.loadtest_rate --sim --rate 200 --seconds 2     # smoke test, no number

Runs the real command, ``sluice loadtest`` (the parent and its worker processes), against a
server that costs next to nothing: Poisson arrivals at ``--rate`` for ``--seconds``, each
request a streamed chat call of ``--chunks`` content chunks. From each run's results file: the
send lag (how late each request went out against its schedule) at p50, p99 and max, over every
request of every worker and per worker; what was sent and failed; and the client CPU of the
command and all its workers (``RUSAGE_CHILDREN``, so the generator's processes are all
counted) per request and as a share of the wall time.

``--rate`` gives one point per ``--workers`` value (``auto`` by default). ``--find-max`` then
also looks, per ``--workers`` value, for the largest rate whose lag p99 stays within
``--max-lag-ms``: the rate is multiplied by ``--factor`` from ``--start`` until the lag passes
it, then bisected ``--refine`` times. One JSON line on stdout; a line per run on stderr.

On a shared machine other processes take the cores at random moments and the lag shows it;
the numbers mean something only on a quiet box (``machine_busy_s`` against the run's wall time
says how busy the box was).
"""

from __future__ import annotations

import argparse
import datetime
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from sluice._jobs.loadtest.diagnose import ENV

from ._harness import API_KEY, machine_busy_s, mock_url, sim_server, versions

SLUICE = str(Path(sys.executable).with_name("sluice"))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.loadtest_rate",
        description="Send lag of sluice loadtest --workers at a rate; the largest rate held.",
    )
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--base-url", help="the nginx mock's root, or a server's /v1 root")
    where.add_argument("--sim", action="store_true", help="a sluice sim process as the server")
    p.add_argument("--rate", type=float, default=1000.0, help="requests/s of the point (1000)")
    p.add_argument("--workers", default="auto", help="comma-separated --workers values (auto)")
    p.add_argument("--seconds", type=float, default=10.0, help="sending time per run (10)")
    p.add_argument("--chunks", type=int, default=None, help="content chunks per reply (20)")
    p.add_argument("--itl-ms", type=int, default=0, help="nginx mock: gap between chunks (0)")
    p.add_argument("--ttft-ms", type=int, default=0, help="nginx mock: time to first token")
    p.add_argument("--max-lag-ms", type=float, default=1.0, help="lag p99 limit (1 ms)")
    p.add_argument("--find-max", action="store_true", help="also find the largest rate held")
    p.add_argument("--start", type=float, default=250.0, help="--find-max: first rate (250)")
    p.add_argument("--factor", type=float, default=1.4, help="--find-max: multiplier (1.4)")
    p.add_argument("--refine", type=int, default=2, help="--find-max: bisection steps (2)")
    p.add_argument("--max-steps", type=int, default=8, help="--find-max: steps at most (8)")
    p.add_argument(
        "--no-causes",
        dest="causes",
        action="store_false",
        help="leave out the causes of lateness (gc pauses, loop batches, wake and hand-over)",
    )
    a = p.parse_args(argv)
    if a.rate <= 0 or a.seconds <= 0 or a.start <= 0 or a.factor <= 1:
        p.error("--rate, --seconds and --start must be above 0, --factor above 1")
    a.worker_counts = [w.strip() for w in a.workers.split(",") if w.strip()]
    return a


def one_run(a: argparse.Namespace, url: str, rate: float, workers: str) -> dict[str, Any]:
    """``sluice loadtest`` once at ``rate`` with ``--workers workers``: its numbers."""
    with tempfile.TemporaryDirectory(prefix="sluice-loadtest-rate-") as folder:
        out = Path(folder) / "r.json"
        args = [SLUICE, "loadtest", "--model", "openai:mock", "--base-url", url]
        args += ["--api-key", API_KEY, "--rate", f"{rate:g}", "--duration", f"{a.seconds:g}"]
        args += ["--output-tokens", str(a.chunks or 20), "--input-tokens", "8"]
        args += ["--workers", workers, "--max-lag", f"{a.max_lag_ms:g}ms", "--out", str(out)]
        args += ["--timeout", "60", "--warmup", "5"]
        causes_dir = Path(folder) / "causes"
        causes_dir.mkdir()
        env = os.environ | {ENV: str(causes_dir)} if a.causes else None
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        busy, wall = machine_busy_s(), time.perf_counter()
        done = subprocess.run(
            args, capture_output=True, text=True, timeout=a.seconds * 10 + 120, env=env
        )
        wall = time.perf_counter() - wall
        busy_after = machine_busy_s()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode not in (0, 1) or not out.exists():
            raise SystemExit(f"sluice loadtest failed ({done.returncode}):\n{done.stderr}")
        document = orjson.loads(out.read_bytes())
        causes = [orjson.loads(p.read_bytes()) for p in sorted(causes_dir.glob("*.json"))]
    agg = document["aggregates"]
    lag, requests = agg["client_lag_s"], agg["requests"]
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    sent = requests["total"]
    per_worker = agg.get("workers") or []
    found = {
        "rate": round(rate, 1),
        "workers_asked": workers,
        "workers": document["config"].get("workers", 1),
        "sent": sent,
        "failed": requests["failed"],
        "lag_p50_ms": lag["p50"] * 1000,
        "lag_p99_ms": lag["p99"] * 1000,
        "lag_max_ms": lag["max"] * 1000,
        "lag_p99_ms_by_worker": [round((w["lag_p99_s"] or 0) * 1000, 3) for w in per_worker],
        "cpu_per_request_ms_measured": [
            None if w["cpu_per_request_s"] is None else round(w["cpu_per_request_s"] * 1000, 3)
            for w in per_worker
        ],
        "completed_per_s": agg["throughput"]["requests_per_s"],
        "client_cpu_s": round(cpu, 3),
        "client_cpu_ms_per_request": round(cpu / sent * 1000, 3) if sent else None,
        "wall_s": round(wall, 3),
        "machine_busy_s": (
            round(busy_after - busy, 3) if busy is not None and busy_after is not None else None
        ),
    }
    found["good"] = found["lag_p99_ms"] <= a.max_lag_ms and found["failed"] == 0
    found["causes"] = [c for c in causes if c["wake_late"]["count"]]  # the senders'
    print(
        f"loadtest_rate: {rate:7.1f}/s workers {found['workers']} ({workers})  sent {sent:6d}  "
        f"lag p50 {found['lag_p50_ms']:.3f} p99 {found['lag_p99_ms']:.3f} max "
        f"{found['lag_max_ms']:.2f} ms  by worker {found['lag_p99_ms_by_worker']}  failed "
        f"{found['failed']}  cpu {found['client_cpu_ms_per_request']} ms/req  busy "
        f"{found['machine_busy_s']}/{found['wall_s']} s  {'ok' if found['good'] else 'over'}",
        file=sys.stderr,
        flush=True,
    )
    for c in found["causes"]:
        print(f"  causes (pid {c['pid']}): {cause_line(c)}", file=sys.stderr, flush=True)
    return found


def cause_line(c: dict[str, Any]) -> str:
    """One process's causes of lateness, in a line: p50/p99 in ms of the wake's lateness,
    its parts (the loop busy when the request fell due, the timer's wake-up, the tasks of
    its batch before it), wake to sent, the loop's batches (wall, CPU, preempted), gc, and how
    many arrivals the hand-over hook submitted between task steps."""

    def pair(name: str) -> str:
        s = c[name]
        return f"{name} {s['p50_ms']:.3f}/{s['p99_ms']:.3f}" if s["count"] else f"{name} -"

    gc_ = c["gc_pauses"]
    parts = ("wake_late", "loop_busy_at_due", "timer_wake", "batch_before", "handover")
    loop = ("loop_batches", "loop_batches_cpu", "loop_preempted")
    return (
        f"{' '.join(pair(n) for n in parts)} | {' '.join(pair(n) for n in loop)} | gc "
        f"{gc_['count']} ({c['gc_full_collections']} full) max {gc_.get('max_ms', 0):.2f} | "
        f"threads {len(c['threads'])} | handed between steps "
        f"{c.get('handed_between_steps', 0)}/{c['wake_late']['count']} | long steps "
        + ", ".join(
            f"{'.'.join(name.rsplit('.', 2)[-2:])} {s['count']} ({s['by_cpu']} by CPU, max "
            f"{s['max_ms']:.1f}, CPU {s['max_cpu_ms']:.1f})"
            for name, s in list(c.get("long_steps", {}).items())[:4]
        )
    )


def find_max(a: argparse.Namespace, url: str, workers: str) -> dict[str, Any]:
    """The largest rate whose lag p99 stays within the limit, for ``--workers workers``."""
    steps: list[dict[str, Any]] = []
    good: float | None = None
    bad: float | None = None
    rate = a.start
    while len(steps) < a.max_steps:
        steps.append(one_run(a, url, rate, workers))
        if not steps[-1]["good"]:
            bad = rate
            break
        good, rate = rate, rate * a.factor
    if good is not None and bad is not None:
        for _ in range(a.refine):
            middle = (good + bad) / 2
            steps.append(one_run(a, url, middle, workers))
            if steps[-1]["good"]:
                good = middle
            else:
                bad = middle
    return {
        "workers_asked": workers,
        "max_rate": None if good is None else round(good, 1),
        "first_bad_rate": None if bad is None else round(bad, 1),
        "steps": steps,
    }


def run(a: argparse.Namespace, url: str, server: str) -> dict[str, Any]:
    points = [one_run(a, url, a.rate, workers) for workers in a.worker_counts]
    maxima = [find_max(a, url, workers) for workers in a.worker_counts] if a.find_max else []
    return {
        "benchmark": "loadtest_rate",
        "when": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "server": server,
        "base_url": url,
        "chunks": a.chunks or 20,
        "seconds_per_run": a.seconds,
        "max_lag_ms": a.max_lag_ms,
        "points": points,
        "max_rates": maxima,
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
        "versions": versions(),
    }


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    if a.sim:
        with sim_server(a.chunks or 20) as url:
            report = run(a, url, "sluice sim process")
    else:
        try:
            url, _ = mock_url(a.base_url, a.chunks, a.ttft_ms, a.itl_ms)
        except ValueError as exc:
            raise SystemExit(str(exc)) from None
        report = run(a, url, "external")
    sys.stdout.write(orjson.dumps(report).decode() + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
