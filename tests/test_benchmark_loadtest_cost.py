"""``benchmarks/loadtest_cost.py`` counts what an open-loop load-test request costs the
client: a smoke test of its report against the canned SSE server (the counts themselves are
bounded in ``tests/test_loadtest_cost.py``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson

from .call_counts import canned_server

ROOT = Path(__file__).resolve().parent.parent


def test_loadtest_cost_benchmark_reports_counts_per_request() -> None:
    with canned_server() as (_, url):
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "benchmarks.loadtest_cost",
                "--base-url",
                f"{url}/c20/v1",
                "--requests",
                "20",
                "--profile",
                "--window",
            ],
            cwd=ROOT,
            capture_output=True,
            timeout=120,
            check=False,
        )
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]
    [line] = done.stdout.decode().strip().splitlines()
    report: dict[str, Any] = orjson.loads(line)
    assert report["benchmark"] == "loadtest_cost"
    assert report["requests"] == 20 and report["failed"] == 0
    assert report["steps_per_request"]["_Run.send_at"] >= 1
    assert report["io_waits_per_request"] > 0 and report["python_calls_per_request"] > 0
