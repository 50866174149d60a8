"""The real ``sluice batch`` process interrupted: Ctrl-C once, twice, and kill -9.

Subprocesses over loopback with the real clock; the tests assert what the output file holds
(whole lines, one per input line after the resumes), never timing.
"""

from __future__ import annotations

import random
import signal
import subprocess
import time
from typing import TYPE_CHECKING

import orjson
import pytest

from .helpers import SLUICE, count_lines, sim_process, start_batch, wait_for_lines, whole_lines

if TYPE_CHECKING:
    from pathlib import Path

TIMEOUT = 60


@pytest.fixture(autouse=True)
def no_ambient_config(monkeypatch):
    monkeypatch.delenv("SLUICE_CONFIG", raising=False)


@pytest.fixture(scope="module")
def paced_server():
    """A simulator subprocess whose replies start 0.4 s after each request; yields its URL."""
    with sim_process("--ttft", "0.4") as url:
        yield url


def write_input(path: Path, n: int) -> Path:
    lines = (
        orjson.dumps(
            {
                "custom_id": f"req-{i}",
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": {
                    "model": "sim:sim-small",
                    "messages": [{"role": "user", "content": f"{i}"}],
                },
            }
        )
        + b"\n"
        for i in range(n)
    )
    path.write_bytes(b"".join(lines))
    return path


def paced_args(source: Path, out: Path, url: str) -> list[str]:
    model = ["--model", "sim:sim-small", "--base-url", url, "--api-key", "sk-test"]
    return [str(source), "-o", str(out), "--resume", "--max-in-flight", "4", *model]


def resume_to_the_end(args: list[str], out: Path, n: int) -> None:
    done = subprocess.run([SLUICE, "batch", *args], capture_output=True, timeout=TIMEOUT)
    assert done.returncode == 0, done.stderr.decode()
    got = whole_lines(out)
    assert sorted(o["custom_id"] for o in got) == sorted(f"req-{i}" for i in range(n))
    assert all(o["error"] is None for o in got)


def test_first_ctrl_c_lets_the_calls_in_flight_finish(tmp_path, paced_server):
    source, out = write_input(tmp_path / "in.jsonl", 16), tmp_path / "out.jsonl"
    args = paced_args(source, out, paced_server)
    proc = start_batch(*args)
    at_signal = wait_for_lines(proc, out, 4)  # the first four; the next four are in flight
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 130, stderr.decode()
    assert b"stopping" in stderr
    got = whole_lines(out)
    assert at_signal < len(got) < 16  # the calls in flight were written; no new ones began
    assert all(o["error"] is None for o in got)
    summary = orjson.loads((tmp_path / "out.summary.json").read_bytes())
    assert summary["interrupted"] == "drained"
    assert summary["status"]["ok"] == len(got)
    assert summary["status"]["not_done"] == 16 - len(got)
    assert b"batch interrupted" in stdout
    resume_to_the_end(args, out, 16)


def test_second_ctrl_c_cancels_the_calls_in_flight(tmp_path, paced_server):
    source, out = write_input(tmp_path / "in.jsonl", 16), tmp_path / "out.jsonl"
    args = paced_args(source, out, paced_server)
    proc = start_batch(*args)
    at_signal = wait_for_lines(proc, out, 4)
    proc.send_signal(signal.SIGINT)
    # The second Ctrl-C only after the first was taken (signals that arrive together are
    # received as one): the CLI says so on stderr.
    assert proc.stderr is not None
    seen = b""
    while b"stopping" not in seen:
        line = proc.stderr.readline()
        assert line, "the batch ended without taking the first Ctrl-C"
        seen += line
    proc.send_signal(signal.SIGINT)
    _, rest = proc.communicate(timeout=TIMEOUT)
    stderr = seen + rest
    assert proc.returncode == 130, stderr.decode()
    assert b"cancelling" in stderr
    got = whole_lines(out)
    # The four calls in flight needed 0.4 s more: cancelled, not written (the margin allows
    # for a box so slow that one of them beat the second Ctrl-C).
    assert at_signal <= len(got) < at_signal + 4
    summary = orjson.loads((tmp_path / "out.summary.json").read_bytes())
    assert summary["interrupted"] == "cancelled"
    assert summary["status"]["not_done"] == 16 - len(got)
    resume_to_the_end(args, out, 16)


def test_kill_9_at_random_moments_then_resume_gives_every_line_once(tmp_path):
    n = 2000
    source, out = write_input(tmp_path / "in.jsonl", n), tmp_path / "out.jsonl"
    args = [str(source), "-o", str(out), "--resume", "--max-in-flight", "64"]
    rng = random.Random(9)
    kills = 0
    for _ in range(3):
        before = count_lines(out)
        proc = start_batch(*args)
        # A random point of what is left: some lines written, not all.
        target = before + rng.randint(1, (n - before) * 3 // 4)
        wait_for_lines(proc, out, target)
        time.sleep(rng.uniform(0, 0.01))
        proc.kill()
        proc.communicate(timeout=TIMEOUT)
        kills += proc.returncode == -signal.SIGKILL
        assert count_lines(out) < n
    assert kills == 3
    resume_to_the_end_plain(args, out, n)


def resume_to_the_end_plain(args: list[str], out: Path, n: int) -> None:
    done = subprocess.run([SLUICE, "batch", *args], capture_output=True, timeout=TIMEOUT)
    assert done.returncode == 0, done.stderr.decode()
    raw = out.read_bytes()
    assert raw.endswith(b"\n")
    got = [orjson.loads(line) for line in raw.splitlines()]
    ids = [o["custom_id"] for o in got]
    assert len(got) == n
    assert len(set(ids)) == n
    assert set(ids) == {f"req-{i}" for i in range(n)}
    assert all(o["error"] is None and o["response"]["status_code"] == 200 for o in got)
