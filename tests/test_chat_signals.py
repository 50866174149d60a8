"""``sluice chat`` and what happens around it: Ctrl-C, a closed stdout, stdin, a file as stdout.

The real command in a subprocess over loopback with the real clock, against the simulator or
a plain server written here; the tests assert exit codes and output, never timing.
"""

from __future__ import annotations

import json
import os
import pty
import signal
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING

import pytest

from .helpers import SLUICE, clean_env, request_line, sim_process

if TYPE_CHECKING:
    from collections.abc import Iterator

TIMEOUT = 60


def _chunk(text: str, finish: str | None = None) -> bytes:
    delta = {"content": text} if text else {}
    body = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(body).encode() + b"\n\n"


class _BreaksOnceHandler(BaseHTTPRequestHandler):
    """The first reply breaks off after "one two "; every later one is whole."""

    protocol_version = "HTTP/1.0"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        attempts = self.server.attempts  # type: ignore[attr-defined]
        attempts.append(1)
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        self.wfile.write(_chunk("one ") + _chunk("two "))
        self.wfile.flush()
        if len(attempts) == 1:
            return  # the connection closes mid-stream: no finish, no [DONE]
        self.wfile.write(_chunk("three") + _chunk("", "stop") + b"data: [DONE]\n\n")

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def breaks_once() -> Iterator[tuple[str, list[int]]]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _BreaksOnceHandler)
    server.attempts = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", server.attempts  # type: ignore[attr-defined]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_a_file_gets_exactly_the_final_text_of_a_retried_stream(breaks_once, tmp_path):
    url, attempts = breaks_once
    out = tmp_path / "answer.txt"
    with out.open("wb") as stdout:
        done = subprocess.run(
            [SLUICE, "chat", "openai:m", "count", "--base-url", url, "--api-key", "sk-test"],
            stdout=stdout,
            stderr=subprocess.PIPE,
            env=clean_env(tmp_path),
            timeout=TIMEOUT,
            check=False,
        )
    assert done.returncode == 0, done.stderr
    assert len(attempts) == 2  # the first attempt did break off and was retried
    assert out.read_text() == "one two three\n"


@pytest.mark.parametrize(
    "args",
    [
        ("chat", "sim:sim-small", "hi"),
        ("chat", "sim:sim-small", "hi", "--json"),
        ("batch", "in.jsonl", "-o", "out.jsonl"),
        ("providers", "list"),
    ],
)
def test_a_closed_stdout_ends_quietly(tmp_path, args):
    (tmp_path / "in.jsonl").write_text(request_line("a") + "\n")
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before anything is written (| head -c 0)
    try:
        done = subprocess.run(
            [SLUICE, *args],
            cwd=tmp_path,
            stdout=write_end,
            stderr=subprocess.PIPE,
            env=clean_env(tmp_path),
            timeout=TIMEOUT,
            check=False,
        )
    finally:
        os.close(write_end)
    assert done.returncode == 141, done.stderr
    assert b"Traceback" not in done.stderr
    if args[0] == "batch":  # the results were written before the summary could not be
        assert len((tmp_path / "out.jsonl").read_bytes().splitlines()) == 1
    else:
        assert done.stderr == b""


def test_the_prompt_dash_is_read_from_stdin(tmp_path):
    def ask(*args: str, stdin: str) -> str:
        done = subprocess.run(
            [SLUICE, "chat", "sim:sim-small", *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=clean_env(tmp_path),
            timeout=TIMEOUT,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    # The simulator's answer depends on the prompt: "-" sent what stdin held.
    assert ask("-", stdin="tell me about rivers") == ask("tell me about rivers", stdin="unused")


def _read_until(fd: int, wanted: int, proc: subprocess.Popen[bytes]) -> bytes:
    got = b""
    deadline = time.monotonic() + TIMEOUT
    while len(got) < wanted:
        assert proc.poll() is None, "sluice ended before streaming"
        assert time.monotonic() < deadline, "no output"
        got += os.read(fd, 1024)
    return got


def test_ctrl_c_during_a_streamed_chat_exits_130_with_one_line(tmp_path):
    with sim_process("--tps", "4", "--output-tokens", "400") as url:
        primary, secondary = pty.openpty()  # a terminal: text streams as it arrives
        args = ["chat", "openai:m", "go", "--base-url", url, "--api-key", "sk-test"]
        with subprocess.Popen(
            [SLUICE, *args], stdout=secondary, stderr=subprocess.PIPE, env=clean_env(tmp_path)
        ) as proc:
            os.close(secondary)
            try:
                _read_until(primary, 10, proc)  # the call is streaming
                proc.send_signal(signal.SIGINT)
                _, stderr = proc.communicate(timeout=TIMEOUT)
            finally:
                os.close(primary)
    assert proc.returncode == 130, stderr
    assert stderr == b"sluice: interrupted\n"
