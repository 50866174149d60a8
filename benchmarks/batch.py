"""``sluice.run_batch`` at scale: does --rpm hold exactly, how fast is it without limits, and does
its memory stay flat as the file grows?

    python -m benchmarks.batch                         # both parts, defaults (~4 min)
    python -m benchmarks.batch --only rpm --rpm 18000 --rpm-lines 20000
    python -m benchmarks.batch --only unlimited --lines 20000,100000

Every run is a child process (``python -m benchmarks.batch --child ...``) so that its peak RSS
(``ru_maxrss``) is its own; each runs ``sluice.run_batch`` on a generated OpenAI Batch file
against the in-process simulator (``sim:sim-small``, replies at once, 24 tokens), ledger off.

Part ``rpm``: ``--rpm-lines`` lines (20,000) under ``--rpm`` (18,000 a minute, 300 a second:
well below what the same box does unlimited, see below). ``--rpm`` spreads the minute evenly:
``ceil(rpm / 60)`` requests per second (:func:`sluice._jobs.batch_limits.pacing_window`), so the
first second's requests go at once and the last at ``ceil(lines / per_second) - 1`` seconds.
Reported: the completion time (``run_batch`` called to returned, in the child), ``lines / rpm``
in seconds, their ratio (``ratio``; the goal is within 3%), and the ratio to the exact schedule
(``ratio_to_schedule``: ``ceil(lines / per_second) - 1`` seconds).

Part ``unlimited``: the files of ``--lines`` (20,000 and 100,000) without limits,
``--max-in-flight`` calls at once. Reported per file: lines per second, peak RSS, RSS after
``import sluice`` (before the run), and the input's size; then the peak RSS difference between
the largest and the smallest file (``rss_growth_mb``). The run holds only the calls in flight,
so that difference is the duplicate check's flat hash table (16 to 32 bytes a line) plus noise.

One JSON line on stdout; progress on stderr. Exit status 1 when a line failed, a run did not
write one line per input line, or (part ``rpm``) the ratio missed ``--max-error`` (3%).
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from ._harness import versions

_PAGE_MB = os.sysconf("SC_PAGE_SIZE") / 2**20


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.batch",
        description="run_batch: RPM accuracy, lines per second and peak RSS by file size.",
    )
    p.add_argument("--only", choices=("all", "rpm", "unlimited"), default="all")
    p.add_argument("--rpm", type=int, default=18_000, help="part rpm: the limit (18000)")
    p.add_argument("--rpm-lines", type=int, default=20_000, help="part rpm: lines (20000)")
    p.add_argument(
        "--lines", default="20000,100000", help="part unlimited: file sizes (20000,100000)"
    )
    p.add_argument("--max-in-flight", type=int, default=256, help="calls at once (256)")
    p.add_argument(
        "--max-error", type=float, default=0.03, help="part rpm: allowed |ratio - 1| (0.03)"
    )
    p.add_argument("--timeout", type=float, default=1800, help="cap per child run (1800 s)")
    # The child's own options.
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--input", help=argparse.SUPPRESS)
    p.add_argument("--output", help=argparse.SUPPRESS)
    p.add_argument("--child-rpm", type=int, default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    a.line_counts = [int(n) for n in a.lines.split(",") if n]
    return a


def write_input(path: Path, lines: int) -> int:
    """A batch file of ``lines`` distinct requests; its size in bytes."""
    with open(path, "wb") as f:
        for i in range(lines):
            body = {
                "model": "sim:sim-small",
                "messages": [{"role": "user", "content": f"Summarize item {i} in one line."}],
            }
            f.write(
                orjson.dumps(
                    {
                        "custom_id": f"req-{i:07d}",
                        "method": "POST",
                        "url": "/v1/chat/completions",
                        "body": body,
                    }
                )
                + b"\n"
            )
    return path.stat().st_size


def _rss_mb() -> float:
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[1]) * _PAGE_MB


def child(a: argparse.Namespace) -> int:
    """One run in this process; one JSON line."""
    import trio

    import sluice

    async def run() -> dict[str, Any]:
        config = sluice.RuntimeConfig(ledger=sluice.LedgerConfig(persist=False))
        rss_before = _rss_mb()
        t0 = time.perf_counter()
        summary = await sluice.run_batch(
            a.input,
            a.output,
            rpm=a.child_rpm,
            max_in_flight=a.max_in_flight,
            config=config,
            write_summary=False,
        )
        wall = time.perf_counter() - t0
        return {
            "wall_s": round(wall, 3),
            "lines": summary.lines,
            "ok": summary.ok,
            "failed": summary.failed,
            "errors": dict(summary.errors),
            "latency_s": {k: round(v, 4) for k, v in summary.latency.items()},
            "rss_before_mb": round(rss_before, 1),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "cpu_s": round(time.process_time(), 2),
        }

    sys.stdout.buffer.write(orjson.dumps(trio.run(run)) + b"\n")
    return 0


def run_child(a: argparse.Namespace, source: Path, out: Path, rpm: int | None) -> dict[str, Any]:
    command = [sys.executable, "-m", "benchmarks.batch", "--child"]
    command += ["--input", str(source), "--output", str(out)]
    command += ["--max-in-flight", str(a.max_in_flight)]
    if rpm is not None:
        command += ["--child-rpm", str(rpm)]
    env = {**os.environ, "SLUICE_LEDGER_DB": "off"}
    env.pop("SLUICE_CONFIG", None)
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        command, cwd=root, env=env, capture_output=True, timeout=a.timeout, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(done.stderr.decode(errors="replace")[-3000:])
    result: dict[str, Any] = orjson.loads(done.stdout.strip().splitlines()[-1])
    ids = {orjson.loads(line)["custom_id"] for line in out.read_bytes().splitlines()}
    result["one_line_per_input_line"] = len(ids) == result["lines"] == result["ok"]
    return result


def rpm_part(a: argparse.Namespace, folder: Path) -> dict[str, Any]:
    source = folder / "rpm.jsonl"
    write_input(source, a.rpm_lines)
    per_second = math.ceil(a.rpm / 60)
    expected = a.rpm_lines / a.rpm * 60
    schedule = math.ceil(a.rpm_lines / per_second) - 1
    print(f"rpm: {a.rpm_lines} lines at {a.rpm}/min (~{expected:.0f} s)", file=sys.stderr)
    run = run_child(a, source, folder / "rpm.out.jsonl", a.rpm)
    ratio = run["wall_s"] / expected
    return {
        "lines": a.rpm_lines,
        "rpm": a.rpm,
        "per_second": per_second,
        "lines_over_rpm_s": round(expected, 3),
        "schedule_s": schedule,
        "completion_s": run["wall_s"],
        "ratio": round(ratio, 4),
        "ratio_to_schedule": round(run["wall_s"] / schedule, 4) if schedule else None,
        "within_max_error": abs(ratio - 1) <= a.max_error,
        "run": run,
    }


def unlimited_part(a: argparse.Namespace, folder: Path) -> dict[str, Any]:
    runs = []
    for lines in a.line_counts:
        source = folder / f"unlimited-{lines}.jsonl"
        size = write_input(source, lines)
        print(f"unlimited: {lines} lines ({size / 2**20:.1f} MB)", file=sys.stderr)
        run = run_child(a, source, folder / f"unlimited-{lines}.out.jsonl", None)
        source.unlink()
        runs.append(
            {
                "lines": lines,
                "input_mb": round(size / 2**20, 2),
                "lines_per_s": round(lines / run["wall_s"], 1),
                "peak_rss_mb": run["peak_rss_mb"],
                "rss_before_mb": run["rss_before_mb"],
                "run": run,
            }
        )
    smallest, largest = runs[0], runs[-1]
    return {
        "runs": runs,
        "rss_growth_mb": round(largest["peak_rss_mb"] - smallest["peak_rss_mb"], 1),
        "input_growth_mb": round(largest["input_mb"] - smallest["input_mb"], 2),
    }


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    if a.child:
        return child(a)
    report: dict[str, Any] = {"benchmark": "batch", "max_in_flight": a.max_in_flight}
    with tempfile.TemporaryDirectory(prefix="sluice-batch-bench-") as name:
        folder = Path(name)
        if a.only in ("all", "rpm"):
            report["rpm"] = rpm_part(a, folder)
        if a.only in ("all", "unlimited"):
            report["unlimited"] = unlimited_part(a, folder)
    runs = [report["rpm"]["run"]] if "rpm" in report else []
    runs += [r["run"] for r in report.get("unlimited", {}).get("runs", [])]
    report["ok"] = all(r["one_line_per_input_line"] and r["failed"] == 0 for r in runs) and (
        "rpm" not in report or report["rpm"]["within_max_error"]
    )
    report["cpus"] = os.cpu_count()
    report["date"] = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    report.update(versions())
    sys.stdout.buffer.write(orjson.dumps(report) + b"\n")
    sys.stdout.flush()
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
