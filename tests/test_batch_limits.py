"""A batch's --rpm, --tpm, --max-pending and --budget: mapped onto the RateLimiter's quota and
the ledger's budgets, and in effect (virtual time over in-memory streams; the budget over
loopback with the real clock)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
import trio

import sluice
from sluice import ConfigError, ProviderConfig, RateLimitConfig, RuntimeConfig, WindowLimit
from sluice._jobs.batch import run_batch
from sluice._jobs.batch_limits import BatchLimits, apply_limits, pacing_window
from sluice.simulator import SimulatorApp, SimulatorConfig

from .helpers import memory_transport, virtual_deadline


def request_line(custom_id: str, **body: object) -> bytes:
    body = {"model": "sim:sim-small", "messages": [{"role": "user", "content": "hi"}], **body}
    return orjson.dumps({"custom_id": custom_id, "body": body}) + b"\n"


def write_input(path, n: int, **body: object):
    path.write_bytes(b"".join(request_line(f"r{i}", **body) for i in range(n)))
    return path


def read_output(path) -> list[dict]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


# -- the mapping (pure) ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rpm", "limit", "per"),
    [(60, 1, 1.0), (30, 1, 2.0), (1, 1, 60.0), (90, 2, 60 * 2 / 90), (36_000, 600, 1.0)],
)
def test_the_pacing_window_spreads_the_minute_evenly(rpm, limit, per):
    window = pacing_window(rpm)
    assert (window.dimension, window.limit) == ("requests", limit)
    assert window.per == pytest.approx(per)
    assert window.limit * 60 / window.per == pytest.approx(rpm)  # exactly rpm a minute


def test_limits_replace_the_quota_of_each_provider_and_keep_the_rest():
    own = WindowLimit(dimension="requests", limit=5, per=1)
    config = RuntimeConfig(
        providers={
            "sim": ProviderConfig(
                max_connections=7,
                rate_limit=RateLimitConfig(requests_per_minute=10, windows=(own,)),
            )
        }
    )
    limits = BatchLimits(rpm=120, tpm=5000, max_pending=3, budget=2.5)
    got = apply_limits(config, limits, ["sim", "openai"])
    sim = got.providers["sim"]
    assert sim.max_connections == 7
    assert sim.rate_limit.requests_per_minute == 120
    assert sim.rate_limit.windows == (own, pacing_window(120))
    assert (sim.rate_limit.tokens_per_minute, sim.rate_limit.max_pending) == (5000, 3)
    assert got.providers["openai"].rate_limit.requests_per_minute == 120
    (budget,) = got.ledger.budgets
    assert (budget.scope, budget.max_usd) == ("job", 2.5)
    assert apply_limits(config, BatchLimits(), ["sim"]) == config


def test_an_alias_keeps_the_config_of_its_builtin():
    config = RuntimeConfig(providers={"qwenpaw-local": ProviderConfig(max_connections=9)})
    got = apply_limits(config, BatchLimits(rpm=60), ["copaw-local"])
    assert got.providers["copaw-local"].max_connections == 9
    assert got.providers["copaw-local"].rate_limit.requests_per_minute == 60


def test_bad_limits_are_refused():
    with pytest.raises(ValueError, match="rpm"):
        BatchLimits(rpm=0)
    with pytest.raises(ValueError, match="budget"):
        BatchLimits(budget=-1.0)


# -- in effect, in virtual time -----------------------------------------------------------------


async def run_virtual(tmp_path, nursery, lines: int, limits: BatchLimits, sim=None, **body):
    """Run ``lines`` requests through a runtime whose config carries ``limits``."""
    app = SimulatorApp(sim or SimulatorConfig())
    config = apply_limits(RuntimeConfig(), limits, ["sim"])
    source = write_input(tmp_path / "in.jsonl", lines, **body)
    out = tmp_path / "out.jsonl"
    async with sluice.open_runtime(config, transport=memory_transport(app, nursery)) as rt:
        summary = await run_batch(source, out, runtime=rt, write_summary=False)
    got = read_output(out)
    assert sorted(o["custom_id"] for o in got) == sorted(f"r{i}" for i in range(lines))
    return summary


@pytest.fixture
def clock():
    """Autojump, but only after 20 ms of real time with nothing to do, so the file reads and
    writes (in threads) do not move the clock; only the quota's waits do."""
    return trio.testing.MockClock(autojump_threshold=0.02)


@virtual_deadline(600)
async def test_rpm_paces_the_lines_one_second_apart(clock, nursery, tmp_path):
    summary = await run_virtual(tmp_path, nursery, 6, BatchLimits(rpm=60))
    # 60 a minute spread evenly: one request a second, the first at once.
    assert summary.elapsed == 5.0
    assert summary.ok == 6
    assert summary.latency["max"] == 5.0


@virtual_deadline(600)
async def test_without_limits_the_same_lines_take_no_time(clock, nursery, tmp_path):
    summary = await run_virtual(tmp_path, nursery, 6, BatchLimits())
    assert summary.elapsed == 0.0


@virtual_deadline(600)
async def test_rpm_above_sixty_goes_in_steps_of_a_second(clock, nursery, tmp_path):
    summary = await run_virtual(tmp_path, nursery, 7, BatchLimits(rpm=180))
    # 3 per second: lines 0-2 at 0 s, 3-5 at 1 s, 6 at 2 s.
    assert summary.elapsed == 2.0


@virtual_deadline(1000)
async def test_tpm_holds_calls_until_the_minute_has_room(clock, nursery, tmp_path):
    # Each call reserves its prompt estimate plus max_tokens (a little over 10) and uses 11;
    # 20 tokens a minute leave room for one call a minute.
    summary = await run_virtual(
        tmp_path, nursery, 3, BatchLimits(tpm=20), SimulatorConfig(output_tokens=10), max_tokens=10
    )
    assert summary.elapsed == 120.0
    assert summary.ok == 3


@virtual_deadline(600)
async def test_max_pending_frees_a_slot_at_the_first_token(clock, nursery, tmp_path):
    sim = SimulatorConfig(ttft=1.0, tokens_per_second=0)
    summary = await run_virtual(tmp_path, nursery, 6, BatchLimits(max_pending=2), sim)
    # Two calls wait for their first token at a time, each for one second.
    assert summary.elapsed == 3.0


# -- through run_batch's own options, real clock ------------------------------------------------


async def test_the_options_reach_the_runtime_it_opens(tmp_path):
    source = write_input(tmp_path / "in.jsonl", 3, max_tokens=5)
    seen: list[Any] = []
    with trio.fail_after(30):
        summary = await run_batch(
            source,
            tmp_path / "out.jsonl",
            rpm=120_000,
            tpm=1_000_000,
            max_pending=7,
            budget=1.0,
            job="limits-test",
            progress=seen.append,
            progress_interval=60,
        )
    assert summary.ok == 3 and summary.job == "limits-test"
    final = seen[-1]
    assert set(final.limits) == {
        "sim requests/60s 3/120000",
        "sim requests/1s 3/2000",
        f"sim total_tokens/60s {summary.input_tokens + summary.output_tokens}/1000000",
        "sim pending 0/7",
    }


async def test_a_spent_budget_turns_the_remaining_lines_into_error_lines(tmp_path):
    # The simulator's made-up price: $1 per million input tokens, $4 per million output. Each
    # call reserves at most about 45 micro-dollars and spends about as much; the budget of
    # 150 micro-dollars pays for a few calls, then every other line is refused unsent.
    source = write_input(tmp_path / "in.jsonl", 12, max_tokens=10)
    out = tmp_path / "out.jsonl"
    with trio.fail_after(30):
        summary = await run_batch(source, out, budget=0.000150, max_in_flight=1)
    got = read_output(out)
    assert sorted(o["custom_id"] for o in got) == sorted(f"r{i}" for i in range(12))
    ok = [o for o in got if o["error"] is None]
    refused = [o for o in got if o["error"] is not None]
    assert 1 <= len(ok) < 12
    assert {o["error"]["code"] for o in refused} == {"BudgetExceeded"}
    assert all("budget" in o["error"]["message"] for o in refused)
    assert summary.errors == {"BudgetExceeded": len(refused)}
    assert 0 < summary.cost_micros <= 150


async def test_limits_with_an_open_runtime_are_refused(tmp_path):
    source = write_input(tmp_path / "in.jsonl", 1)
    async with sluice.open_runtime(RuntimeConfig()) as rt:
        with pytest.raises(ConfigError, match="runtime's config"):
            await run_batch(source, tmp_path / "out.jsonl", runtime=rt, rpm=10)
    assert not (tmp_path / "out.jsonl").exists()


def test_the_command_refuses_a_bad_limit_before_any_call(tmp_path, capsys, monkeypatch):
    from sluice._cli import main

    monkeypatch.delenv("SLUICE_CONFIG", raising=False)
    source = write_input(tmp_path / "in.jsonl", 1)
    out = tmp_path / "out.jsonl"
    assert main(["batch", str(source), "-o", str(out), "--budget", "-1"]) == 2
    assert "budget" in capsys.readouterr().err
    assert not out.exists()
