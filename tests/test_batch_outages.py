"""``sluice batch`` against a plain loopback server that fails: transient faults, an outage in
the middle of the run, and a backend down for the whole run.

Real sockets and the real clock (``tests/faulty_server.py``, standard library only, not the
simulator's fault code). The faults and the outage run a real ``sluice batch`` process with
every setting at its default (no config file): nobody waits on a batch line, so it waits out
whatever is retriable, however many attempts that takes. The backend down for the whole run
takes short windows from a config so it ends in seconds. The tests assert what the output file
holds and what the server saw, never timing.
"""

from __future__ import annotations

import subprocess
import threading
import time
from typing import TYPE_CHECKING

import orjson
import pytest

from sluice import RetryConfig
from sluice._cli import main
from sluice._jobs.batch import DEFAULT_MAX_IN_FLIGHT

from .faulty_server import FaultyServer, input_lines
from .helpers import SLUICE, clean_env, whole_lines

if TYPE_CHECKING:
    from pathlib import Path

# Short windows so the runs are quick; the shapes of the policies are the defaults'.
RETRY = {
    "base_delay": 0.05,
    "max_delay": 0.5,
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


def start_default_batch(tmp_path: Path, server: FaultyServer, n: int) -> subprocess.Popen[bytes]:
    """``sluice batch`` as a real process, every setting at its default, into
    ``tmp_path/out.jsonl``."""
    tmp_path.mkdir(exist_ok=True)
    source = tmp_path / "in.jsonl"
    source.write_bytes(b"".join(input_lines(n)))
    argv = [SLUICE, "batch", str(source), "-o", str(tmp_path / "out.jsonl"), "--model", "local:m"]
    argv += ["--base-url", server.url]
    return subprocess.Popen(
        argv, env=clean_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )


def finish(proc: subprocess.Popen[bytes], out: Path) -> list[dict]:
    """Wait for the batch process; it must exit 0 without a traceback. Its output lines."""
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr.decode()[-3000:]
    assert b"Traceback" not in stderr
    return whole_lines(out)


def test_600_streamed_lines_through_transient_faults_all_succeed(tmp_path):
    """Faults at random in 25% and in 40% of requests (two runs at once, to save time): 429
    (with OpenAI's retry-after-ms), 500, 529, a reset after the first chunk and a stall until
    the server hangs up; some lines meet four or more in a row."""
    rates = (0.25, 0.40)
    with (
        FaultyServer(fault_rate=rates[0], stall=1.0, seed=14, retry_after_ms=100) as low,
        FaultyServer(fault_rate=rates[1], stall=1.0, seed=14, retry_after_ms=100) as high,
    ):
        runs = [start_default_batch(tmp_path / str(i), s, 600) for i, s in enumerate((low, high))]
        outputs = [finish(proc, tmp_path / str(i) / "out.jsonl") for i, proc in enumerate(runs)]
    for rate, server, lines in zip(rates, (low, high), outputs, strict=True):
        assert_every_line_ok_once(lines, 600)
        faulted = server.requests - server.faults.get("ok", 0)
        assert faulted > 0.8 * rate * 600  # the faults really happened
        assert set(server.faults) >= {"ok", "429", "500", "529", "disconnect", "stall"}


def outage_budget_bound(outage: float, lines: int, in_flight: int) -> float:
    """Requests the server may see while it is down, from the default settings alone.

    Every call in flight when the outage starts may send one attempt it did not pay for from
    the retry budget (its first, or a retry paid before): ``in_flight``. Every other request
    is a retry paid during the outage. The budget refills at ``budget_min_per_second`` plus
    ``budget_ratio`` per first attempt, and no first attempt is made while every call in
    flight waits; it may start the outage with one interval's worth unspent (the floor's share
    and ``budget_ratio`` x the first attempts of that interval, at most ``lines``). The breaker
    only lowers this (it opens once failures are half the attempts of its window, and then
    lets one probe through per ``open_for``).
    """
    policy = RetryConfig()
    refill = policy.budget_min_per_second * outage
    unspent = policy.budget_min_per_second * policy.budget_interval + policy.budget_ratio * lines
    return in_flight + refill + unspent


def test_an_outage_mid_batch_is_waited_out_within_the_retry_budget(tmp_path):
    """15 s down: nginx's 502 page for half of it, then resets; no line fails, and the retries
    come at the budget's rate, not one per waiting line per backoff."""
    outage, lines = 15.0, 600
    with FaultyServer(seed=3) as server:

        def break_it() -> None:
            while server.requests < 150:
                time.sleep(0.005)
            server.down = "502"
            time.sleep(outage / 2)
            server.down = "reset"
            time.sleep(outage / 2)
            server.down = None

        saboteur = threading.Thread(target=break_it, daemon=True)
        saboteur.start()
        out = finish(start_default_batch(tmp_path, server, lines), tmp_path / "out.jsonl")
        saboteur.join(timeout=30)
    assert_every_line_ok_once(out, lines)
    assert server.faults.get("down_502", 0) > 0 and server.faults.get("down_reset", 0) > 0
    bound = outage_budget_bound(outage, lines, DEFAULT_MAX_IN_FLIGHT)
    assert server.during_outage <= bound, (server.during_outage, bound)


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
