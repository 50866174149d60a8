"""The TokenLedger and budgets through the whole runtime, against the simulator on virtual time.

The simulator's made-up price (``sim:*``: $1 per million input tokens, $4 per million output)
gives every call a cost. Stores here live in memory; the SQLite file has its own tests.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

import attrs
import httpx
import orjson
import pytest
import trio
import trio.testing

import sluice
from sluice import BudgetExceeded, ChatRequest, RetryConfig, RuntimeConfig
from sluice._config import BudgetConfig, LedgerConfig, ProviderConfig
from sluice._ledger.store import MemoryLedgerStore
from sluice.simulator import SimulatorApp, SimulatorConfig, mock_transport

from .helpers import virtual_deadline

if TYPE_CHECKING:
    from collections.abc import Mapping

    from sluice._ledger.book import LedgerKey, LedgerTotals


def config(**ledger: object) -> RuntimeConfig:
    ledger.setdefault("persist", False)
    return RuntimeConfig(
        providers={"local": ProviderConfig(base_url="http://local.invalid/v1")},
        retry=RetryConfig(jitter=0.0),
        ledger=LedgerConfig(**ledger),  # type: ignore[arg-type]
    )


@virtual_deadline(120)
async def test_a_budget_is_never_overshot_by_a_thousand_concurrent_calls(autojump_clock):
    """1,000 calls at once against a budget that fits about 100 of them (issue 7).

    Each call reserves its worst case: 8 prompt tokens estimated ($1 / M) plus 100 output
    tokens ($4 / M) = 408 micro-dollars; the simulator answers with 1 prompt token and 100
    output tokens = 401. Calls that fit only after others settle wait; the rest are refused.
    """
    budget_micros = 100 * 408
    sim = SimulatorApp(SimulatorConfig(output_tokens=100, ttft=0.5, tokens_per_second=200))
    cfg = config(budgets=(BudgetConfig(max_usd=budget_micros / 1e6),))
    outcomes: list[sluice.ChatResult | sluice.SluiceError] = []
    async with sluice.open_runtime(cfg, transport=mock_transport(sim)) as rt:
        request = ChatRequest(model="sim:sim-small", messages="hi", max_tokens=100)

        async def one() -> None:
            try:
                outcomes.append(await rt.chat(request))
            except sluice.SluiceError as exc:
                outcomes.append(exc)

        async with trio.open_nursery() as nursery:
            for _ in range(1000):
                nursery.start_soon(one)
        (total,) = await rt.ledger.snapshot(by=())
        (status,) = rt.ledger.budgets()
    done = [o for o in outcomes if isinstance(o, sluice.ChatResult)]
    refused = [o for o in outcomes if isinstance(o, BudgetExceeded)]
    assert len(done) + len(refused) == 1000
    assert 100 <= len(done) <= 102
    # Every refused call failed before its request was sent.
    assert sim.chat_requests_seen == len(done)
    assert total.totals.calls == 1000 and total.totals.failures == len(refused)
    assert total.totals.usage_records == len(done)
    assert total.totals.cost_micros == 401 * len(done)
    assert total.totals.cost_micros <= budget_micros
    assert status.spent_micros == total.totals.cost_micros and status.reserved_micros == 0
    assert status.refused == len(refused)
    assert "left of $0.040800" in refused[-1].message
    assert refused[-1].provider == "sim" and refused[-1].model == "sim-small"


@virtual_deadline(60)
async def test_token_budget_per_tag_leaves_other_tags_alone(autojump_clock):
    sim = SimulatorApp(SimulatorConfig(output_tokens=10))
    cfg = config(budgets=(BudgetConfig(scope="tag", tag="small", max_tokens=40),))
    async with sluice.open_runtime(cfg, transport=mock_transport(sim)) as rt:
        # 8 prompt tokens estimated + 10 output = 18 reserved; 1 + 10 = 11 used.
        for _ in range(3):
            await rt.chat("sim:sim-small", "hi", tag="small", max_tokens=10)
        with pytest.raises(BudgetExceeded, match="tag 'small' budget has 7 tokens left of 40"):
            await rt.chat("sim:sim-small", "hi", tag="small", max_tokens=10)
        await rt.chat("sim:sim-small", "hi", tag="other", max_tokens=10)
        await rt.chat("sim:sim-small", "hi", max_tokens=10)
    assert sim.chat_requests_seen == 5


@virtual_deadline(60)
async def test_money_budget_refuses_models_without_a_price_unsent(autojump_clock):
    sim = SimulatorApp()
    cfg = config(budgets=(BudgetConfig(max_usd=1.0),))
    async with sluice.open_runtime(cfg, transport=mock_transport(sim)) as rt:
        with pytest.raises(BudgetExceeded, match="local:anything has no known price"):
            await rt.chat("local:anything", "hi")
    assert sim.chat_requests_seen == 0


@virtual_deadline(60)
async def test_usage_is_aggregated_per_tag_job_and_model_with_cost(autojump_clock):
    sim = SimulatorApp(SimulatorConfig(output_tokens=6))
    async with sluice.open_runtime(config(job="nightly"), transport=mock_transport(sim)) as rt:
        await rt.chat("sim:sim-small", "hello there", tag="a")
        await rt.chat("sim:sim-large", "hello there", tag="b")
        await rt.chat("local:free-model", "hello there", tag="a")
        by_tag = await rt.ledger.snapshot(by=("tag",))
        by_job = await rt.ledger.snapshot(by=("job",))
        by_model = await rt.ledger.snapshot(by=("model",))
        legacy = await rt.ledger_totals()
    assert rt.ledger.job == "nightly"
    # "hello there": 2 prompt tokens (the simulator counts words); 6 output tokens; $1 / $4
    # per M: 2 + 24 = 26 each.
    assert [(s.tag, s.totals.calls, s.totals.cost_micros, s.totals.unpriced) for s in by_tag] == [
        ("a", 2, 26, 1),
        ("b", 1, 26, 0),
    ]
    assert [(s.job, s.totals.calls, s.totals.input_tokens) for s in by_job] == [("nightly", 3, 6)]
    assert [(s.provider, s.model) for s in by_model] == [
        ("local", "free-model"),
        ("sim", "sim-large"),
        ("sim", "sim-small"),
    ]
    assert legacy["sim:sim-small"].calls == 1 and legacy["sim:sim-small"].output_tokens == 6
    assert legacy["local:free-model"].unpriced == 1


@virtual_deadline(60)
async def test_an_attempt_broken_mid_stream_is_recorded_as_an_estimate(autojump_clock):
    sim = SimulatorApp(SimulatorConfig(script=("disconnect:4",), output_tokens=12))
    async with sluice.open_runtime(config(), transport=mock_transport(sim)) as rt:
        result = await rt.chat("sim:sim-small", "hello there")
        (total,) = await rt.ledger.snapshot(by=())
    assert result.attempts == 2
    t = total.totals
    assert (t.calls, t.attempts, t.retries, t.usage_records, t.estimated) == (1, 2, 1, 2, 1)
    # The broken attempt: the prompt as estimated at admission (3 + 4 per message + 3 for the
    # text) and the output it streamed before the cut, at about four characters a token.
    assert t.input_tokens == result.usage.input_tokens + 10
    assert result.usage.output_tokens < t.output_tokens < 2 * result.usage.output_tokens


@virtual_deadline(60)
async def test_a_restarted_runtime_continues_its_totals_and_its_job_budget(autojump_clock):
    store = MemoryLedgerStore()
    sim = SimulatorApp(SimulatorConfig(output_tokens=100))
    # 401 micro-dollars a call (1 prompt token, 100 output tokens); 408 reserved.
    cfg = config(job="resumable", budgets=(BudgetConfig(scope="job", max_usd=0.001),))
    async with sluice.open_runtime(cfg, transport=mock_transport(sim), ledger_store=store) as rt:
        await rt.chat("sim:sim-small", "hi", max_tokens=100)
        await rt.chat("sim:sim-small", "hi", max_tokens=100)
    assert store.batches >= 1
    async with sluice.open_runtime(cfg, transport=mock_transport(sim), ledger_store=store) as rt:
        before = await rt.ledger_totals()
        # 802 spent in the earlier run: 198 left, less than one call's worst case.
        with pytest.raises(BudgetExceeded, match=r"\$0\.000198 left"):
            await rt.chat("sim:sim-small", "hi", max_tokens=100)
    assert before["sim:sim-small"].calls == 2
    other_job = attrs.evolve(cfg, ledger=attrs.evolve(cfg.ledger, job="fresh"))
    async with sluice.open_runtime(
        other_job, transport=mock_transport(sim), ledger_store=store
    ) as rt:
        await rt.chat("sim:sim-small", "hi", max_tokens=100)
        after = await rt.ledger_totals()
    assert after["sim:sim-small"].calls == 4  # the refused call counts as a failed one
    assert after["sim:sim-small"].failures == 1
    assert after["sim:sim-small"].cost_micros == 3 * 401
    jobs = {key.job for key in store.rows}
    assert jobs == {"resumable", "fresh"}


class FlakyStore(MemoryLedgerStore):
    """Fails its first write."""

    def __init__(self) -> None:
        super().__init__()
        self.failures = 1

    async def add(self, batch: Mapping[LedgerKey, LedgerTotals]) -> None:
        if self.failures:
            self.failures -= 1
            raise OSError("disk full")
        await super().add(batch)


@virtual_deadline(60)
async def test_batches_are_written_every_interval_and_a_failed_one_goes_out_later(
    autojump_clock, caplog
):
    store = FlakyStore()
    cfg = config(flush_interval=2.0)
    async with sluice.open_runtime(cfg, transport=mock_transport(), ledger_store=store) as rt:
        await rt.chat("sim:sim-small", "hi")
        await trio.sleep(2.5)  # the first write failed
        assert store.batches == 0 and store.failures == 0
        await rt.chat("sim:sim-small", "hi")
        await trio.sleep(2.0)
        assert store.batches == 1
        (row,) = store.rows.values()
        assert row.calls == 2
        await rt.chat("sim:sim-small", "hi")
        await rt.ledger.flush()
        assert store.batches == 2 and row.calls == 3
    assert "writing the ledger failed" in caplog.text


class Bodies(httpx.AsyncBaseTransport):
    """Records each request's JSON body, then passes it on."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.bodies: list[dict[str, object]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.bodies.append(orjson.loads(request.content))
        return await self.inner.handle_async_request(request)


@virtual_deadline(60)
async def test_a_guessed_worst_case_waits_withdraws_cleanly_then_goes_capped(autojump_clock):
    """$0.0012 and the simulator's prices ($1 / M in, $4 / M out). A call with max_tokens=100
    holds 408 for 5 s; calls without max_tokens reserve the guessed 1,024 output tokens
    (4,104), which never fits: they wait while it is in flight (they used to be refused),
    leave without a trace when cancelled, and then go one at a time with max_tokens lowered
    to what is left."""
    sim = SimulatorApp(SimulatorConfig(output_tokens=25, ttft=5.0))
    transport = Bodies(mock_transport(sim))
    cfg = config(budgets=(BudgetConfig(max_usd=0.0012),))
    async with sluice.open_runtime(cfg, transport=transport) as rt:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(partial(rt.chat, "sim:sim-small", "hi", max_tokens=100))
            await trio.sleep(1.0)
            for _ in range(3):
                with trio.move_on_after(1.0) as gave_up:
                    await rt.chat("sim:sim-small", "hi")
                assert gave_up.cancelled_caught
            await trio.testing.wait_all_tasks_blocked()  # the last withdrawal is delivered
            (status,) = rt.ledger.budgets()
            assert (status.reserved_micros, status.spent_micros, status.refused) == (408, 0, 0)
            stats = await rt.statistics()
            assert [sum(q.queued.values()) for q in stats.quotas.values()] == [0]  # withdrawn
            assert stats.calls_in_flight == 1
        (status,) = rt.ledger.budgets()
        assert (status.spent_micros, status.reserved_micros) == (1 + 25 * 4, 0)
        result = await rt.chat("sim:sim-small", "hi")
        assert result.usage.output_tokens == 25
        (status,) = rt.ledger.budgets()
    assert [body.get("max_tokens") for body in transport.bodies] == [100, (1099 - 8) // 4]
    assert (status.spent_micros, status.reserved_micros, status.refused) == (202, 0, 0)
