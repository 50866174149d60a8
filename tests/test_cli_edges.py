"""``chat`` and ``serve`` at their edges, and every command with its stdout closed: the real
``sluice`` process.

A check that fails before a command can start (a port in use or out of range, a host that does
not resolve, a bad store URL) is one ``sluice: error:`` line and exit status 2, never a
traceback; a closed stdout is status 141 (``--help`` included); a model group of the config is
accepted wherever a model is.
"""

from __future__ import annotations

import os
import socket
import subprocess
from typing import TYPE_CHECKING

import orjson
import pytest

from .helpers import SLUICE, clean_env, request_line

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

TIMEOUT = 60


def sluice(home: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SLUICE, *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=clean_env(home, **env),
        cwd=home,
    )


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


CASES = {
    "serve on a busy port": (("serve", "--port", "BUSY"), {}, "cannot listen on 127.0.0.1:"),
    "serve --port 99999": (("serve", "--port", "99999"), {}, "--port must be between"),
    "serve on an unknown host": (
        ("serve", "--host", "no-such-host.invalid", "--port", "0"),
        {},
        "cannot listen on no-such-host.invalid:0",
    ),
    "serve with a bad SLUICE_STORE": (
        ("serve", "--port", "0", "--no-auth"),
        {"SLUICE_STORE": "bogus"},
        "store 'bogus'",
    ),
    "chat with a bad SLUICE_STORE": (
        ("chat", "sim:sim-small", "hi"),
        {"SLUICE_STORE": "bogus"},
        "store 'bogus'",
    ),
    "chat with an unreachable store": (
        ("chat", "sim:sim-small", "hi"),
        {"SLUICE_STORE": "redis://127.0.0.1:1/0"},
        "cannot reach the quota store",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_command_that_cannot_start_says_so_in_one_line(tmp_path, busy_port, case):
    args, env, message = CASES[case]
    args = tuple(str(busy_port) if arg == "BUSY" else arg for arg in args)
    done = sluice(tmp_path, *args, **env)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("sluice: error: "), done.stderr
    assert message in lines[0]


@pytest.mark.parametrize(
    "args",
    [("--help",), ("batch", "--help"), ("serve", "--help"), ("providers", "list"), ("--version",)],
)
def test_a_closed_stdout_is_status_141_without_a_traceback(tmp_path, args):
    read, write = os.pipe()
    os.close(read)  # the reader left before anything was written (`sluice ... | head -0`)
    try:
        done = subprocess.run(
            [SLUICE, *args],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=TIMEOUT,
            env=clean_env(tmp_path),
        )
    finally:
        os.close(write)
    assert done.returncode == 141
    assert done.stderr == ""


GROUPS = {"groups": {"fast": {"deployments": [{"model": "sim:sim-small"}]}}}


def test_chat_takes_a_model_group(tmp_path):
    config = tmp_path / "config.json"
    config.write_bytes(orjson.dumps(GROUPS))
    done = sluice(tmp_path, "chat", "fast", "hi", "--json", "--config", str(config))
    assert done.returncode == 0, done.stderr
    assert orjson.loads(done.stdout)["model"] == "sim-small"
    unknown = sluice(tmp_path, "chat", "slow", "hi", "--config", str(config))
    assert unknown.returncode == 2


def test_batch_takes_a_model_group_in_lines_and_in_model(tmp_path):
    config = tmp_path / "config.json"
    config.write_bytes(orjson.dumps(GROUPS))
    source = tmp_path / "in.jsonl"
    source.write_text(request_line("a", model="fast") + "\n" + request_line("b") + "\n")
    for out, extra in (("lines.jsonl", ()), ("model.jsonl", ("--model", "fast"))):
        done = sluice(tmp_path, "batch", str(source), "-o", out, "--config", str(config), *extra)
        assert done.returncode == 0, done.stderr
        lines = [orjson.loads(raw) for raw in (tmp_path / out).read_bytes().splitlines()]
        assert sorted(line["custom_id"] for line in lines) == ["a", "b"]
        assert all(line["error"] is None for line in lines)
