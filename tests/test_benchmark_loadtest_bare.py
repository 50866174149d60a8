"""``benchmarks/loadtest_bare.py``, the yardstick of ``loadtest_rate``: a bare asyncio + aiohttp
open loop over one or more processes, and a process that only sleeps until each due time, on
the same Poisson schedule. Against a ``sluice sim`` process with a lag limit no run can miss,
it is a smoke test of what the report holds: the 1 ms limit is for a quiet machine and the
nginx mock."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent


def test_loadtest_bare_benchmark_reports_every_process_count_and_the_timer_floor() -> None:
    args = ["--sim", "--rate", "30", "--processes", "1,2", "--seconds", "0.5", "--chunks", "4"]
    args += ["--max-lag-ms", "5000", "--find-max", "--start", "20", "--max-steps", "1"]
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.loadtest_bare", *args, "--refine", "0"],
        cwd=ROOT,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]
    [line] = done.stdout.decode().strip().splitlines()
    report: dict[str, Any] = orjson.loads(line)
    assert report["benchmark"] == "loadtest_bare" and report["server"] == "sluice sim process"
    floor = report["timer_floor"]
    # The same seeded schedule for the sleeper and for each run at this rate.
    one, two = report["points"]
    assert floor["count"] == one["sent"] == two["sent"] > 0
    assert floor["late_max_ms"] >= floor["late_p99_ms"] >= floor["late_p50_ms"] >= 0
    assert (one["processes"], two["processes"]) == (1, 2)
    for point in (one, two):
        assert point["failed"] == 0 and point["client_cpu_ms_per_request"] > 0
        assert point["lag_max_ms"] >= point["lag_p99_ms"] >= point["lag_p50_ms"] >= 0
    # One step within the limit per process count: the largest rate held is that step's.
    assert [(m["processes"], m["max_rate"], m["first_bad_rate"]) for m in report["max_rates"]] == [
        (1, 20.0, None),
        (2, 20.0, None),
    ]
