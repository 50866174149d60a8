"""The load-test harness's pure parts: arrivals, workload, per-token metrics, aggregates,
SLOs, the sweep verdict, compare, and the simulator's latency model."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluice._errors import CallError, ConfigError
from sluice._events import (
    Admitted,
    Failed,
    FirstToken,
    Queued,
    ReasoningDelta,
    Retrying,
    StreamReset,
    TextDelta,
    ToolCallDelta,
    UsageReported,
)
from sluice._jobs.loadtest import OpenLoop, Step, load_dataset, load_trace, parse_lengths, parse_slo
from sluice._jobs.loadtest.aggregate import aggregate, lag_verdict, token_times
from sluice._jobs.loadtest.arrivals import gamma_offsets, poisson_offsets, ramp_offsets
from sluice._jobs.loadtest.compare import compare, format_comparison
from sluice._jobs.loadtest.follow import _read_each, read_batch
from sluice._jobs.loadtest.metrics import (
    Tracker,
    _largest_remainder,
    estimate_tokens,
    spread_tokens,
)
from sluice._jobs.loadtest.slo import parse_seconds
from sluice._jobs.loadtest.stats import percentile, summarize
from sluice._jobs.loadtest.sweep import judge, parse_sweep
from sluice._jobs.loadtest.workload import Workload
from sluice._messages import Usage
from sluice.simulator._latency import GenerationSlots, draw_generation, gamma_draw
from sluice.simulator._text import count_tokens


def take(iterator, n):
    return [next(iterator) for _ in range(n)]


def ks_exponential(gaps, rate):
    """The Kolmogorov-Smirnov statistic of ``gaps`` against the exponential CDF."""
    ordered = sorted(gaps)
    n = len(ordered)
    d = 0.0
    for i, x in enumerate(ordered):
        cdf = 1 - math.exp(-rate * x)
        d = max(d, (i + 1) / n - cdf, cdf - i / n)
    return d


def gaps_of(offsets):
    return [b - a for a, b in zip([0.0, *offsets], offsets, strict=False)]


N = 4000
KS_CRITICAL_1PCT = 1.628 / math.sqrt(N)
"""The KS statistic's 1 % critical value for N samples (asymptotic)."""


def test_poisson_arrivals_pass_a_kolmogorov_smirnov_test():
    offsets = take(poisson_offsets(7.0, random.Random(1234)), N)
    gaps = gaps_of(offsets)
    assert ks_exponential(gaps, 7.0) < KS_CRITICAL_1PCT
    assert offsets == sorted(offsets)
    assert offsets[-1] / N == pytest.approx(1 / 7.0, rel=0.05)


def test_the_ks_check_rejects_arrivals_that_are_not_poisson():
    # Same mean rate, but bursty (gamma shape 0.3) or even (shape 4): the check can fail.
    for burstiness in (0.3, 4.0):
        gaps = gaps_of(take(gamma_offsets(7.0, random.Random(1234), burstiness=burstiness), N))
        assert ks_exponential(gaps, 7.0) > 3 * KS_CRITICAL_1PCT
        assert sum(gaps) / N == pytest.approx(1 / 7.0, rel=0.08)


def test_burstiness_sets_the_spread_of_gaps():
    # A gamma gap of shape k has coefficient of variation 1/sqrt(k).
    for k in (0.25, 1.0, 4.0):
        gaps = gaps_of(take(gamma_offsets(10.0, random.Random(5), burstiness=k), N))
        stats = summarize(gaps)
        std, mean = stats["std"], stats["mean"]
        assert isinstance(std, (int, float)) and isinstance(mean, (int, float))
        assert std / mean == pytest.approx(1 / math.sqrt(k), rel=0.1)


def test_seeded_schedules_repeat():
    shape = OpenLoop.at_rate(3.0)
    assert take(iter(shape.schedule(random.Random(9))), 50) == take(
        iter(shape.schedule(random.Random(9))), 50
    )


def test_ramp_keeps_each_step_in_its_window_at_its_rate():
    steps = [Step(10, 100), Step(40, 100)]
    offsets = list(ramp_offsets(steps, random.Random(3)))
    first = [t for t in offsets if t < 100]
    second = [t for t in offsets if t >= 100]
    assert len(first) == pytest.approx(1000, rel=0.1)
    assert len(second) == pytest.approx(4000, rel=0.1)
    assert offsets[-1] < 200
    assert OpenLoop.ramp(steps).rate == 25


def test_trace_files(tmp_path):
    path = tmp_path / "trace.jsonl"
    path.write_text(
        '1700000010.5\n\n{"timestamp": 1700000010.0}\n{"timestamp_ms": 1700000012000}\n'
    )
    assert load_trace(path) == (0.0, 0.5, 2.0)
    path.write_text('{"t": 1}\n')
    with pytest.raises(ConfigError, match="line 1: the object has no 'timestamp'"):
        load_trace(path)
    path.write_text("\n")
    with pytest.raises(ConfigError, match="holds no timestamps"):
        load_trace(path)


def test_length_distributions():
    rng = random.Random(0)
    assert parse_lengths("64").draw(rng) == 64
    uniform = parse_lengths("uniform:10:20")
    draws = [uniform.draw(rng) for _ in range(2000)]
    assert min(draws) == 10 and max(draws) == 20
    normal = parse_lengths("normal:200:30")
    stats = summarize([normal.draw(rng) for _ in range(4000)])
    assert stats["mean"] == pytest.approx(200, abs=2)
    assert stats["std"] == pytest.approx(30, rel=0.06)
    assert parse_lengths("normal:2:50").draw(random.Random(1)) >= 1  # floored at 1
    for bad in ("x", "uniform:5", "uniform:9:3", "normal:1", "-3", "0", "gamma:1:2"):
        with pytest.raises(ConfigError, match="--output-tokens"):
            parse_lengths(bad, flag="--output-tokens")


def test_synthetic_workload_is_seeded_and_sized():
    work = Workload(input_tokens=parse_lengths("50"), output_tokens=parse_lengths("7"))
    a = [work.item(i, random.Random(4)) for i in range(3)]
    b = [work.item(i, random.Random(4)) for i in range(3)]
    assert a == b
    texts = [item.messages for item in a]
    assert all(isinstance(t, str) and len(t.split()) == 50 for t in texts)
    assert all(item.max_tokens == 7 for item in a)
    assert len({str(t).split()[0] for t in texts}) == 3  # no shared prefix


def test_dataset_prompts(tmp_path):
    path = tmp_path / "prompts.jsonl"
    path.write_text(
        '{"prompt": "hello", "output_tokens": 5}\n\n'
        '{"messages": [{"role": "system", "content": "be brief"}, '
        '{"role": "user", "content": "hi"}]}\n'
    )
    prompts = load_dataset(path)
    work = Workload(output_tokens=parse_lengths("9"), dataset=prompts)
    first, second, third = (work.item(i, random.Random(0)) for i in range(3))
    assert (first.messages, first.max_tokens) == ("hello", 5)
    assert not isinstance(second.messages, str)
    assert [m.role for m in second.messages] == ["system", "user"] and second.max_tokens == 9
    assert third.messages == "hello"  # cycles
    path.write_text('{"messages": [{"role": "robot", "content": "x"}]}\n')
    with pytest.raises(ConfigError, match="line 1: expected a non-empty 'prompt'"):
        load_dataset(path)
    with pytest.raises(ConfigError, match="cannot read dataset"):
        load_dataset(tmp_path / "missing.jsonl")


def test_tokens_are_spread_over_chunks_and_sum_to_the_reported_count():
    assert estimate_tokens("") == 0
    assert estimate_tokens(" one two three") == 3
    assert estimate_tokens("   ") == 1
    assert spread_tokens([3, 3, 3], 9) == [3, 3, 3]
    assert spread_tokens([1, 1, 2], 8) == [2, 2, 4]
    assert sum(spread_tokens([1, 2, 7], 20)) == 20
    assert spread_tokens([2, 2], None) == [2, 2]
    assert spread_tokens([5, 1], 1) == [1, 0]


@given(st.integers(0, 50), st.integers(1, 300))
def test_equal_chunks_agreeing_with_the_server_are_their_own_spread(size, chunks):
    # spread_tokens returns such weights as they are, without the sharing out: it must be
    # what the sharing out gives them.
    weights = [size] * chunks
    assert _largest_remainder(weights, size * chunks, size * chunks) == weights
    assert spread_tokens(weights, size * chunks) == weights


@given(
    st.lists(st.tuples(st.floats(0.001, 1.0), st.integers(1, 4)), max_size=30),
    st.booleans(),
)
def test_itls_are_each_gap_split_over_its_tokens(chunks, reported):
    # The samples as the module docstring defines them, computed the plain way; finish()
    # takes a shortcut when every chunk after the first carries one token.
    tracker = Tracker(0, scheduled=0.0, sent=0.0)
    at = 0.0
    for gap, tokens in chunks:
        at += gap
        tracker.tokens(at, tokens)
    total = sum(t for _, t in chunks) if reported else None
    record = tracker.finish(at + 1, input_tokens=1, output_tokens=total, ok=True)
    times = tracker._chunk_at
    counts = spread_tokens(tracker._chunk_tokens, total)
    expected: list[float] = []
    for i in range(1, len(times)):
        expected += [(times[i] - times[i - 1]) / counts[i]] * counts[i]
    assert record.itls == tuple(expected)
    assert record.icls == tuple(times[i] - times[i - 1] for i in range(1, len(times)))


_TEXTS = st.sampled_from(["", " ", "  \n", "word", " two words", "x\ty z", "\u00e9t\u00e9 "])
_EVENTS = st.one_of(
    st.builds(lambda t: TextDelta("c", t), _TEXTS),
    st.builds(lambda t: ReasoningDelta("c", t), _TEXTS),
    st.builds(lambda t: ToolCallDelta("c", 0, None, None, t), _TEXTS),
    st.builds(lambda w: Admitted("c", 1, 5.0 + w, w), st.floats(0, 2)),
    st.builds(lambda d: Retrying("c", 1, d, CallError("busy")), st.floats(0, 2)),
    st.just(UsageReported("c", Usage(1, 2))),
    st.just(StreamReset("c", 2, "retry")),
    st.just(Queued("c", 1, 0.5)),
    st.just(FirstToken("c", 1, 0.5, 0.1)),
    st.just(Failed("c", CallError("gone"))),
)


@given(st.lists(st.lists(_EVENTS, max_size=12), max_size=4))
def test_a_batch_read_at_once_reads_as_event_by_event(batches):
    # read_batch counts text deltas in C, apart from the other events; what it makes of
    # any batch must be what reading it one event at a time, in order, makes.
    fast, each = Tracker(0, 0.0, 0.0), Tracker(0, 0.0, 0.0)
    for at, batch in enumerate(batches, 1):
        assert read_batch(fast, batch, float(at), 1.0) == _read_each(each, batch, float(at), 1.0)
    for name in ("_chunk_at", "_chunk_tokens", "queue_wait", "retry_wait", "admitted"):
        assert getattr(fast, name) == getattr(each, name), name


def test_a_chunk_of_k_tokens_gives_k_itl_samples():
    tracker = Tracker(0, scheduled=1.0, sent=1.5)
    tracker.chunk(2.0, "Alpha beta")  # first chunk: 2 tokens at TTFT 0.5
    tracker.chunk(2.3, " gamma delta epsilon")  # 3 tokens 0.3 s later
    tracker.chunk(2.3, " zeta")  # same instant: the same chunk
    tracker.chunk(2.7, " eta")
    record = tracker.finish(2.8, input_tokens=4, output_tokens=None, ok=True)
    assert record.lag == 0.5 and record.ttft == 0.5
    assert record.itls == pytest.approx((0.075,) * 4 + (0.4,))
    assert record.output_tokens == 7 and not record.output_tokens_reported
    assert record.chunks == 3 and record.e2e == pytest.approx(1.3)
    assert record.tpot == pytest.approx((0.3 + 0.4) / 5)
    assert list(token_times(record)) == pytest.approx([2.0, 2.0, 2.075, 2.15, 2.225, 2.3, 2.7])
    # With usage reported, the estimates are scaled to the server's count.
    scaled = tracker.finish(2.8, input_tokens=4, output_tokens=14, ok=True)
    assert scaled.output_tokens == 14 and scaled.output_tokens_reported
    assert len(scaled.itls) == 14 - 4  # the first chunk's 4 tokens give no ITL samples


def test_a_read_s_tokens_given_at_once_record_what_its_pieces_one_by_one_would():
    pieces = [(2.0, "Alpha beta"), (2.3, " gamma delta epsilon"), (2.3, " zeta"), (2.7, " eta")]
    one_by_one, summed = Tracker(0, scheduled=1.0, sent=1.5), Tracker(0, scheduled=1.0, sent=1.5)
    for at, text in pieces:
        one_by_one.chunk(at, text)
    for at in (2.0, 2.3, 2.7):  # what follow() hands over: each read's estimates, summed
        summed.tokens(at, sum(estimate_tokens(text) for when, text in pieces if when == at))
    summed.tokens(2.9, 0)  # a read without output (usage, a heartbeat) records nothing
    for usage in (None, 14):
        got = summed.finish(2.8, input_tokens=4, output_tokens=usage, ok=True)
        assert got == one_by_one.finish(2.8, input_tokens=4, output_tokens=usage, ok=True)
        assert got.chunks == 3


def test_percentiles_interpolate():
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([5], 99) == 5
    assert percentile(list(range(101)), 99.9) == pytest.approx(99.9)
    empty = summarize([])
    assert empty["count"] == 0 and empty["p99"] is None


def record(index, *, sent, ttft=0.1, itls=(0.01, 0.01), ok=True, lag=0.0, **extra):
    tracker = Tracker(index, scheduled=sent - lag, sent=sent)
    if ok:
        tracker.chunk(sent + ttft, "a")
        at = sent + ttft
        for gap in itls:
            at += gap
            tracker.chunk(at, " b")
    return tracker.finish(
        at + 0.0 if ok else sent + 0.2,
        input_tokens=3,
        output_tokens=1 + len(itls) if ok else None,
        ok=ok,
        **extra,
    )


def test_aggregates_goodput_and_errors():
    records = [record(i, sent=i * 0.5, ttft=0.1 * (i + 1)) for i in range(4)]
    records.append(record(4, sent=2.0, ok=False, status=429, error_type="rate_limit_exceeded"))
    agg = aggregate(records, slos=(parse_slo("ttft_p50=250ms"),))
    assert agg["requests"] == {
        "total": 5,
        "ok": 4,
        "failed": 1,
        "error_rate": 0.2,
        "errors": {"rate_limit_exceeded": 1},
        "statuses": {"429": 1},
    }
    assert agg["ttft_s"]["p50"] == pytest.approx(0.25)
    assert agg["goodput"]["good"] == 2  # TTFT 0.1 and 0.2 are within 250 ms
    assert agg["goodput"]["slos"][0]["met"] is True
    assert agg["throughput"]["output_tokens"] == 12
    assert sum(b["sent"] for b in agg["timeline"]) == 5
    assert sum(b["output_tokens_per_s"] * b["width_s"] for b in agg["timeline"]) == pytest.approx(
        12
    )
    # 1 of 5 failed: above the default 5 % error rate, so the run is invalid and says why.
    assert agg["valid"] is False
    assert agg["invalid_reason"].startswith("1 of 5 requests failed (20.0%)")
    assert aggregate(records, max_error_rate=0.2)["valid"] is True


def test_lag_verdict():
    assert lag_verdict(0.005, 0.010) is None
    assert lag_verdict(None, 0.010) is None
    message = lag_verdict(0.0421, 0.010)
    assert message is not None and "send lag p99 42.1 ms is above the 10 ms limit" in message


def test_slo_and_duration_parsing():
    assert parse_slo("ttft_p99=500ms").seconds == 0.5
    assert parse_slo("e2e_p99.9=2s").percentile == 99.9
    assert parse_slo("itl_p95=50").seconds == 50.0
    for bad in ("ttft=1s", "speed_p99=1s", "ttft_p0=1s", "ttft_p101=1s", "ttft_p99=fast"):
        with pytest.raises(ConfigError, match="--slo"):
            parse_slo(bad)
    assert parse_seconds("250us", flag="--max-lag") == pytest.approx(0.00025)
    with pytest.raises(ConfigError, match="--max-lag"):
        parse_seconds("soon", flag="--max-lag")


def test_sweep_plans_and_verdicts():
    assert parse_sweep("auto").auto and parse_sweep("auto:3").start == 3
    assert parse_sweep("8,2,4").rates == (2, 4, 8)
    for bad in ("auto:0", "1,-2", "fast", ""):
        with pytest.raises(ValueError, match="sweep"):
            parse_sweep(bad)
    steady = [record(i, sent=i * 0.1) for i in range(300)]
    assert not judge(steady, 30.0).saturated
    # A queue that builds up: each request waits 3 ms longer than the one before.
    growing = [record(i, sent=i * 0.1, ttft=0.1 + 0.003 * i) for i in range(300)]
    verdict = judge(growing, 30.0)
    assert verdict.saturated and "grew" in (verdict.reason or "")
    failing = [record(i, sent=i * 0.1, ok=i % 5 != 0) for i in range(300)]
    assert "failed" in (judge(failing, 30.0).reason or "")


def test_compare_reports_changes_and_direction():
    a = {"aggregates": {"ttft_s": {"p99": 0.2}, "throughput": {"requests_per_s": 10.0}}}
    b = {"aggregates": {"ttft_s": {"p99": 0.3}, "throughput": {"requests_per_s": 12.0}}}
    rows = {row.label: row for row in compare(a, b)}
    assert set(rows) == {"TTFT p99", "requests/s"}
    assert rows["TTFT p99"].verdict == "worse" and rows["requests/s"].verdict == "better"
    assert rows["TTFT p99"].change == pytest.approx(0.5)
    text = format_comparison(list(rows.values()), "A", "B")
    assert "TTFT p99" in text and "200.00 ms" in text and "+50.0 %" in text


def test_simulator_latency_model():
    rng = random.Random(7)
    draws = [gamma_draw(rng, 0.3, 0.1) for _ in range(4000)]
    stats = summarize(draws)
    assert stats["mean"] == pytest.approx(0.3, abs=0.006)
    assert stats["std"] == pytest.approx(0.1, rel=0.05)
    assert min(draws) > 0
    assert gamma_draw(rng, 0.3, 0.0) == 0.3
    slots = GenerationSlots(2)
    assert [slots.book(0.0, 1.0), slots.book(0.0, 1.0), slots.book(0.5, 1.0)] == [0.0, 0.0, 1.0]
    assert slots.book(3.0, 1.0) == 3.0
    timing = draw_generation(
        random.Random(0),
        now=5.0,
        chunks=3,
        tokens=5,
        tokens_per_chunk=2,
        ttft=0.5,
        ttft_jitter=0.0,
        token_interval=0.1,
        itl_jitter=0.0,
        slots=None,
    )
    assert timing.chunk_times() == pytest.approx([5.5, 5.7, 5.8])  # the last chunk: 1 token


def test_the_loadtest_runtime_config():
    from sluice._config import ProviderConfig, RateLimitConfig, RuntimeConfig
    from sluice._jobs.loadtest import loadtest_config

    limited = RuntimeConfig(
        providers={"sim": ProviderConfig(rate_limit=RateLimitConfig(requests_per_minute=5))}
    )
    free = loadtest_config(limited, "sim", respect_limits=False)
    entry = free.providers["sim"]
    assert entry.rate_limit.window_limits() == () and entry.rate_limit.max_open_streams is None
    assert entry.rate_limit.learn_from_headers is False and entry.breaker is None
    assert free.retry.max_attempts == 1
    assert loadtest_config(limited, "sim", respect_limits=True) is limited


def test_simulator_latency_fields_are_checked():
    from sluice.simulator import SimulatorConfig

    assert not SimulatorConfig().latency_modelled
    assert SimulatorConfig(capacity=2).latency_modelled
    with pytest.raises(ValueError, match="'itl_jitter' needs a pace"):
        SimulatorConfig(itl_jitter=0.01)
    with pytest.raises(ValueError, match="capacity"):
        SimulatorConfig(capacity=0)


@given(st.text(alphabet=st.sampled_from(" \t\n\r\x0b\x0c\x1c\x85\xa0\u2003\u3000ab.é")))
def test_the_client_counts_tokens_as_the_simulator_does(text):
    # Any whitespace Unicode knows, between words: the client's split and the simulator's
    # regular expression find the same runs (at least 1 for text that is all whitespace).
    assert estimate_tokens(text) == (max(1, count_tokens(text)) if text else 0)
