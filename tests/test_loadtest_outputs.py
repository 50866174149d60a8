"""What a load test reports beyond latencies: time to second token, inter-chunk latency next to
per-token ITL, requested against received length, server against client token counts,
confidence intervals, the per-request JSONL and CSV files, concurrency lists and ``compare``
across several runs. Exact checks run under the autojump clock over in-memory HTTP; the CLI
checks run the real command against the in-process simulator and assert files and shapes."""

from __future__ import annotations

import csv
import io

import orjson
import pytest

import sluice
from sluice._cli import main
from sluice._config import RuntimeConfig
from sluice._jobs.loadtest import Lengths, LoadTest, OpenLoop, Workload, loadtest_config, run_load
from sluice._jobs.loadtest.aggregate import TOKEN_RULE
from sluice._jobs.loadtest.stats import confidence_intervals
from sluice.simulator import SimulatorApp, SimulatorConfig

from .helpers import memory_transport, virtual_deadline

MODEL = "sim:sim-small"


@pytest.fixture(autouse=True)
def no_ambient_config(monkeypatch):
    monkeypatch.delenv("SLUICE_CONFIG", raising=False)


@virtual_deadline(600)
async def test_chunks_of_several_tokens_give_icl_itl_and_ttst(autojump_clock, nursery):
    # 10 tokens in chunks of 3 (3, 3, 3, 1) at 100 tokens/s after a 0.2 s TTFT.
    config = SimulatorConfig(
        ttft=0.2, tokens_per_second=100, tokens_per_chunk=3, output_tokens=1000
    )
    test = LoadTest(
        model=MODEL,
        shape=OpenLoop.at_rate(5, arrival="constant"),
        requests=10,
        workload=Workload(input_tokens=Lengths("fixed", 7), output_tokens=Lengths("fixed", 10)),
        warmup=0,
    )
    transport = memory_transport(SimulatorApp(config), nursery)
    runtime_config = loadtest_config(RuntimeConfig(), "sim", respect_limits=False)
    async with sluice.open_runtime(runtime_config, transport=transport) as rt:
        run = await run_load(rt, test)
    await transport.aclose()
    agg = run.aggregates
    # Every chunk 3 tokens / 100 tokens/s = 30 ms apart (the simulator paces chunks evenly);
    # per token that is 10 ms, and the last chunk's single token took the whole 30 ms.
    assert agg["icl_s"]["p50"] == pytest.approx(0.03) and agg["icl_s"]["count"] == 10 * 3
    assert agg["itl_s"]["count"] == 10 * 7 and agg["itl_s"]["p50"] == pytest.approx(0.01)
    # The first chunk carried 3 tokens: the second token came with the first.
    assert agg["ttst_s"]["p50"] == pytest.approx(agg["ttft_s"]["p50"]) == pytest.approx(0.2)
    assert agg["output_length"] | {"received_over_requested": None} == {
        "requested": 100,
        "received": 100,
        "requests_short": 0,
        "requests_long": 0,
        "requests_exact": 10,
        "received_over_requested": None,
    }
    assert agg["token_counts"] == {
        "client_rule": TOKEN_RULE,
        "server_reported": 100,
        "client_counted": 100,
        "requests_compared": 10,
        "requests_differing": 0,
        "server_unreported": 0,
    }
    assert all(r.input_tokens == r.requested_input_tokens == 7 for r in run.records)
    low, high = agg["ttft_s"]["ci95"]["p50"]
    assert low == pytest.approx(0.2) and high == pytest.approx(0.2)


def test_confidence_intervals_cover_and_narrow():
    import random

    rng = random.Random(5)
    small = sorted(rng.gauss(1.0, 0.1) for _ in range(100))
    large = sorted(rng.gauss(1.0, 0.1) for _ in range(20_000))  # the large-sample path
    for samples in (small, large):
        ci = confidence_intervals(samples)
        assert ci["mean"][0] < 1.0 < ci["mean"][1]
        assert ci["p50"][0] < 1.0 < ci["p50"][1]
        assert ci["p99"][0] <= ci["p99"][1]
    assert (confidence_intervals(large)["mean"][1] - confidence_intervals(large)["mean"][0]) < (
        confidence_intervals(small)["mean"][1] - confidence_intervals(small)["mean"][0]
    )
    assert confidence_intervals(small) == confidence_intervals(small)  # seeded: repeatable
    assert confidence_intervals([1.0]) == {}


def loadtest(*args: str) -> int:
    return main(["loadtest", "--model", MODEL, *args])


def test_the_run_writes_jsonl_and_csv_beside_the_json(tmp_path, capsys):
    out = tmp_path / "run.json"
    assert loadtest("--rate", "40", "--arrival", "constant", "--requests", "8",
                    "--output-tokens", "5", "--warmup", "2", "--max-lag", "2s",
                    "--out", str(out)) == 0  # fmt: skip
    document = orjson.loads(out.read_bytes())
    lines = [orjson.loads(x) for x in (tmp_path / "run.requests.jsonl").read_bytes().splitlines()]
    assert [r["warmup"] for r in lines] == [True, True] + [False] * 8
    assert [r for r in lines if not r["warmup"]] == document["requests"]
    rows = list(csv.DictReader(io.StringIO((tmp_path / "run.requests.csv").read_text())))
    assert len(rows) == 10 and rows[2]["requested_output_tokens"] == "5"
    assert {
        "ttft_s",
        "ttst_s",
        "icl_mean_s",
        "server_output_tokens",
        "client_output_tokens",
    } <= set(rows[0])
    aggregates = list(csv.reader(io.StringIO((tmp_path / "run.aggregates.csv").read_text())))
    header = aggregates[0]
    assert header[0] == "metric" and "p99" in header and "p99_ci95_low" in header
    latencies = {"ttft_s", "ttst_s", "itl_s", "icl_s", "e2e_s"}
    assert {row[0] for row in aggregates[1:] if row} >= latencies
    assert document["config"]["load"] == "constant 40/s"
    assert document["aggregates"]["requests"]["total"] == 8


def test_a_concurrency_list_runs_each_level(tmp_path, capsys):
    out = tmp_path / "c.json"
    assert loadtest("--concurrency", "1,3", "--requests", "6", "--output-tokens", "3",
                    "--out", str(out)) == 0  # fmt: skip
    document = orjson.loads(out.read_bytes())
    levels = document["concurrency_sweep"]
    assert [p["concurrency"] for p in levels] == [1, 3]
    assert all(p["requests"] == 6 for p in levels)
    assert "concurrency 3:" in capsys.readouterr().out
    assert loadtest("--concurrency", "2,0", "--requests", "2", "--out", str(out)) == 2


def test_compare_takes_more_than_two_runs(tmp_path, capsys):
    paths = []
    for rate in ("20", "40", "60"):
        path = tmp_path / f"r{rate}.json"
        assert loadtest("--rate", rate, "--requests", "6", "--output-tokens", "3",
                        "--max-lag", "2s", "--out", str(path)) == 0  # fmt: skip
        paths.append(str(path))
    capsys.readouterr()
    assert main(["loadtest", "compare", *paths]) == 0
    shown = capsys.readouterr().out.splitlines()
    assert shown[0].split() == ["metric", "1", "r20.json", "2", "r40.json", "3", "r60.json"]
    ttft = next(line for line in shown if line.startswith("TTFT p50"))
    assert ttft.count(" %)") == 2  # runs 2 and 3 against the first


def test_completions_and_embeddings_endpoints(tmp_path, capsys):
    from .helpers import sim_process

    # Chunks 40 ms apart: each arrives in a network read of its own, and the client stamps
    # reads, not events (two chunks read together are one chunk to it).
    with sim_process("--tps", "50", "--tokens-per-chunk", "2") as url:
        base = ["--base-url", url, "--api-key", "sk-test", "--rate", "40", "--requests", "6"]
        base += ["--max-lag", "2s", "--warmup", "1"]
        done = tmp_path / "completions.json"
        assert loadtest(*base, "--endpoint", "completions", "--input-tokens", "9",
                        "--output-tokens", "5", "--out", str(done)) == 0  # fmt: skip
        embedded = tmp_path / "embeddings.json"
        assert loadtest(*base, "--endpoint", "embeddings", "--embedding-batch", "4",
                        "--input-tokens", "3", "--out", str(embedded)) == 0  # fmt: skip
    document = orjson.loads(done.read_bytes())
    agg = document["aggregates"]
    assert document["config"]["endpoint"] == "completions"
    assert agg["requests"]["ok"] == 6 and agg["throughput"]["output_tokens"] == 30
    assert agg["token_counts"]["requests_differing"] == 0
    assert all(r["input_tokens"] == 9 and r["chunks"] == 3 for r in document["requests"])
    assert agg["icl_s"]["count"] == 6 * 2 and agg["itl_s"]["count"] == 6 * 3
    document = orjson.loads(embedded.read_bytes())
    agg = document["aggregates"]
    assert agg["requests"]["ok"] == 6 and agg["ttft_s"]["count"] == 0
    assert all(r["inputs"] == 4 for r in document["requests"])
    # Four inputs: the prompt (3 words) and three numbered copies (4 words each).
    assert all(r["input_tokens"] == 3 + 3 * 4 for r in document["requests"])
    assert agg["throughput"]["embeddings_per_s"] > 0
    capsys.readouterr()
    # Completions go straight to the server; embeddings go through the runtime (issue 34).
    assert loadtest("--endpoint", "completions", "--rate", "1", "--requests", "1",
                    "--out", str(tmp_path / "x.json")) == 2  # fmt: skip
    assert "give --base-url" in capsys.readouterr().err


def test_the_summary_shows_sessions(tmp_path, capsys):
    out = tmp_path / "s.json"
    shape = ("--concurrency", "2", "--requests", "3", "--turns", "2")
    assert loadtest(*shape, "--input-tokens", "4", "--output-tokens", "3", "--out", str(out)) == 0
    printed = capsys.readouterr().out
    assert "sessions: 3 of 3 complete (2 turns), TTFT p50 by turn: " in printed
    assert "output tokens: server reported" not in printed  # they agree: nothing to say


@virtual_deadline(600)
async def test_a_warm_up_by_duration_sends_until_its_time_is_up(autojump_clock, nursery):
    # Each warm-up request takes the 0.3 s TTFT; a 1 s warm-up sends at 0, 0.3, 0.6 and 0.9.
    config = SimulatorConfig(ttft=0.3, output_tokens=1000)
    test = LoadTest(
        model=MODEL,
        shape=OpenLoop.at_rate(10, arrival="constant"),
        requests=5,
        workload=Workload(input_tokens=Lengths("fixed", 3), output_tokens=Lengths("fixed", 2)),
        warmup=0,
        warmup_seconds=1.0,
    )
    transport = memory_transport(SimulatorApp(config), nursery)
    runtime_config = loadtest_config(RuntimeConfig(), "sim", respect_limits=False)
    async with sluice.open_runtime(runtime_config, transport=transport) as rt:
        run = await run_load(rt, test)
    await transport.aclose()
    assert [round(r.sent, 9) for r in run.warmup] == [0.0, 0.3, 0.6, 0.9]
    assert all(r.warmup and r.ok for r in run.warmup)
    assert run.aggregates["requests"]["total"] == 5  # the warm-up is in no aggregate
    assert [round(r.scheduled, 9) for r in run.records] == [0.0, 0.1, 0.2, 0.3, 0.4]
