"""``benchmarks/loadtest_rate.py`` runs the real ``sluice loadtest --workers`` against a
``sluice sim`` process and reports each run's send lag, per worker too, the client CPU of the
command and its workers, and each worker's causes of lateness. A lag limit no run can miss
keeps it a smoke test: the 1 ms limit is for a quiet machine and the nginx mock."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent


def test_loadtest_rate_benchmark_reports_the_lag_of_every_worker() -> None:
    args = ["--sim", "--rate", "30", "--workers", "2", "--seconds", "0.5", "--chunks", "4"]
    args += ["--max-lag-ms", "5000", "--find-max", "--start", "20", "--max-steps", "1"]
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.loadtest_rate", *args, "--refine", "0"],
        cwd=ROOT,
        capture_output=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]
    [line] = done.stdout.decode().strip().splitlines()
    report: dict[str, Any] = orjson.loads(line)
    assert report["benchmark"] == "loadtest_rate" and report["server"] == "sluice sim process"
    [point] = report["points"]
    assert point["rate"] == 30.0 and point["workers"] == 2 and point["good"] is True
    assert point["sent"] > 0 and point["failed"] == 0  # Poisson: about 15
    assert len(point["lag_p99_ms_by_worker"]) == 2
    assert point["lag_max_ms"] >= point["lag_p99_ms"] >= point["lag_p50_ms"] >= 0
    assert point["client_cpu_s"] > 0 and point["client_cpu_ms_per_request"] > 0
    # The causes of lateness, from each worker (the two that sent), beside the lag.
    causes = point["causes"]
    assert len(causes) == 2 and len({c["pid"] for c in causes}) == 2
    assert sum(c["wake_late"]["count"] for c in causes) == point["sent"]
    for c in causes:
        for part in ("loop_busy_at_due", "timer_wake", "batch_before", "handover"):
            assert c[part]["count"] == c["wake_late"]["count"]
        assert c["loop_batches"]["count"] > 0 and c["gc_frozen"] > 0
    [found] = report["max_rates"]
    # One step that stays within the limit: the largest rate held is that step's.
    assert found["max_rate"] == 20.0 and found["first_bad_rate"] is None
    assert [step["rate"] for step in found["steps"]] == [20.0]
