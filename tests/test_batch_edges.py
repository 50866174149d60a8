"""The real ``sluice batch`` process at its edges: two runs on one output, a resume with
another input, one Ctrl-C (or SIGTERM) while calls wait for the rate limit, kept error lines,
and every check that must fail before the output is touched.

Subprocesses with real signals against ``tests/faulty_server.py`` (a plain standard-library
server, not the simulator), which counts the requests it receives: what a stopped batch still
sends is counted by the server, not by sluice. The real clock, asserting behaviour.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from typing import TYPE_CHECKING

import orjson
import pytest

from .faulty_server import FaultyServer, input_lines
from .helpers import SLUICE, clean_env, count_lines, wait_for_lines, whole_lines

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

TIMEOUT = 60


@pytest.fixture
def server() -> Iterator[FaultyServer]:
    with FaultyServer() as found:
        yield found


def write_input(path: Path, n: int, prompt: str = "line") -> Path:
    data = b"".join(input_lines(n))
    path.write_bytes(data if prompt == "line" else data.replace(b'"line ', f'"{prompt} '.encode()))
    return path


def batch_args(source: Path, out: Path, server: FaultyServer, *extra: str) -> list[str]:
    model = ["--model", "local:m", "--base-url", server.url]
    return [SLUICE, "batch", str(source), "-o", str(out), *model, *extra]


def start(argv: list[str], home: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=clean_env(home)
    )


def run(argv: list[str], home: Path, **env: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(argv, capture_output=True, timeout=TIMEOUT, env=clean_env(home, **env))


def one_error_line(stderr: bytes) -> str:
    """The one ``sluice: error:`` line a refused command prints, and nothing else."""
    text = stderr.decode()
    assert "Traceback" not in text, text
    lines = text.splitlines()
    assert len(lines) == 1 and lines[0].startswith("sluice: error: "), text
    return lines[0]


def ids(out: Path) -> list[str]:
    return sorted(line["custom_id"] for line in whole_lines(out))


# -- one writer per output --------------------------------------------------------------------


def test_a_second_run_on_the_same_output_is_refused_and_the_first_completes(tmp_path, server):
    n = 32  # 4 a second: 8 s, time enough for a second process to start on a loaded box
    source, out = write_input(tmp_path / "in.jsonl", n), tmp_path / "out.jsonl"
    argv = batch_args(source, out, server, "--resume", "--rpm", "240")
    first = start(argv, tmp_path)
    wait_for_lines(first, out, 1)
    second = run(argv, tmp_path)
    assert second.returncode == 2
    line = one_error_line(second.stderr)
    assert f"process {first.pid}" in line and "being written" in line
    _, stderr = first.communicate(timeout=TIMEOUT)
    assert first.returncode == 0, stderr.decode()
    assert ids(out) == sorted(f"r{i}" for i in range(n))  # whole, one line each
    assert server.requests == n
    assert not (tmp_path / "out.jsonl.lock").exists()


def test_kill_9_leaves_no_lock_behind(tmp_path, server):
    source, out = write_input(tmp_path / "in.jsonl", 8), tmp_path / "out.jsonl"
    argv = batch_args(source, out, server, "--resume", "--rpm", "240")
    first = start(argv, tmp_path)
    wait_for_lines(first, out, 1)
    first.kill()
    first.communicate(timeout=TIMEOUT)
    assert (tmp_path / "out.jsonl.lock").exists()  # the file stays; its lock died
    done = run(argv[:-2], tmp_path)  # the resume, without the rate limit
    assert done.returncode == 0, done.stderr.decode()
    assert ids(out) == sorted(f"r{i}" for i in range(8))


# -- one input per output ---------------------------------------------------------------------


def test_resume_with_another_input_is_refused_and_the_output_is_unchanged(tmp_path, server):
    source, out = write_input(tmp_path / "a.jsonl", 5), tmp_path / "out.jsonl"
    done = run(batch_args(source, out, server), tmp_path)
    assert done.returncode == 0, done.stderr.decode()
    before = out.read_bytes()
    record = orjson.loads((tmp_path / "out.input.json").read_bytes())
    assert record["bytes"] == source.stat().st_size and record["model"] == "local:m"

    # Same custom_ids, other prompts: A's answers must not stand for B's prompts.
    other = write_input(tmp_path / "b.jsonl", 5, prompt="other")
    refused = run(batch_args(other, out, server, "--resume"), tmp_path)
    assert refused.returncode == 2
    assert "answers another input" in one_error_line(refused.stderr)
    assert out.read_bytes() == before

    # The same input under another --model or --shard is another output too.
    for extra in (["--model", "local:n"], ["--shard", "0/2"]):
        argv = [*batch_args(source, out, server, "--resume"), *extra]
        refused = run(argv, tmp_path)
        assert refused.returncode == 2
        assert extra[0] in one_error_line(refused.stderr)
        assert out.read_bytes() == before
    assert server.requests == 5


def test_lines_appended_to_the_input_are_resumed(tmp_path, server):
    source, out = write_input(tmp_path / "in.jsonl", 5), tmp_path / "out.jsonl"
    assert run(batch_args(source, out, server), tmp_path).returncode == 0
    source.write_bytes(b"".join(input_lines(8)))  # lines 5-7 appended
    done = run(batch_args(source, out, server, "--resume"), tmp_path)
    assert done.returncode == 0, done.stderr.decode()
    assert ids(out) == sorted(f"r{i}" for i in range(8))
    assert server.requests == 8
    assert b"skipped 5" in done.stdout


# -- stopping means stopping ------------------------------------------------------------------


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_one_signal_withdraws_the_calls_waiting_for_the_rate_limit(
    tmp_path, server, signum, status
):
    n = 100
    source, out = write_input(tmp_path / "in.jsonl", n), tmp_path / "out.jsonl"
    argv = batch_args(source, out, server, "--resume", "--rpm", "120")
    started = time.monotonic()
    proc = start(argv, tmp_path)
    # 4 s into the run, and the run under way (on a loaded box, the interpreter may take
    # seconds to start; a signal before sluice handles them would only kill it).
    wait_for_lines(proc, out, 1)
    time.sleep(max(0.0, 4 - (time.monotonic() - started)))
    sent = server.requests
    proc.send_signal(signum)
    signalled = time.monotonic()
    stdout, stderr = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == status, stderr.decode()
    assert time.monotonic() - signalled < 10
    # At 2 a second (120 a minute, paced), the calls admitted but not yet sent when the
    # signal came are one step's worth (two steps if the loaded box stalled the process):
    # every other call was withdrawn unsent (before the fix, all ~90 queued ones went out).
    assert server.requests - sent <= 4
    assert 0 < server.requests < n
    got = whole_lines(out)
    assert len(got) == server.requests  # every call sent was answered and written
    assert all(line["error"] is None for line in got)
    summary = orjson.loads((tmp_path / "out.summary.json").read_bytes())
    assert summary["interrupted"] == "drained"
    assert summary["status"]["not_done"] == n - len(got)
    assert b"batch interrupted" in stdout

    done = run(argv[:-2], tmp_path)  # --resume, at full speed
    assert done.returncode == 0, done.stderr.decode()
    assert ids(out) == sorted(f"r{i}" for i in range(n))  # exactly 100, each once
    assert server.requests == n


# -- honest exits -----------------------------------------------------------------------------


def test_a_resume_that_keeps_error_lines_exits_1(tmp_path, server):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    source.write_bytes(b"".join(input_lines(3)) + b"{not json\n")
    first = run(batch_args(source, out, server), tmp_path)
    assert first.returncode == 1
    again = run(batch_args(source, out, server, "--resume"), tmp_path)
    assert again.returncode == 1, again.stderr.decode()  # nothing new failed; one still has
    summary = orjson.loads((tmp_path / "out.summary.json").read_bytes())
    assert summary["status"]["kept_failed"] == 1
    assert summary["status"]["failed_in_output"] == 1
    assert summary["status"]["skipped"] == 4
    allowed = run(batch_args(source, out, server, "--resume", "--allow-failures"), tmp_path)
    assert allowed.returncode == 0
    assert count_lines(out) == 4


# -- nothing touched before the first call can start ------------------------------------------


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


PRECALL_CASES = {
    "unreachable store": (["--store", "redis://127.0.0.1:1/0"], {}),
    "bad SLUICE_STORE": ([], {"SLUICE_STORE": "bogus"}),
    "budget inf": (["--budget", "inf"], {}),
    "budget nan": (["--budget", "nan"], {}),
    "budget negative": (["--budget=-1"], {}),
    "busy metrics port": (["--metrics-port", "BUSY"], {}),
}


@pytest.mark.parametrize(
    ("case", "mode"),
    [(case, "--overwrite") for case in sorted(PRECALL_CASES)]
    + [("unreachable store", "--resume"), ("busy metrics port", "--resume")],
)
def test_a_failed_check_leaves_the_output_byte_identical(tmp_path, server, busy_port, case, mode):
    work = tmp_path / "work"
    work.mkdir()
    source, out = write_input(work / "in.jsonl", 4), work / "out.jsonl"
    old = b'{"custom_id": "r0", "error": null}\n{"custom_id": "r1", "err'  # a torn last line
    out.write_bytes(old)
    extra, env = PRECALL_CASES[case]
    extra = [str(busy_port) if arg == "BUSY" else arg for arg in extra]
    refused = run(batch_args(source, out, server, mode, *extra), tmp_path, **env)
    assert refused.returncode == 2
    one_error_line(refused.stderr)
    assert out.read_bytes() == old
    assert server.requests == 0
    assert sorted(p.name for p in work.iterdir()) == ["in.jsonl", "out.jsonl"]  # nothing new


def test_a_full_disk_is_found_before_any_call(tmp_path, server):
    source = write_input(tmp_path / "in.jsonl", 4)
    argv = [SLUICE, "batch", str(source), "-o", "/dev/full", "--model", "local:m"]
    refused = run([*argv, "--base-url", server.url], tmp_path)
    assert refused.returncode == 2
    assert "No space left" in one_error_line(refused.stderr)
    assert server.requests == 0


def test_an_input_in_utf16_is_refused_up_front(tmp_path, server):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    source.write_bytes(b"".join(input_lines(3)).decode().encode("utf-16"))
    refused = run(batch_args(source, out, server), tmp_path)
    assert refused.returncode == 2
    assert "not UTF-8" in one_error_line(refused.stderr)
    assert not out.exists() and server.requests == 0


def test_a_byte_order_mark_is_accepted(tmp_path, server):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    source.write_bytes(b"\xef\xbb\xbf" + b"".join(input_lines(3)).replace(b"\n", b"\r\n"))
    done = run(batch_args(source, out, server), tmp_path)
    assert done.returncode == 0, done.stderr.decode()
    assert ids(out) == ["r0", "r1", "r2"]


def test_an_empty_input_says_so_and_gives_an_empty_output(tmp_path, server):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    source.write_bytes(b"\n\n")
    done = run(batch_args(source, out, server), tmp_path)
    assert done.returncode == 0
    assert b"holds no request lines" in done.stderr
    assert out.read_bytes() == b""
