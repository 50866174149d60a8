"""The ledger's pure parts: usage from recorded traffic priced by the table, cost arithmetic,
price lookup, books and summaries, budgets. No trio, no files.

The usage cases decode recorded bodies of ``tests/conformance_data`` with each protocol's codec and
check both the normalized numbers and the cost the shipped table gives them, worked out by hand
below (dollars per million tokens times tokens is micro-dollars).
"""

from __future__ import annotations

import datetime as dt
import decimal

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice._errors import BudgetExceeded
from sluice._ledger.book import LedgerBook, LedgerKey, LedgerTotals, utc_day
from sluice._ledger.budget import MIN_CAPPED_OUTPUT, Budget, BudgetBook, BudgetClaim, BudgetHold
from sluice._ledger.prices import (
    SHIPPED_PRICES,
    ModelPrice,
    PriceTable,
    cost_micros,
    format_usd,
    usd_to_micros,
    worst_case_micros,
)
from sluice._ledger.summary import summarize
from sluice._limits.cost import Cost
from sluice._messages import Usage
from sluice._protocols.anthropic import AnthropicCodec
from sluice._protocols.gemini import GeminiCodec
from sluice._protocols.ollama import OllamaCodec
from sluice._protocols.openai import OpenAICodec
from tests.conformance import load_cases

CASES = {(c.provider, c.name): c for c in load_cases()}
PRICES = PriceTable()


@attrs.frozen
class Priced:
    """A recorded reply, the model it came from (as the reply names it), what it used and cost."""

    provider: str
    """The recording's folder."""
    name: str
    priced_as: str
    """``provider:model`` the ledger would record."""
    usage: Usage | None
    cost: int | None


def decoded_usage(case_key: tuple[str, str], codec: object) -> Usage | None:
    case = CASES.get(case_key)
    assert case is not None, f"no recorded case {case_key}"
    if case.streamed:
        decoder = codec.stream_decoder("c1")  # type: ignore[attr-defined]
        decoder.feed(case.body())
        out = decoder.finish()
    else:
        out = codec.decode_body(case.body())  # type: ignore[attr-defined]
    usage: Usage | None = out.usage
    return usage


def check(expected: Priced, codec: object) -> None:
    usage = decoded_usage((expected.provider, expected.name), codec)
    assert usage == expected.usage
    provider, _, model = expected.priced_as.partition(":")
    assert usage is not None
    assert PRICES.cost(provider, model, usage) == expected.cost


OPENAI = [
    # gpt-4.1 $2 / $8: 121 x 2 + 50 x 8
    Priced("openai", "chat_stream_parallel_tool_calls_usage", "openai:gpt-4.1-2025-04-14",
           Usage(121, 50), 642),
    # gpt-4o-mini $0.15 / $0.60: 7.95 + 9 = 16.95, rounded half up
    Priced("openai", "chat_stream_single_tool_call_strict_include_usage",
           "openai:gpt-4o-mini-2024-07-18", Usage(53, 15), 17),
    Priced("openai", "chat_nonstream_tool_calls_raw", "openai:gpt-4.1", Usage(82, 17), 300),
    # gpt-4o $2.50 / $10: 170 + 110
    Priced("openai", "chat_nonstream_tool_choice_required_empty_args", "openai:gpt-4o",
           Usage(68, 11), 280),
    # deepseek $0.28 / $0.42, reasoning billed as output: 1.68 + 89.04
    Priced("deepseek", "chat_stream_reasoner_reasoning_content_ABRIDGED",
           "deepseek:deepseek-reasoner", Usage(6, 212, 0, 0, 198), 91),
    # Models the table does not know: the cost is unknown, not zero.
    Priced("openai_compat", "openrouter_cerebras_qwen3_stream_reasoning_whole_tool_call",
           "openrouter:qwen/qwen3-32b", Usage(199, 112, 0, 0, 82), None),
    Priced("openai_compat", "moonshot_kimi_nonstream_reasoning_content_tool_call",
           "moonshot:kimi-k2.5", Usage(61, 81), None),
]  # fmt: skip
ANTHROPIC = [
    # sonnet 4.5 $3 / $15: 2037 + 1665
    Priced("anthropic", "messages_stream_text_then_two_tool_use",
           "anthropic:claude-sonnet-4-5-20250929", Usage(679, 111), 3702),
    Priced("anthropic", "messages_stream_thinking_signature_then_text",
           "anthropic:claude-sonnet-4-5-20250929", Usage(50, 211), 3315),
    # haiku 4.5 $1 / $5: 604 + 280
    Priced("anthropic", "messages_nonstream_tool_use", "anthropic:claude-haiku-4-5-20251001",
           Usage(604, 56), 884),
    # 332 plain x 3 + 1546 written x 3.75 + 82 x 15 = 996 + 5797.5 + 1230 = 8023.5
    Priced("anthropic", "messages_nonstream_cache_creation",
           "anthropic:claude-sonnet-4-5-20250929", Usage(1878, 82, 0, 1546, 0), 8024),
    # 996 + 1546 read x 0.30 + 1230 = 2689.8
    Priced("anthropic", "messages_nonstream_cache_read", "anthropic:claude-sonnet-4-5-20250929",
           Usage(1878, 82, 1546, 0, 0), 2690),
]  # fmt: skip
GEMINI = [
    # 2.5 flash $0.30 / $2.50, thoughts are output: 2.7 + 4775
    Priced("gemini", "stream_text_sse_crlf", "gemini:gemini-2.5-flash",
           Usage(9, 1910, 0, 0, 1257), 4778),
    # 3 pro preview $2 / $12: 58 + 1440
    Priced("gemini", "stream_function_call_thought_signature", "gemini:gemini-3-pro-preview",
           Usage(29, 120, 0, 0, 110), 1498),
    Priced("gemini", "generate_text_part_with_thought_signature", "gemini:gemini-2.5-flash",
           Usage(162, 49, 0, 0, 28), 171),
    Priced("gemini", "generate_parallel_function_calls_thought_signature",
           "gemini:gemini-3-flash-preview", Usage(69, 88, 0, 0, 56), None),
]  # fmt: skip
OLLAMA = [
    # A local model has no price in the table: unknown unless the config gives one.
    Priced("ollama", "chat_stream_text_done_stats", "ollama:gemma3:1b", Usage(16, 22), None),
]


@pytest.mark.parametrize("expected", OPENAI, ids=lambda p: p.name)
def test_openai_protocol_usage_and_cost(expected: Priced) -> None:
    check(expected, OpenAICodec())


@pytest.mark.parametrize("expected", ANTHROPIC, ids=lambda p: p.name)
def test_anthropic_usage_and_cost(expected: Priced) -> None:
    check(expected, AnthropicCodec())


@pytest.mark.parametrize("expected", GEMINI, ids=lambda p: p.name)
def test_gemini_usage_and_cost(expected: Priced) -> None:
    check(expected, GeminiCodec())


@pytest.mark.parametrize("expected", OLLAMA, ids=lambda p: p.name)
def test_ollama_usage_and_cost(expected: Priced) -> None:
    check(expected, OllamaCodec())


def test_unknown_models_are_counted_as_unpriced_not_free() -> None:
    book = LedgerBook(PRICES, job="j")
    assert book.record_usage("ollama", "gemma3:1b", Usage(16, 22), wall=0.0) is None
    assert book.record_usage("openai", "gpt-4o", Usage(68, 11), wall=0.0) == 280
    (total,) = summarize(book.rows.items(), ())
    assert total.totals.cost_micros == 280
    assert total.totals.unpriced == 1
    assert total.totals.usage_records == 2


def test_config_prices_override_and_extend_the_table() -> None:
    table = PriceTable(
        {
            "openai:gpt-4o": ModelPrice.usd(1, 1),
            "ollama:*": ModelPrice.usd(0, 0),
            "myproxy:gpt-4o": ModelPrice.usd("0.5", "0.5"),
        }
    )
    assert table.cost("openai", "gpt-4o", Usage(10, 10)) == 20
    assert table.cost("openai", "gpt-4o-2024-08-06", Usage(10, 10)) == 20  # the alias's price
    assert table.cost("ollama", "anything", Usage(1000, 1000)) == 0
    assert table.cost("myproxy", "gpt-4o", Usage(10, 10)) == 10
    assert table.cost("openai", "gpt-4.1", Usage(1, 0)) == 2  # untouched entries stay
    # A dated snapshot priced differently from its alias keeps its own entry.
    assert PRICES.lookup("openai", "gpt-4o-2024-05-13") == ModelPrice.usd(5, 15)
    # Another provider serving a model of the same name is not guessed at.
    assert PRICES.lookup("azure-proxy", "gpt-4o") is None
    with pytest.raises(ValueError, match="provider:model"):
        PriceTable({"gpt-4o": ModelPrice.usd(1, 1)})


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.floats(min_value=0, max_value=1e6, allow_nan=False),
        st.integers(min_value=0, max_value=10**12),
        st.decimals(min_value=0, max_value=10**6, allow_nan=False, allow_infinity=False, places=9),
        st.from_regex(r"\A[0-9]{1,7}(\.[0-9]{0,12})?\Z"),
    )
)
def test_dollars_to_micros_reads_plain_text_exactly_as_decimal_does(usd: object) -> None:
    """Plain decimal text is read without ``decimal`` (not loaded by ``import sluice``): the
    same micro-dollars, rounded half up, as ``Decimal``."""
    expected = int(
        (decimal.Decimal(str(usd)) * 1_000_000).to_integral_value(rounding=decimal.ROUND_HALF_UP)
    )
    assert usd_to_micros(usd) == expected  # type: ignore[arg-type]


def test_dollars_to_micros_refuses_what_is_not_an_amount() -> None:
    assert usd_to_micros("1e-05") == 10 and usd_to_micros(" 2.5 ") == 2_500_000
    assert usd_to_micros("0.0000005") == 1 and usd_to_micros("0.00000049") == 0
    for bad in ("", ".", "1.2.3", "abc", "True", "-0.5", "inf", "nan"):
        with pytest.raises(ValueError, match="dollar amount"):
            usd_to_micros(bad)


def test_cost_arithmetic_is_integer_micro_dollars() -> None:
    assert usd_to_micros(2.5) == 2_500_000
    assert usd_to_micros("0.075") == 75_000
    assert usd_to_micros(0.1 + 0.2) == 300_000  # a float's noise is rounded away
    with pytest.raises(ValueError, match="negative"):
        usd_to_micros(-1)
    assert format_usd(1_234_567) == "1.234567"
    assert format_usd(5) == "0.000005"
    assert format_usd(None) == "?"
    mini = SHIPPED_PRICES["openai"]["gpt-4o-mini"]
    assert (mini.input, mini.output, mini.cache_read) == (150_000, 600_000, 75_000)
    # 1 token at $0.15 / M is 0.15 micro-dollars: rounds to 0; 4 tokens (0.6) round to 1.
    assert cost_micros(mini, Usage(1, 0)) == 0
    assert cost_micros(mini, Usage(4, 0)) == 1
    # Cached prompt tokens are part of input_tokens and priced apart.
    assert cost_micros(mini, Usage(1_000_000, 0, 1_000_000)) == 75_000


def test_long_prompts_switch_to_the_long_context_price() -> None:
    pro = SHIPPED_PRICES["gemini"]["gemini-2.5-pro"]
    assert cost_micros(pro, Usage(200_000, 0)) == 250_000
    assert cost_micros(pro, Usage(200_001, 0)) == 500_003  # 200,001 x $2.50, half up


def test_worst_case_takes_the_dearer_prompt_price_and_rounds_up() -> None:
    sonnet = SHIPPED_PRICES["anthropic"]["claude-sonnet-4-5"]
    # Prompt tokens at the cache-write price ($3.75), output at $15.
    assert worst_case_micros(sonnet, Cost(1, 1000, 100)) == 3750 + 1500
    mini = SHIPPED_PRICES["openai"]["gpt-4o-mini"]
    assert worst_case_micros(mini, Cost(1, 1, 0)) == 1  # 0.15 rounds up
    assert worst_case_micros(mini, Cost(1, 1, 0)) >= cost_micros(mini, Usage(1, 0))


def _record_four(book: LedgerBook) -> tuple[float, float]:
    day1 = dt.datetime(2025, 3, 1, 23, 59, tzinfo=dt.UTC).timestamp()
    day2 = day1 + 120
    book.record_usage("sim", "a", Usage(10, 5), wall=day1, tag="t")
    book.record_call("sim", "a", True, 3, wall=day1, tag="t")
    book.record_usage("sim", "a", Usage(1, 1), wall=day2, estimated=True)
    book.record_call("sim", "a", False, 1, wall=day2, job="other")
    return day1, day2


def test_book_keeps_rows_per_day_tag_and_job_and_hands_over_increments() -> None:
    book = LedgerBook(PRICES, job="run-1")
    day1, day2 = _record_four(book)
    assert book.dirty == {}  # no store: the rows are the record, nothing waits to be written
    assert utc_day(day1) == "2025-03-01" and utc_day(day2) == "2025-03-02"
    assert set(book.rows) == {
        LedgerKey("2025-03-01", "sim", "a", "t", "run-1"),
        LedgerKey("2025-03-02", "sim", "a", "", "run-1"),
        LedgerKey("2025-03-02", "sim", "a", "", "other"),
    }
    first = book.rows[LedgerKey("2025-03-01", "sim", "a", "t", "run-1")]
    assert (first.calls, first.attempts, first.retries, first.cost_micros) == (1, 3, 2, 30)
    stored = LedgerBook(PRICES, job="run-1", keep_rows=False)
    _record_four(stored)
    assert stored.rows == {}  # with a store the book keeps no copy of the rows
    batch = stored.take_dirty()
    assert batch == book.rows and stored.dirty == {}
    stored.record_call("sim", "a", True, 1, wall=day2)
    stored.restore_dirty(batch)  # a failed write goes out with the next batch
    assert stored.dirty[LedgerKey("2025-03-02", "sim", "a", "", "run-1")].calls == 1
    book.record_call("sim", "a", True, 1, wall=day2)
    assert book.by_model()["sim:a"].calls == 3

    by_day = summarize(book.rows.items(), ("day",))
    assert [(s.day, s.totals.calls, s.totals.estimated) for s in by_day] == [
        ("2025-03-01", 1, 0),
        ("2025-03-02", 2, 1),
    ]
    by_model = summarize(book.rows.items(), ("model",), since="2025-03-02", until="2025-03-02")
    assert [(s.provider, s.model, s.totals.failures) for s in by_model] == [("sim", "a", 1)]
    assert summarize(book.rows.items(), ("tag",), until=dt.date(2025, 2, 28)) == []
    with pytest.raises(ValueError, match="cannot group by"):
        summarize(book.rows.items(), ("colour",))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not a date"):
        summarize(book.rows.items(), (), since="yesterday")


SIM_A = BudgetClaim("sim", "a", None)


def test_budget_reserves_the_worst_case_waits_then_refuses() -> None:
    # sim prices: $1 / M in, $4 / M out. Worst case of Cost(1, 100, 100) = 100 + 400 = 500.
    book = BudgetBook([Budget(max_micros=1200)], PRICES)
    first = book.hold(SIM_A, Cost(1, 100, 100))
    second = book.hold(SIM_A, Cost(1, 100, 100))
    assert isinstance(first, BudgetHold) and isinstance(second, BudgetHold)
    # 1000 reserved, 200 left: fits only once a call in flight settles.
    assert book.hold(SIM_A, Cost(1, 100, 100)) is None
    assert book.settle(first, Usage(100, 25))  # costs 200: 300 refunded
    third = book.hold(SIM_A, Cost(1, 100, 100))
    assert isinstance(third, BudgetHold)
    assert book.settle(second, None)  # no usage reported: the whole 500 is charged
    assert book.release(third)  # never sent: nothing charged
    (status,) = book.status()
    assert (status.spent_micros, status.reserved_micros, status.left_micros) == (700, 0, 500)
    # 500 left: the worst case fits exactly; 501 never can, even after refunds.
    refused = book.hold(SIM_A, Cost(1, 101, 100))
    assert isinstance(refused, BudgetExceeded)
    assert "has $0.000500 left of $0.001200" in refused.message
    assert "up to $0.000501" in refused.message
    assert book.status()[0].refused == 1


def test_budget_scopes_tokens_and_unpriced_models() -> None:
    book = BudgetBook(
        [
            Budget(scope="tag", tag="cheap", max_tokens=150),
            Budget(scope="job", max_micros=10_000),
        ],
        PRICES,
        job="j",
        spent_by_job=(9_000, 0),  # the job spent this in an earlier run
    )
    tagged = BudgetClaim("sim", "a", "cheap")
    held = book.hold(tagged, Cost(1, 50, 50))
    assert isinstance(held, BudgetHold) and len(held.accounts) == 2
    tokens_out = book.hold(tagged, Cost(1, 100, 100))
    assert isinstance(tokens_out, BudgetExceeded) and "tokens left" in tokens_out.message
    tag_status, job_status = book.status()
    assert (tag_status.reserved_tokens, tag_status.left_tokens) == (100, 50)
    assert job_status.left_tokens is None  # no max_tokens: no bound to count down
    # The job budget has 1,000 left after the earlier run's 9,000 (250 of it reserved now).
    too_dear = book.hold(SIM_A, Cost(1, 0, 251))
    assert isinstance(too_dear, BudgetExceeded)
    assert "job budget has $0.001000 left" in too_dear.message
    unpriced = book.hold(BudgetClaim("ollama", "gemma3:1b"), Cost(1, 1, 1))
    assert isinstance(unpriced, BudgetExceeded) and "no known price" in unpriced.message
    # A tokens-only budget does not need a price.
    only_tokens = BudgetBook([Budget(max_tokens=10)], PRICES)
    assert isinstance(only_tokens.hold(BudgetClaim("ollama", "x"), Cost(1, 5, 5)), BudgetHold)


GUESSED = BudgetClaim("sim", "a", None, output_set=False)
"""A call that set no max_tokens: its 1,024 output tokens are the configured guess."""


def test_a_guessed_worst_case_waits_for_calls_in_flight_then_goes_capped() -> None:
    # sim prices: $1 / M in, $4 / M out. The guess: 100 + 1,024 x 4 = 4,196, past any left.
    book = BudgetBook([Budget(max_micros=1200)], PRICES)
    first = book.hold(SIM_A, Cost(1, 100, 100))
    assert isinstance(first, BudgetHold) and first.max_output is None
    # It used to be refused here, with the whole budget unspent.
    assert book.hold(GUESSED, Cost(1, 100, 1024)) is None
    assert book.settle(first, Usage(100, 25))  # 200 spent, nothing in flight
    capped = book.hold(GUESSED, Cost(1, 100, 1024))
    assert isinstance(capped, BudgetHold)
    assert capped.max_output == (1000 - 100) // 4 == 225  # the most the 1,000 left pays for
    assert (capped.micros, capped.tokens) == (1000, 325)
    (status,) = book.status()
    assert (status.spent_micros, status.reserved_micros, status.left_micros) == (200, 1000, 0)
    assert book.hold(GUESSED, Cost(1, 100, 1024)) is None  # in flight: it may settle lower
    # A call that set its own max_tokens can never fit: refused at once, in flight or not.
    assert isinstance(book.hold(SIM_A, Cost(1, 100, 1024)), BudgetExceeded)
    assert book.settle(capped, None)  # charged its whole (capped) reservation
    (status,) = book.status()
    assert (status.spent_micros, status.reserved_micros) == (1200, 0)  # exactly the budget
    refused = book.hold(GUESSED, Cost(1, 100, 1024))
    assert isinstance(refused, BudgetExceeded) and "has $0.000000 left" in refused.message


def test_a_cap_below_the_minimum_output_is_refused_and_tokens_cap_too() -> None:
    # 100 prompt + (MIN_CAPPED_OUTPUT - 1) x 4 left: one output token short of the minimum.
    book = BudgetBook([Budget(max_micros=100 + (MIN_CAPPED_OUTPUT - 1) * 4)], PRICES)
    refused = book.hold(GUESSED, Cost(1, 100, 1024))
    assert isinstance(refused, BudgetExceeded) and book.status()[0].refused == 1
    assert refused.message == (
        "the global budget has $0.000160 left, less than this call's prompt (100 tokens"
        f" estimated) and {MIN_CAPPED_OUTPUT} output tokens cost"
    )
    enough = BudgetBook([Budget(max_micros=100 + MIN_CAPPED_OUTPUT * 4)], PRICES)
    held = enough.hold(GUESSED, Cost(1, 100, 1024))
    assert isinstance(held, BudgetHold) and held.max_output == MIN_CAPPED_OUTPUT
    tokens = BudgetBook([Budget(max_tokens=500), Budget(scope="job", max_micros=10**6)], PRICES)
    held = tokens.hold(GUESSED, Cost(1, 100, 1024))
    assert isinstance(held, BudgetHold) and held.max_output == 400  # the tighter of the two
    assert (held.tokens, held.micros) == (500, 100 + 400 * 4)


def test_unsettled_holds_are_charged_when_the_limiter_restarts() -> None:
    book = BudgetBook([Budget(max_micros=1000)], PRICES)
    assert isinstance(book.hold(SIM_A, Cost(1, 100, 100)), BudgetHold)
    book.charge_outstanding()
    (status,) = book.status()
    assert (status.spent_micros, status.reserved_micros) == (500, 0)


def test_totals_add_and_copy() -> None:
    a = LedgerTotals(calls=1, cost_micros=5)
    b = a.copy()
    b.add(LedgerTotals(calls=2, unpriced=1))
    assert (a.calls, b.calls, b.unpriced, b.cost_usd) == (1, 3, 1, "0.000005")


def test_the_price_lookup_cache_stays_bounded_and_answers_the_same_after_it_starts_over():
    from sluice._ledger.prices import _CACHED, PriceTable

    table = PriceTable()
    first = table.lookup("openai", "gpt-4o-mini")
    assert first is not None
    for i in range(3 * _CACHED):
        assert table.lookup("openai", f"caller-chosen-{i}") is None
        assert len(table._cache) <= _CACHED
    assert table.lookup("openai", "gpt-4o-mini") == first
