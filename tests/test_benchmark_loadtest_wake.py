"""``benchmarks/loadtest_wake.py`` compares the load tester's ways of waking (the timerfd, the
spin fallback, a plain trio sleep): a smoke test of its report, whose numbers only a quiet
machine makes meaningful. No waker may wake before its due time."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="timerfd is Linux's")
def test_loadtest_wake_benchmark_reports_every_way_of_waking() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.loadtest_wake", "--count", "20", "--rounds", "1"],
        cwd=ROOT,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]
    [line] = done.stdout.decode().strip().splitlines()
    report: dict[str, Any] = orjson.loads(line)
    assert report["benchmark"] == "loadtest_wake" and report["count"] == 20
    assert set(report["ways"]) == {"timerfd", "spin", "plain"}
    for figures in report["ways"].values():
        assert figures["cpu_per_wake_us"] > 0
        assert 0 <= figures["late_p50_us"] <= figures["late_p99_us"] <= figures["late_max_us"]
