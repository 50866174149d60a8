"""Real processes against a real ``redis-server`` that stops, restarts empty, or outlives a
process killed with ``kill -9``; the suite's own loopback server (``tests/faulty_server.py``)
counts what arrives. Real clock: these assert what happened, never how fast.
"""

from __future__ import annotations

import subprocess
import time
from typing import TYPE_CHECKING

from .faulty_server import FaultyServer, input_lines
from .helpers import SLUICE, clean_env, whole_lines

if TYPE_CHECKING:
    from pathlib import Path

OUTAGE = 10.0
"""Seconds Redis is down in the batch test (the issue's blip)."""


def test_a_default_batch_in_fail_mode_waits_out_a_redis_outage(tmp_path: Path, redis_server):
    """``sluice batch`` with every setting at its default (so ``on_store_error="fail"``) and
    the quota store in Redis: Redis is stopped for 10 s mid-run and started again on the same
    port (empty). Batch lines wait for the store like for any transient failure: no error
    line, one line per input line, each sent once."""
    n = 1200
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    source.write_bytes(b"".join(input_lines(n)))
    argv = [SLUICE, "batch", str(source), "-o", str(out), "--model", "local:m"]
    with FaultyServer(delay=0.5) as server:
        argv += ["--base-url", server.url]
        env = clean_env(tmp_path, SLUICE_STORE=redis_server.url)
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            _wait_for(lambda: server.requests >= 300, proc)
            redis_server.stop()
            stopped = server.requests
            time.sleep(OUTAGE)
            during = server.requests - stopped
            redis_server.start()
            _, stderr = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 0, stderr.decode()[-3000:]
    assert b"Traceback" not in stderr
    lines = whole_lines(out)
    assert sorted(x["custom_id"] for x in lines) == sorted(f"r{i}" for i in range(n))
    assert [x["error"] for x in lines if x["error"] is not None] == []
    assert server.requests == n  # each line sent once
    assert during <= 256  # only what was admitted before the outage went out during it
    assert stopped < n  # the outage really came mid-run


def _wait_for(done, proc: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert proc.poll() is None, proc.communicate()[1].decode()[-3000:]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)
