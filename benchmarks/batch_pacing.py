"""``sluice batch --rpm`` against replies that are slow to start: does the rate hold?

    python -m benchmarks.batch_pacing                      # 240 lines, --rpm 600, TTFT 0.5 and 0.9
    python -m benchmarks.batch_pacing --ttft 0.2,0.5,0.9 --lines 600 --rpm 1200

Issue 30's case, run as an operator would: for each time to first token, a ``sluice sim
--ttft T`` process on loopback and a real ``sluice batch IN -o OUT --rpm R`` process pointed at
it (``--model sim:sim-small --base-url URL``). ``--rpm`` spreads the minute in steps
(:func:`sluice._jobs.batch_limits.pacing_window`): ``ceil(rpm / 60)`` requests a step, so the
lines go out over ``steps = ceil(lines / per_step)`` steps and the last reply starts ``ttft``
after the last step began.

Reported per TTFT: the batch's own ``elapsed_s`` (its summary file: the run, without the
interpreter's start), the ideal ``lines / rpm`` minutes in seconds (``ideal_s``, the issue's
24 s), their relative difference (``error``; the goal is within 5%), and the exact schedule
``(steps - 1) * step + ttft`` (``schedule_s``). A window counted from each first chunk would
instead take about ``(steps - 1) * (step + ttft) + ttft``.

One JSON line on stdout; progress on stderr. Exit status 1 when a line failed or an error
exceeds ``--max-error`` (5%).
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson

from ._harness import versions

SLUICE = str(Path(sys.executable).with_name("sluice"))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.batch_pacing",
        description="sluice batch --rpm against a simulator slow to start its replies.",
    )
    p.add_argument("--lines", type=int, default=240, help="input lines (240)")
    p.add_argument("--rpm", type=int, default=600, help="the batch's --rpm (600)")
    p.add_argument("--ttft", default="0.5,0.9", help="times to first token, comma-separated")
    p.add_argument("--max-error", type=float, default=0.05, help="allowed error (0.05)")
    return p.parse_args(argv)


def write_input(path: Path, lines: int) -> None:
    body = {"model": "sim:sim-small", "messages": [{"role": "user", "content": "hi"}]}
    path.write_bytes(
        b"".join(orjson.dumps({"custom_id": f"r{i}", "body": body}) + b"\n" for i in range(lines))
    )


def run_one(folder: Path, lines: int, rpm: int, ttft: float) -> dict[str, Any]:
    """One simulator and one batch process; the batch's summary, read back."""
    source, out = folder / f"in-{ttft}.jsonl", folder / f"out-{ttft}.jsonl"
    write_input(source, lines)
    sim = [SLUICE, "sim", "--port", "0", "--ttft", str(ttft)]
    with subprocess.Popen(sim, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as p:
        try:
            assert p.stdout is not None
            banner = p.stdout.readline()
            if "listening on " not in banner:
                raise SystemExit(f"the simulator did not start: {banner}")
            url = banner.split("listening on ")[1].strip()
            target = ["--model", "sim:sim-small", "--base-url", url, "--api-key", "sk-bench"]
            command = [SLUICE, "batch", str(source), "-o", str(out), "--rpm", str(rpm), *target]
            done = subprocess.run(command, capture_output=True, text=True, timeout=3600)
        finally:
            p.terminate()
            p.wait(timeout=10)
    if done.returncode != 0:
        raise SystemExit(f"sluice batch failed ({done.returncode}): {done.stderr[-2000:]}")
    summary = orjson.loads(out.with_suffix(".summary.json").read_bytes())
    per_step = math.ceil(rpm / 60)
    step = 60 * per_step / rpm
    steps = math.ceil(lines / per_step)
    ideal = 60 * lines / rpm
    elapsed = float(summary["elapsed_s"])
    return {
        "ttft_s": ttft,
        "elapsed_s": elapsed,
        "ideal_s": round(ideal, 3),
        "error": round(abs(elapsed - ideal) / ideal, 4),
        "schedule_s": round((steps - 1) * step + ttft, 3),
        "ok": summary["status"]["ok"],
        "failed": summary["status"]["failed"],
        "output_lines": len(out.read_bytes().splitlines()),
    }


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    runs = []
    with tempfile.TemporaryDirectory(prefix="sluice-pacing-") as tmp:
        for ttft in (float(t) for t in a.ttft.split(",")):
            print(f"ttft {ttft} s: {a.lines} lines at --rpm {a.rpm}", file=sys.stderr)
            runs.append(run_one(Path(tmp), a.lines, a.rpm, ttft))
            print(f"  {runs[-1]}", file=sys.stderr)
    good = all(
        r["failed"] == 0 and r["output_lines"] == a.lines and r["error"] <= a.max_error
        for r in runs
    )
    report = {
        "benchmark": "batch_pacing",
        "lines": a.lines,
        "rpm": a.rpm,
        "max_error": a.max_error,
        "runs": runs,
        "ok": good,
        "versions": versions(),
    }
    print(orjson.dumps(report).decode())
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
