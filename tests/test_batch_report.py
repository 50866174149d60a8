"""What a batch reports: latency percentiles, the input check, progress lines and the summary
file (pure parts directly; the command's log lines and file through ``main``, loopback)."""

from __future__ import annotations

import random
import re

import orjson
import pytest

from sluice._cli import main
from sluice._jobs.batch_lines import Answered, Shard
from sluice._jobs.batch_report import (
    STALE_WINDOWS,
    BatchProgress,
    BatchSummary,
    LatencyHistogram,
    format_duration,
    format_progress,
    format_summary,
    quota_limits,
    summary_path,
)
from sluice._jobs.batch_scan import HashSet, InputCheck, find_duplicate
from sluice._jobs.percentile import percentile
from sluice._mail import KeyStatistics


@pytest.fixture(autouse=True)
def no_ambient_config(monkeypatch):
    monkeypatch.delenv("SLUICE_CONFIG", raising=False)


def line(custom_id: object, model: str = "sim:sim-small") -> bytes:
    messages = [{"role": "user", "content": "hi"}]
    return orjson.dumps({"custom_id": custom_id, "body": {"model": model, "messages": messages}})


# -- latency histogram ---------------------------------------------------------------------


def exact_percentile(values: list[float], p: float) -> float:
    return percentile(sorted(values), p)


@pytest.mark.parametrize("seed", range(5))
def test_percentiles_are_within_one_percent_of_exact(seed):
    rng = random.Random(seed)
    values = [rng.lognormvariate(-1, 1.5) for _ in range(rng.randint(1, 3000))]
    histogram = LatencyHistogram()
    for value in values:
        histogram.add(value)
    for p in (0, 50, 90, 99, 99.9, 100):
        got = histogram.percentile(p)
        assert got == pytest.approx(exact_percentile(values, p), rel=0.011)
    assert histogram.high == max(values)


def test_histogram_edges():
    histogram = LatencyHistogram()
    assert histogram.percentile(50) is None
    histogram.add(0.25)
    assert histogram.percentile(50) == histogram.percentile(99) == 0.25
    histogram.add(0.0)  # below the first bucket
    histogram.add(10 * 86_400.0)  # beyond the last
    assert histogram.percentile(0) == 0.0
    # halfway from 0.0 to 0.25 (its bucket's middle, within 1%), as for a sorted list
    assert histogram.percentile(25) == pytest.approx(0.125, rel=0.011)
    assert histogram.percentile(50) == pytest.approx(0.25, rel=0.011)
    assert histogram.percentile(100) == 10 * 86_400.0


# -- the input check ------------------------------------------------------------------------


def test_hash_set_finds_repeats_across_growth():
    members = HashSet(capacity=4)
    rng = random.Random(1)
    values = [rng.getrandbits(63) + 1 for _ in range(5000)]
    assert not any(members.add(v) for v in values)
    assert all(members.add(v) for v in values)
    assert len(members) == 5000
    assert members.add(-7) is False and members.add(-7) is True  # negative hashes too


def test_input_check_counts_the_lines_to_do_and_their_providers():
    answered = Answered(frozenset({"b"}), frozenset({4}), 0)
    check = InputCheck(answered=answered)
    for lineno, raw in enumerate(
        [line("a"), line("b"), b"", b"not json", line("c", "openai:gpt-4o"), line("d", "bare")],
        start=1,
    ):
        check.add(lineno, raw)
    # b is answered, line 3 blank, line 4 (no custom_id) answered by number.
    assert check.todo == 3
    assert check.providers == {"sim", "openai"}
    assert not check.suspects
    override = InputCheck(model="anthropic:claude", shard=Shard(0, 2))
    for lineno, custom_id in enumerate(["a", "b", "c", "d", "e", "f"], start=1):
        override.add(lineno, line(custom_id))
    assert override.providers == {"anthropic"}
    assert override.todo == sum(Shard(0, 2).holds(c) for c in "abcdef")


def test_a_repeated_custom_id_is_suspected_then_named_with_both_lines():
    check = InputCheck()
    lines = [(1, line("a")), (2, line("b")), (3, b"{oops"), (4, line("c")), (5, line("b"))]
    for lineno, raw in lines:
        check.add(lineno, raw)
    assert len(check.suspects) == 1
    first: dict[str, int] = {}
    assert find_duplicate(lines[:3], check.suspects, first) is None
    assert find_duplicate(lines[3:], check.suspects, first) == (
        "custom_id 'b' appears on line 2 and again on line 5"
    )


# -- text -----------------------------------------------------------------------------------


def test_summary_path_sits_next_to_the_output():
    assert summary_path("runs/out.jsonl") == "runs/out.summary.json"
    assert summary_path("out.txt") == "out.txt.summary.json"


def test_progress_line_and_durations():
    summary = BatchSummary(
        lines=60, ok=50, failed=10, input_tokens=500, output_tokens=1500, todo=120, elapsed=10
    )
    progress = BatchProgress(
        summary=summary,
        in_flight=8,
        queued=3,
        cooldown=2.5,
        limits=("sim requests/60s 60/600",),
    )
    assert format_progress(progress) == (
        "60/120 lines, ok 50, failed 10, in flight 8 (queued 3), 200 tok/s, $0.000000,"
        " ETA 10s, limit sim requests/60s 60/600, cooldown 2.5s"
    )
    assert "stopping" in format_progress(BatchProgress(summary=summary, draining=True))
    assert [format_duration(s) for s in (0.4, 59, 61, 3600 * 2 + 65)] == [
        "0s",
        "59s",
        "1m01s",
        "2h01m",
    ]


# -- the command: plain log lines on stderr and the summary file ------------------------------


def test_log_lines_and_summary_file(tmp_path, capsys):
    source = tmp_path / "in.jsonl"
    lines = [line(f"r{i}") for i in range(30)] + [b"{broken"]
    source.write_bytes(b"\n".join(lines) + b"\n")
    out = tmp_path / "out.jsonl"
    # 1,200 a minute: 20 lines at once, then 10 a second later; a log line every 0.2 s.
    argv = ["batch", str(source), "-o", str(out), "--rpm", "1200", "--job", "report-test"]
    code = main([*argv, "--log-interval", "0.2"])
    captured = capsys.readouterr()
    assert code == 1  # the broken line failed
    logs = [entry for entry in captured.err.splitlines() if entry.startswith("sluice batch: ")]
    assert len(logs) >= 3, captured.err
    pattern = re.compile(
        r"sluice batch: \d+/31 lines, ok \d+, failed [01], in flight \d+ \(queued \d+\),"
        r" \d+ tok/s, \$\d+\.\d{6}(, ETA \w+)?, limit sim requests/60s \d+/1200,"
        r" sim requests/1s \d+/20"
    )
    # A quota shows once a call has reached it: on a slow box a log line may come first.
    starting = (
        "sluice batch: 0/31 lines, ok 0, failed 0, in flight 0 (queued 0), 0 tok/s, $0.000000"
    )
    assert all(pattern.fullmatch(entry) or entry == starting for entry in logs), logs
    assert any(pattern.fullmatch(entry) for entry in logs), logs
    assert logs[-1].startswith("sluice batch: 31/31 lines, ok 30, failed 1, in flight 0")
    assert "summary: " + str(tmp_path / "out.summary.json") in captured.out

    summary = orjson.loads((tmp_path / "out.summary.json").read_bytes())
    results = [orjson.loads(raw) for raw in out.read_bytes().splitlines()]
    usage = [o["response"]["body"]["usage"] for o in results if o["error"] is None]
    tokens_in = sum(u["prompt_tokens"] for u in usage)
    tokens_out = sum(u["completion_tokens"] for u in usage)
    assert summary["input"] == str(source) and summary["output"] == str(out)
    assert summary["job"] == "report-test" and summary["interrupted"] is None
    assert (summary["lines"], summary["todo"], summary["calls"]) == (31, 31, 30)
    assert summary["status"] == {
        "ok": 30,
        "failed": 1,
        "skipped": 0,
        "redone": 0,
        "kept_failed": 0,
        "failed_in_output": 1,
        "not_done": 0,
    }
    assert summary["input_lines"] == 31
    assert summary["errors"] == {"invalid_json_line": 1}
    assert summary["tokens"] == {
        "input": tokens_in,
        "output": tokens_out,
        "total": tokens_in + tokens_out,
    }
    # The simulator's made-up price: $1 per million input tokens, $4 per million output.
    assert summary["cost_usd"] == f"{(tokens_in + 4 * tokens_out) / 1e6:.6f}"
    assert summary["job_cost_usd"] == summary["cost_usd"]
    latency = summary["latency_s"]
    assert list(latency) == ["p50", "p90", "p99", "max"]
    assert 0 < latency["p50"] <= latency["p90"] <= latency["p99"] <= latency["max"]
    # The last ten waited for the next second of the pacing window, which counts sends: they
    # left one second after the first sends, a little less than a second after being queued.
    assert latency["max"] >= 0.9
    assert summary["elapsed_s"] >= latency["max"]
    assert summary["calls_per_s"] > 0 and summary["tokens_per_s"] > 0


def test_the_headline_counts_lines_written():
    """Lines read but cancelled before their call ended were not written: the headline does
    not count them (a resume does them)."""
    s = BatchSummary(lines=10, todo=10, ok=3, failed=1, interrupted="cancelled")
    headline, status = format_summary(s, "out.jsonl").splitlines()[:2]
    assert headline == "batch interrupted: 4 lines written -> out.jsonl"
    assert status == "  ok 3, failed 1, not done 6 (run again with --resume)"


def test_a_quota_shows_its_windows_marked_with_their_age_once_old_then_its_pending_slots():
    def key(age: float, pending_limit: int | None = None) -> KeyStatistics:
        return KeyStatistics(
            key="sim",
            queued={},
            pending=3,
            open_streams=0,
            pending_limit=pending_limit,
            windows={"requests/60s": (57, 60), "total_tokens/60s": (900, 10_000)},
            cooldown_left=0.0,
            exhausted_left=0.0,
            windows_age=age,
        )

    assert quota_limits("sim", key(0.0)) == [
        "sim requests/60s 57/60",
        "sim total_tokens/60s 900/10000",
    ]
    assert quota_limits("sim", key(STALE_WINDOWS - 0.1)) == quota_limits("sim", key(0.0))
    assert quota_limits("sim", key(12.4, pending_limit=8)) == [
        "sim requests/60s 57/60 (12s ago)",
        "sim total_tokens/60s 900/10000 (12s ago)",
        "sim pending 3/8",
    ]
