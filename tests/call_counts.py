"""What the call-cost tests share: the canned SSE server as a process of its own, and an
instrument that counts the tasks spawned and the actors' per-call task steps."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import trio

if TYPE_CHECKING:
    from collections.abc import Iterator

SERVER = Path(__file__).with_name("canned_sse_server.py")


@contextlib.contextmanager
def canned_server() -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``tests/canned_sse_server.py`` running in its own process: the process and its root
    URL, stopped on leaving."""
    with subprocess.Popen(
        [sys.executable, str(SERVER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as proc:
        try:
            assert proc.stdout is not None
            port = int(proc.stdout.readline())
            yield proc, f"http://127.0.0.1:{port}"
        finally:
            proc.terminate()
            proc.wait(timeout=10)


class ActorCounts(trio.abc.Instrument):
    """Tasks spawned (by name) and the steps of the Supervisor's call tasks and the providers'
    attempt tasks, while installed."""

    def __init__(self) -> None:
        self.spawned: list[str] = []
        self.steps = {"_supervise": 0, "_serve_attempt": 0}

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        self.spawned.append(task.name)

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        code = getattr(task.coro, "cr_code", None)
        if code is not None and code.co_name in self.steps:
            self.steps[code.co_name] += 1
