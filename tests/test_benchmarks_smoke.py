"""The overhead benchmark runs end to end against the in-process simulator and reports sanely."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parent.parent


def test_overhead_benchmark_runs_against_the_simulator() -> None:
    command = [sys.executable, "-m", "benchmarks.overhead", "--sim"]
    command += ["--calls", "20", "--concurrency", "4", "--repeat", "1"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
    lines = done.stdout.decode().strip().splitlines()
    assert len(lines) == 1, lines
    report = orjson.loads(lines[0])
    assert report["errors"] == 0, report["first_errors"]
    assert report["ratio"] > 0
    assert report["sluice_cpu_s_per_1k"] > 0 and report["bare_cpu_s_per_1k"] > 0
    assert report["calls"] == 20 and report["concurrency"] == 4 and report["chunks"] == 20
    assert report["server"] == "in-process sim"
    assert report["texts_match"] is True
