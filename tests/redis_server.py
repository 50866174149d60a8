"""A real ``redis-server`` for the tests that share quotas through Redis.

Each server runs on a free loopback port in its own temporary folder, with persistence off,
and is stopped when its test (or session) ends. When ``redis-server`` is not installed the
tests that need it are skipped, except under ``CI=true``, where a missing server fails them
(``make test`` installs it when it can; see the Makefile).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pathlib import Path


def redis_binary() -> str:
    """The path of ``redis-server``; skips the test (fails it under CI=true) when absent."""
    found = shutil.which("redis-server")
    if found is None:
        message = "redis-server is not installed (apt-get install redis-server)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return found


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """One ``redis-server`` process; ``stop`` and ``start`` again keep its port."""

    def __init__(self, folder: Path) -> None:
        self.binary = redis_binary()
        self.folder = folder
        self.port = _free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(self.folder),
                "--save",
                "",
                "--appendonly",
                "no",
                "--daemonize",
                "no",
                "--logfile",
                str(self.folder / "redis.log"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                log = (self.folder / "redis.log").read_text()
                raise RuntimeError(f"redis-server exited: {log}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            time.sleep(0.02)
        raise RuntimeError("redis-server did not start within 10 s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)
        self.process = None
