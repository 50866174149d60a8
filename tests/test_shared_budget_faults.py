"""Three ``sluice batch`` processes share one budget through a real ``redis-server`` while it
stays healthy, is restarted without its data, is paused (SIGSTOP) in ``local`` mode, and is
down (killed, then started again empty) in ``local`` mode; the suite's own server
(``tests/faulty_server.py``) counts what they really spent.

Every line costs 3 prompt tokens at $1/M and 50 output tokens at $4/M: 203 micro-dollars, its
worst case (``max_tokens`` 60) a little more. Each process has more lines than the budget pays
for, so every process keeps asking until the budget is spent. The budget may be passed by at
most one call's worst case per process.

The four scenarios run at once, each with its own Redis and server. The outages last seconds,
not the 40 s and 60 s an operator saw: what a process may spend without Redis is a share of
what was left, whatever the time, and the outages here are long enough for every process to
use its share up (the test checks that calls were sent during each one).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import attrs
import orjson

from .faulty_server import FaultyServer
from .helpers import SLUICE, clean_env
from .redis_server import RedisServer

BUDGET_MICROS = 20_000
LINE_MICROS = 3 * 1 + 50 * 4
WORST_MICROS = 300
"""Above any line's worst case: its prompt estimate at $1/M and 60 output tokens at $4/M."""
LINES = 80
"""Per process: 240 lines cost more than twice the budget."""
FAULT_AFTER = 20
"""Requests the server has answered when the fault starts (a fifth of the budget), once
every process has sent one (a process that starts while Redis is down refuses to run)."""


@attrs.define
class Scenario:
    name: str
    mode: str
    outage: float | None
    """Seconds Redis is paused or down; None: healthy; 0: a restart."""
    kind: str = "none"
    folder: Path | None = None
    redis: RedisServer | None = None
    server: FaultyServer | None = None
    processes: list[subprocess.Popen[bytes]] = attrs.Factory(list)
    fault_at: float | None = None
    outage_requests: int = 0
    done: bool = False
    took: float = 0.0

    def spent(self) -> int:
        assert self.server is not None
        return self.server.requests * LINE_MICROS


def _start(scenario: Scenario, tmp_path: Path) -> None:
    folder = scenario.folder = tmp_path / scenario.name
    folder.mkdir()
    scenario.redis = RedisServer(folder)
    scenario.redis.start()
    scenario.server = FaultyServer(completion_tokens=50, delay=0.3).__enter__()
    config = folder / "config.json"
    settings = {
        "ledger": {"prices": {"local:m": {"input": 1.0, "output": 4.0}}},
        "on_store_error": scenario.mode,
        "store_prefix": scenario.name,
    }
    config.write_bytes(orjson.dumps(settings))
    for p in range(3):
        source = folder / f"in{p}.jsonl"
        source.write_bytes(b"".join(_line(f"p{p}-{i}", f"process {p}") for i in range(LINES)))
        argv = [SLUICE, "batch", str(source), "-o", str(folder / f"out{p}.jsonl")]
        argv += ["--model", "local:m", "--base-url", scenario.server.url]
        argv += ["--config", str(config), "--budget", str(BUDGET_MICROS / 1e6)]
        argv += ["--job", "shared", "--store", scenario.redis.url, "--max-in-flight", "4"]
        argv += ["--allow-failures", "--max-wait", "2m"]
        with (folder / f"err{p}.log").open("wb") as log:
            scenario.processes.append(
                subprocess.Popen(argv, env=clean_env(folder), stdout=subprocess.DEVNULL, stderr=log)
            )


def _line(custom_id: str, prompt: str) -> bytes:
    body = {"model": "m", "max_tokens": 60, "messages": [{"role": "user", "content": prompt}]}
    line = {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions"}
    return orjson.dumps({**line, "body": body}) + b"\n"


def _step(scenario: Scenario, now: float) -> None:
    """Start or end the scenario's fault when it is due."""
    redis, server = scenario.redis, scenario.server
    assert redis is not None and server is not None
    if scenario.outage is None:
        return
    pid = redis.process.pid if redis.process is not None else 0
    if scenario.fault_at is None and server.requests >= FAULT_AFTER and len(server.prompts) == 3:
        scenario.fault_at = now
        scenario.outage_requests = -server.requests
        if scenario.kind == "pause":
            os.kill(pid, signal.SIGSTOP)
        else:
            redis.stop()  # killed: without persistence its data is gone
        if scenario.outage == 0:
            redis.start()
            scenario.outage_requests = 0
            scenario.outage = None  # nothing more to do
    elif scenario.fault_at is not None and now >= scenario.fault_at + scenario.outage:
        scenario.outage_requests += server.requests
        if scenario.kind == "pause":
            os.kill(pid, signal.SIGCONT)
        else:
            redis.start()
        scenario.outage = None


def test_three_processes_sharing_a_budget_stay_within_it_through_redis_faults(tmp_path):
    scenarios = [
        Scenario("healthy", "fail", None),
        Scenario("restart", "fail", 0.0, "restart"),
        Scenario("pause", "local", 10.0, "pause"),
        Scenario("down", "local", 10.0, "down"),
    ]
    try:
        for scenario in scenarios:
            _start(scenario, tmp_path)
        began = time.monotonic()
        deadline = began + 240
        while not all(s.done for s in scenarios):
            assert time.monotonic() < deadline, [s.name for s in scenarios if not s.done]
            now = time.monotonic()
            for scenario in scenarios:
                _step(scenario, now)
                if scenario.outage is None and not scenario.done:
                    scenario.done = all(p.poll() is not None for p in scenario.processes)
                    scenario.took = now - began
            time.sleep(0.05)
    finally:
        for scenario in scenarios:
            for process in scenario.processes:
                if process.poll() is None:
                    process.kill()
                    process.wait()
            if scenario.redis is not None:
                if scenario.redis.process is not None and scenario.outage is not None:
                    os.kill(scenario.redis.process.pid, signal.SIGCONT)
                scenario.redis.stop()
            if scenario.server is not None:
                scenario.server.__exit__(None, None, None)
    report = {s.name: (s.spent(), s.outage_requests, s.fault_at is not None) for s in scenarios}
    print(report, {s.name: round(s.took, 1) for s in scenarios})
    for scenario in scenarios:
        assert scenario.folder is not None
        codes = [p.returncode for p in scenario.processes]
        logs = [(scenario.folder / f"err{p}.log").read_text()[-2000:] for p in range(3)]
        assert codes == [0, 0, 0], (scenario.name, codes, logs)
        spent = scenario.spent()
        assert spent <= BUDGET_MICROS + 3 * WORST_MICROS, report
        assert spent >= BUDGET_MICROS // 2, report  # the budget was used, not left idle
    assert all(s.fault_at is not None for s in scenarios[1:]), report
    # During the pause and the outage, the processes went on at their local shares.
    assert report["pause"][1] > 0 and report["down"][1] > 0, report
