"""``sluice batch`` against a plain loopback server that fails: transient faults, an outage in
the middle of the run, and a backend down for the whole run.

Real sockets and the real clock (``tests/faulty_server.py``, standard library only, not the
simulator's fault code); short backoffs, breaker and budget windows come from the config so
each test takes seconds. The tests assert what the output file holds, never timing.
"""

from __future__ import annotations

import threading
import time

import orjson
import pytest

from sluice._cli import main

from .faulty_server import FaultyServer, input_lines

# Short windows so the runs are quick; the shapes of the policies are the defaults'.
RETRY = {
    "base_delay": 0.05,
    "max_delay": 0.5,
    "wait_max_attempts": 40,
    "budget_ratio": 1.0,
    "budget_min_per_second": 5.0,
    "budget_interval": 5.0,
}
BREAKER = {"min_failures": 5, "failure_rate": 0.5, "window": 5.0, "open_for": 1.0}
DEADLINES = {"first_token": 1.0, "idle": 1.0, "total": 120.0}
COOLDOWN = {"default_cooldown": 0.2, "cooldown_jitter": 0.1}  # after a 429 without Retry-After


@pytest.fixture(autouse=True)
def no_ambient_config(monkeypatch):
    monkeypatch.delenv("SLUICE_CONFIG", raising=False)


def write_config(tmp_path, retry=RETRY, breaker=BREAKER):
    path = tmp_path / "config.json"
    config = {
        "retry": retry,
        "deadlines": DEADLINES,
        "providers": {"local": {"breaker": breaker, "rate_limit": COOLDOWN}},
    }
    path.write_bytes(orjson.dumps(config))
    return path


def run_batch_cli(tmp_path, server: FaultyServer, n: int, *extra: str) -> tuple[int, list[dict]]:
    source = tmp_path / "in.jsonl"
    source.write_bytes(b"".join(input_lines(n)))
    out = tmp_path / "out.jsonl"
    argv = ["batch", str(source), "-o", str(out), "--model", "local:m", "--base-url", server.url]
    argv += ["--config", str(write_config(tmp_path)), "--max-in-flight", "32", *extra]
    status = main(argv)
    data = out.read_bytes()
    assert data.endswith(b"\n")
    return status, [orjson.loads(line) for line in data.splitlines()]


def assert_every_line_ok_once(lines: list[dict], n: int) -> None:
    ids = [line["custom_id"] for line in lines]
    assert sorted(ids) == sorted(f"r{i}" for i in range(n))  # exactly one line each
    failed = [line["error"] for line in lines if line["error"] is not None]
    assert failed == []
    for line in lines:
        i = line["custom_id"][1:]
        text = line["response"]["body"]["choices"][0]["message"]["content"]
        assert text == f"echo: line {i}"  # no duplicated or mixed text from a restarted stream


@pytest.mark.parametrize("fault_rate", [0.25, 0.40])
def test_600_streamed_lines_through_transient_faults_all_succeed(tmp_path, capsys, fault_rate):
    with FaultyServer(fault_rate=fault_rate, stall=3.0, seed=14) as server:
        status, lines = run_batch_cli(tmp_path, server, 600)
    assert status == 0, capsys.readouterr()
    assert_every_line_ok_once(lines, 600)
    faulted = server.requests - server.faults.get("ok", 0)
    assert faulted > 0.15 * 600  # the faults really happened
    assert set(server.faults) >= {"ok", "429", "500", "529", "disconnect", "stall"}


def outage_budget_bound(outage: float, lines: int, in_flight: int) -> float:
    """Requests the server may see while it is down, from the settings alone.

    Every call in flight when the outage starts may send its attempt (``in_flight``); after
    that a request is a retry, which must be paid from the retry budget: over the outage at
    most ``budget_ratio`` x first attempts (at most ``lines``) plus ``budget_min_per_second``
    x (outage + one interval). The breaker opens only once failures are half of the attempts
    started in its window (many successes just before the outage delay that), and then lets
    one probe through per ``open_for``; the bound holds without it.
    """
    budget = RETRY["budget_ratio"] * lines + RETRY["budget_min_per_second"] * (
        outage + RETRY["budget_interval"]
    )
    return in_flight + budget


@pytest.mark.parametrize("down", ["502", "reset"])
def test_an_outage_mid_batch_is_waited_out_within_the_budget(tmp_path, capsys, down):
    outage = 15.0
    seen: list[int] = []
    with FaultyServer(seed=3) as server:

        def break_it() -> None:
            while server.requests < 100:
                time.sleep(0.01)
            server.down = down
            before = server.requests
            time.sleep(outage)
            seen.append(server.requests - before)
            server.down = None

        saboteur = threading.Thread(target=break_it, daemon=True)
        saboteur.start()
        status, lines = run_batch_cli(tmp_path, server, 300)
        saboteur.join(timeout=30)
    assert status == 0, capsys.readouterr()
    assert_every_line_ok_once(lines, 300)
    assert seen, "the outage never started"
    bound = outage_budget_bound(outage, lines=300, in_flight=32)
    assert seen[0] <= bound, (seen[0], bound)  # 432 here; 110 to 150 measured


def test_a_backend_down_all_run_ends_each_line_at_max_wait_naming_the_cause(tmp_path, capsys):
    with FaultyServer() as server:
        server.down = "502"
        started = time.monotonic()
        status, lines = run_batch_cli(tmp_path, server, 20, "--max-wait", "4s")
        elapsed = time.monotonic() - started
    assert status == 1
    assert sorted(line["custom_id"] for line in lines) == sorted(f"r{i}" for i in range(20))
    for line in lines:
        message = line["error"]["message"]
        assert "502" in message and "<html>" in message and "502 Bad Gateway" in message, message
    assert elapsed >= 4.0  # they waited (the lower bound only: never assert an upper one)
    assert "ok 0, failed 20" in capsys.readouterr().out
