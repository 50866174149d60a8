"""Resuming a batch redoes what failed: retriable error lines are done again, terminal ones
kept, the output rewritten atomically; SIGTERM drains like the first Ctrl-C.

run_batch in-process through a real runtime and the simulator; the subprocess tests run the
real ``sluice batch`` over loopback and assert what the output file holds, never timing.
"""

from __future__ import annotations

import random
import signal
import subprocess
import time
from typing import Any

import orjson
import pytest
import trio

from sluice import RuntimeConfig, open_runtime
from sluice._cli import main
from sluice._jobs.batch import run_batch
from sluice._jobs.batch_lines import redo_line

from .helpers import SLUICE, count_lines, sim_process, start_batch, wait_for_lines, whole_lines

GUARD = 30
TIMEOUT = 60


def request_line(custom_id: str, content: str) -> str:
    body = {"model": "sim:sim-small", "messages": [{"role": "user", "content": content}]}
    line = {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions"}
    return orjson.dumps({**line, "body": body}).decode()


def write_input(tmp_path, lines):
    source = tmp_path / "in.jsonl"
    source.write_text("\n".join(lines) + "\n")
    return source


def write_many(path, n: int):
    path.write_text("".join(request_line(f"req-{i}", f"{i}") + "\n" for i in range(n)))
    return path


def read_output(path):
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def ok_line(custom_id: str) -> bytes:
    body = {"object": "chat.completion", "choices": [{"message": {"content": "old"}}]}
    data: dict[str, Any] = {"id": "batch_req_old", "custom_id": custom_id, "error": None}
    data["response"] = {"status_code": 200, "request_id": None, "body": body}
    return orjson.dumps(data) + b"\n"


def error_line(custom_id: str | None, code: str, status: int | None = None) -> bytes:
    response = None
    if status is not None:
        error = {"message": "x", "type": code, "param": None, "code": code}
        response = {"status_code": status, "request_id": None, "body": {"error": error}}
    data = {
        "id": "batch_req_old",
        "custom_id": custom_id,
        "response": response,
        "error": {"code": code, "message": "line 1: failed"},
    }
    return orjson.dumps(data) + b"\n"


# The earlier run's output: what each line held, and whether a default resume redoes it.
EARLIER = {
    "r0": (ok_line("r0"), False),
    "r1": (error_line("r1", "server_error", 500), True),
    "r2": (error_line("r2", "invalid_request_error", 400), False),
    "r3": (error_line("r3", "ConnectionFailed"), True),
    "r4": (error_line("r4", "CircuitOpen"), True),
    "r5": (error_line("r5", "ConfigError"), False),  # a bad input line
    "r6": (error_line("r6", "authentication_error", 401), False),
    "r7": (error_line("r7", "rate_limit_exceeded", 429), True),
    "r8": (error_line("r8", "CallTimeout"), True),
    "r9": (error_line("r9", "ContentFiltered"), False),
}
N = 12  # r10 and r11 have no line yet


def prepare(tmp_path):
    source = write_input(tmp_path, [request_line(f"r{i}", f"prompt {i}") for i in range(N)])
    out = tmp_path / "out.jsonl"
    out.write_bytes(b"".join(line for line, _ in EARLIER.values()) + b'{"torn": ')
    return source, out


async def resume(source, out, **options):
    with trio.fail_after(GUARD):
        async with open_runtime(RuntimeConfig()) as rt:
            return await run_batch(source, out, runtime=rt, resume=True, **options)


def test_which_lines_each_mode_redoes():
    for custom_id, (line, retriable) in EARLIER.items():
        data = orjson.loads(line)
        assert redo_line(data, "retriable") is retriable, custom_id
        assert redo_line(data, "all") is (data["error"] is not None)
        assert redo_line(data, "none") is False


async def test_resume_redoes_retriable_error_lines_and_keeps_terminal_ones(tmp_path):
    source, out = prepare(tmp_path)
    summary = await resume(source, out)
    got = {o["custom_id"]: o for o in read_output(out)}
    assert sorted(got) == sorted(f"r{i}" for i in range(N))  # one line per input line
    assert len(read_output(out)) == N
    for custom_id, (line, retriable) in EARLIER.items():
        if retriable:
            assert got[custom_id]["error"] is None
            assert got[custom_id]["response"]["body"]["choices"][0]["message"]["content"]
        else:
            assert orjson.dumps(got[custom_id]) + b"\n" == line  # kept byte for byte
    assert got["r10"]["error"] is None and got["r11"]["error"] is None
    assert (summary.redone, summary.skipped, summary.ok, summary.failed) == (5, 5, 7, 0)
    assert not list(tmp_path.glob("*partial*"))


@pytest.mark.parametrize(("mode", "redone"), [("all", 9), ("none", 0)])
async def test_retry_errors_all_and_none(tmp_path, mode, redone):
    source, out = prepare(tmp_path)
    summary = await resume(source, out, retry_errors=mode)
    got = read_output(out)
    assert sorted(o["custom_id"] for o in got) == sorted(f"r{i}" for i in range(N))
    assert summary.redone == redone
    errors = [o for o in got if o["error"] is not None]
    assert len(errors) == (0 if mode == "all" else 9)


def test_cli_resume_reports_redone_lines(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("SLUICE_CONFIG", raising=False)
    source, out = prepare(tmp_path)
    argv = ["batch", str(source), "-o", str(out), "--resume", "--allow-failures"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "redone 5 (error lines tried again)" in printed
    assert orjson.loads((tmp_path / "out.summary.json").read_bytes())["status"]["redone"] == 5
    assert main([*argv[:-1], "--retry-errors", "sometimes"]) == 2


def test_max_wait_must_be_a_duration(tmp_path, capsys):
    source, out = prepare(tmp_path)
    assert main(["batch", str(source), "-o", str(out), "--resume", "--max-wait", "soon"]) == 2
    assert "--max-wait 'soon' is not a duration" in capsys.readouterr().err


@pytest.fixture(scope="module")
def paced_server():
    with sim_process("--ttft", "0.3") as url:
        yield url


def failed_output(path, n: int) -> None:
    """An earlier run's output where every line failed with a 502."""
    path.write_bytes(b"".join(error_line(f"req-{i}", "bad_gateway", 502) for i in range(n)))


def test_kill_9_during_a_resume_that_redoes_lines_loses_nothing(tmp_path, paced_server):
    """Every line of the earlier output is a retriable error; resumes are killed at random
    moments (before and after the rewrite); the last one finishes: one ok line per input."""
    n = 300
    source, out = write_many(tmp_path / "in.jsonl", n), tmp_path / "out.jsonl"
    failed_output(out, n)
    args = [str(source), "-o", str(out), "--resume", "--max-in-flight", "32"]
    args += ["--model", "local:m", "--base-url", paced_server]
    rng = random.Random(14)
    for attempt in range(4):
        proc = start_batch(*args)
        if attempt == 0:
            time.sleep(rng.uniform(0.0, 0.3))  # early: maybe before the rewrite
        else:
            wait_for_lines(proc, out, rng.randint(1, n // 2))
        proc.kill()
        proc.communicate(timeout=TIMEOUT)
        lines = whole_lines(out)  # whole lines only, at every moment
        ids = [o["custom_id"] for o in lines]
        assert len(ids) == len(set(ids)) <= n
    done = subprocess.run([SLUICE, "batch", *args], capture_output=True, timeout=TIMEOUT)
    assert done.returncode == 0, done.stderr.decode()
    got = whole_lines(out)
    assert sorted(o["custom_id"] for o in got) == sorted(f"req-{i}" for i in range(n))
    assert all(o["error"] is None for o in got)


def test_sigterm_drains_like_the_first_ctrl_c_and_exits_143(tmp_path, paced_server):
    n = 400
    source, out = write_many(tmp_path / "in.jsonl", n), tmp_path / "out.jsonl"
    args = [str(source), "-o", str(out), "--max-in-flight", "16"]
    args += ["--model", "local:m", "--base-url", paced_server]
    proc = start_batch(*args)
    wait_for_lines(proc, out, 20)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 143, stderr.decode()
    assert b"terminated: no new lines" in stderr
    assert b"batch interrupted" in stdout
    written = count_lines(out)
    assert 20 <= written < n
    assert all(o["error"] is None for o in whole_lines(out))  # the calls in flight finished
    summary = orjson.loads((tmp_path / "out.summary.json").read_bytes())
    assert summary["interrupted"] == "drained"
