"""Four ``sluice batch --shard i/4`` processes share one quota through Redis.

An independent loopback server (a plain ``http.server`` here, not sluice's simulator) records
when each request arrives on its own clock; the test checks that no window of the shared limit
ever saw more than the limit, and that the shards together kept the limit busy.

Scaling: the issue's acceptance run is ``--rpm 600`` and 1,200 lines (two minutes). Here the
same rate runs over windows ten times shorter: 60 requests per 6 s (600 a minute) plus the
pacing window ``--rpm 600`` sets (10 requests per second), and 120 lines, so N / rate = 12 s.
``SLUICE_FULL_SHARDS=1`` runs the full-size version (``--rpm 600``, 1,200 lines, 60 s windows)
instead (about 2 minutes per test): ``SLUICE_FULL_SHARDS=1 .venv/bin/pytest -o
faulthandler_timeout=0 tests/test_redis_shards.py``.
"""

from __future__ import annotations

import bisect
import http.server
import os
import signal
import subprocess
import threading
import time
import uuid
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import orjson
import pytest

from .helpers import SLUICE

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

FULL = os.environ.get("SLUICE_FULL_SHARDS") == "1"
LINES, LIMIT, PERIOD = (1200, 600, 60.0) if FULL else (120, 60, 6.0)
RATE = LIMIT / PERIOD  # requests per second
PACE = 10  # the pacing window --rpm 600 sets: 10 requests per second
REPLY = orjson.dumps(
    {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
    }
)


@pytest.fixture(autouse=True)
def no_ambient_config(monkeypatch):
    monkeypatch.delenv("SLUICE_CONFIG", raising=False)
    monkeypatch.delenv("SLUICE_STORE", raising=False)


@contextmanager
def recording_server() -> Iterator[tuple[str, list[float]]]:
    """An OpenAI-compatible server answering every chat call at once; yields its base URL and
    the arrival times it records (``time.monotonic`` in the server's thread)."""
    arrivals: list[float] = []
    lock = threading.Lock()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            with lock:
                arrivals.append(time.monotonic())
            self.rfile.read(int(self.headers.get("content-length") or 0))
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(REPLY)))
            self.end_headers()
            self.wfile.write(REPLY)
            self.wfile.flush()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", arrivals
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def most_in_any_window(arrivals: list[float], period: float) -> int:
    """The most arrivals in any half-open interval ``[t, t + period)``."""
    times = sorted(arrivals)
    return max((bisect.bisect_left(times, t + period) - i for i, t in enumerate(times)), default=0)


def write_input(path: Path, n: int) -> Path:
    path.write_bytes(
        b"".join(
            orjson.dumps(
                {
                    "custom_id": f"req-{i}",
                    "method": "POST",
                    "url": "/v1/chat/completions",
                    "body": {"model": "m", "messages": [{"role": "user", "content": str(i)}]},
                }
            )
            + b"\n"
            for i in range(n)
        )
    )
    return path


def shard_command(tmp_path: Path, url: str, redis: str, prefix: str, shard: int) -> list[str]:
    config = tmp_path / "limits.toml"
    text = f'store_prefix = "{prefix}"\n'
    if not FULL:
        text += (
            "[providers.loop.rate_limit]\n"
            f'windows = [{{dimension = "requests", limit = {LIMIT}, per = {PERIOD}}},'
            f' {{dimension = "requests", limit = {PACE}, per = 1.0}}]\n'
        )
    config.write_text(text)
    limits = ["--rpm", str(LIMIT)] if FULL else []
    return [
        SLUICE,
        "batch",
        str(tmp_path / "input.jsonl"),
        "-o",
        str(tmp_path / f"out-{shard}.jsonl"),
        "--model",
        "loop:m",
        "--base-url",
        url,
        "--api-key",
        "k",
        "--no-stream",
        "--shard",
        f"{shard}/4",
        "--store",
        redis,
        "--max-in-flight",
        "16",
        "--log-interval",
        "60",
        "--config",
        str(config),
        *limits,
    ]


def run_shards(
    tmp_path: Path, redis: str, *, kill_after: float | None = None
) -> tuple[list[float], list[dict[str, Any]]]:
    prefix = f"shards-{uuid.uuid4().hex}"
    write_input(tmp_path / "input.jsonl", LINES)
    env = {**os.environ, "SLUICE_LEDGER_DB": "off"}
    with recording_server() as (url, arrivals):
        commands = [shard_command(tmp_path, url, redis, prefix, i) for i in range(4)]
        procs = [
            subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
            for c in commands
        ]
        if kill_after is not None:
            time.sleep(kill_after)
            procs[0].send_signal(signal.SIGKILL)
            procs[0].communicate(timeout=30)  # reaps it and closes its pipes
            # Resumed: the same command with --resume redoes what has no output line yet.
            procs[0] = subprocess.Popen(
                [*commands[0], "--resume"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
            )
        timeout = 3 * LINES / RATE + 60
        for proc in procs:
            _, err = proc.communicate(timeout=timeout)
            assert proc.returncode == 0, err.decode()[-2000:]
        recorded = list(arrivals)
    lines = []
    for i in range(4):
        lines += [orjson.loads(x) for x in (tmp_path / f"out-{i}.jsonl").read_bytes().splitlines()]
    return recorded, lines


def test_four_shards_sharing_one_redis_never_exceed_the_shared_limit(redis_url, tmp_path):
    arrivals, lines = run_shards(tmp_path, redis_url)
    assert sorted(line["custom_id"] for line in lines) == sorted(f"req-{i}" for i in range(LINES))
    assert all(line["error"] is None for line in lines)
    assert len(arrivals) == LINES
    assert most_in_any_window(arrivals, PERIOD) <= LIMIT
    # One request every 1/RATE s from the first: the last arrives (LINES - 1) / RATE s after
    # it. The shards together kept the shared limit busy: within 3% of N / rate.
    span = max(arrivals) - min(arrivals)
    assert span <= 1.03 * LINES / RATE


def test_a_shard_killed_and_resumed_frees_its_share_and_the_limit_holds(redis_url, tmp_path):
    """One shard is killed with kill -9 a sixth of the way in (20 s of the full two-minute run)
    and resumed; what it held lapses, and the limit still holds over every window."""
    arrivals, lines = run_shards(tmp_path, redis_url, kill_after=LINES / RATE / 6)
    assert sorted(line["custom_id"] for line in lines) == sorted(f"req-{i}" for i in range(LINES))
    assert most_in_any_window(arrivals, PERIOD) <= LIMIT
    # Lines the killed shard had sent but not written are sent again after the resume.
    assert LINES <= len(arrivals) <= LINES + 16
