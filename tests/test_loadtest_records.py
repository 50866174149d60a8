"""A load test's memory does not grow with its length (issue 28): records go to a file as they
finish (:class:`RecordFile`), distributions are :class:`Samples` (exact up to a limit, then a
histogram within a stated relative error), and the results are written from the file.

The pure parts are checked against the in-memory computation they replace; the memory per
request of a real run (the runtime, the simulator over in-memory HTTP, the autojump clock) is
measured with tracemalloc between the 1,000th and the 3,000th request.
"""

from __future__ import annotations

import math
import random

import orjson
import pytest

import sluice
from sluice._config import RuntimeConfig
from sluice._jobs.loadtest import Lengths, LoadTest, OpenLoop, Progress, Workload, run_load
from sluice._jobs.loadtest.aggregate import aggregate
from sluice._jobs.loadtest.limits import loadtest_config
from sluice._jobs.loadtest.metrics import Tracker
from sluice._jobs.loadtest.records import RecordDicts, RecordFile, record_json
from sluice._jobs.loadtest.results import json_chunks, side_files, write_outputs
from sluice._jobs.loadtest.stats import EXACT_LIMIT, RELATIVE_ERROR, Samples, summarize
from sluice.simulator import SimulatorApp, SimulatorConfig

from .helpers import memory_transport, virtual_deadline

MODEL = "sim:sim-small"


def record(index: int, scheduled: float, *, ok: bool = True, tokens: int = 5):
    tracker = Tracker(index, scheduled, scheduled + 0.001)
    for k in range(tokens):
        tracker.chunk(scheduled + 0.1 + 0.01 * k, f" w{k}")
    return tracker.finish(
        scheduled + 0.2,
        input_tokens=7,
        output_tokens=tokens if ok else None,
        ok=ok,
        error_type=None if ok else "ServerError",
        status=None if ok else 500,
        requested_output_tokens=tokens,
    )


def shuffled_records(n: int = 40) -> list:
    rng = random.Random(3)
    made = [record(i, i * 0.05, ok=i % 7 != 3, tokens=1 + i % 6) for i in range(n)]
    rng.shuffle(made)  # they finish in any order
    return made


# --- RecordFile --------------------------------------------------------------------------


def test_a_record_file_gives_back_every_record_in_the_order_they_were_due(tmp_path):
    made = shuffled_records()
    records = RecordFile(tmp_path)
    for r in made:
        records.add(r)
    expected = sorted(made, key=lambda r: (r.scheduled, r.index))
    assert len(records) == len(made)
    assert list(records) == expected  # every field, floats bit for bit
    assert records[0] == expected[0] and records[-1] == expected[-1]
    assert records[3:6] == expected[3:6]
    assert records.failed == sum(1 for r in made if not r.ok)
    assert list(RecordDicts(records)) == [record_json(r) for r in expected]
    assert RecordDicts(records)[2] == record_json(expected[2])
    # The file is anonymous: nothing is left in the folder, during or after.
    assert list(tmp_path.iterdir()) == []
    records.add(record(99, -1.0))  # a late add re-sorts
    assert records[0].index == 99


def test_aggregates_from_the_file_equal_those_from_a_list(tmp_path):
    made = shuffled_records()
    records = RecordFile(tmp_path)
    for r in made:
        records.add(r)
    ordered = sorted(made, key=lambda r: (r.scheduled, r.index))
    assert aggregate(records) == aggregate(ordered)


def test_the_results_are_written_from_the_file_as_valid_json(tmp_path):
    made = shuffled_records()
    records, warm = RecordFile(tmp_path), RecordFile(tmp_path)
    for r in made:
        records.add(r)
    warm.add(record(0, -1.0))
    document = {
        "format": "sluice-loadtest/1",
        "aggregates": aggregate(records),
        "requests": RecordDicts(records),
        "warmup_requests": RecordDicts(warm),
        "sweep": {"points": [{"rate": 1.0, "requests": RecordDicts(records)}]},
    }
    plain = {
        **document,
        "requests": list(RecordDicts(records)),
        "warmup_requests": list(RecordDicts(warm)),
        "sweep": {"points": [{"rate": 1.0, "requests": list(RecordDicts(records))}]},
    }
    assert orjson.loads(b"".join(json_chunks(document))) == plain
    out = tmp_path / "r.json"
    write_outputs(out, document)
    assert orjson.loads(out.read_bytes()) == plain
    lines = side_files(out)["requests.jsonl"].read_bytes().splitlines()
    everything = [*list(RecordDicts(warm)), *list(RecordDicts(records))]
    assert [orjson.loads(line) for line in lines] == everything
    csv_rows = side_files(out)["requests.csv"].read_text().splitlines()
    assert len(csv_rows) == 1 + len(made) + 1


# --- Samples -------------------------------------------------------------------------------


def test_samples_below_the_limit_are_exactly_summarize():
    rng = random.Random(1)
    values = [rng.lognormvariate(-3, 1) for _ in range(3000)]
    samples = Samples()
    samples.extend(values)
    assert samples.exact
    assert samples.summary(intervals=True) == summarize(values, intervals=True) | {"exact": True}


def test_samples_past_the_limit_stay_within_the_relative_error_in_bounded_memory():
    rng = random.Random(2)
    # A wide spread: microseconds to tens of seconds.
    values = [rng.lognormvariate(-4, 2.5) for _ in range(60_000)]
    samples = Samples(limit=10_000)
    samples.extend(values)
    assert not samples.exact
    got = samples.summary(intervals=True)
    want = summarize(values, intervals=True)
    assert got["exact"] is False and got["count"] == len(values)
    assert got["min"] == want["min"] and got["max"] == want["max"]
    assert got["mean"] == pytest.approx(want["mean"], rel=1e-9)
    assert got["std"] == pytest.approx(want["std"], rel=1e-6)
    for name in ("p50", "p90", "p95", "p99", "p99.9"):
        assert got[name] == pytest.approx(want[name], rel=RELATIVE_ERROR * 1.01), name
    intervals = want["ci95"]
    assert isinstance(intervals, dict)
    for name, (low, high) in intervals.items():
        if name != "mean":
            assert got["ci95"][name][0] == pytest.approx(low, rel=RELATIVE_ERROR * 1.01)
            assert got["ci95"][name][1] == pytest.approx(high, rel=RELATIVE_ERROR * 1.01)
    # The histogram's size follows the spread of the values, not their number.
    buckets = len(samples._buckets)
    samples.extend(values)
    assert len(samples._buckets) == buckets
    assert buckets < math.log(max(values) / min(values)) / (2 * RELATIVE_ERROR) + 2


def test_samples_with_zeros_and_one_value():
    samples = Samples(limit=2)
    samples.extend([0.0, 0.0, 0.0, 0.5])
    assert samples.percentile(0) == 0.0 and samples.percentile(100) == 0.5
    assert samples.percentile(50) == 0.0
    single = Samples()
    single.add(0.25)
    assert single.percentile(99) == 0.25
    assert Samples().percentile(50) is None
    assert EXACT_LIMIT >= 5000  # the bootstrap's limit: small runs keep exact intervals


# --- memory per request of a real run ----------------------------------------------------


def test_memory_per_request_stays_flat(tmp_path):
    """Between the 1,000th and the 3,000th finished request, the number of memory blocks
    Python holds grows by far less than one per request. Before records went to disk, each
    request kept its record, a tuple of per-token and one of per-chunk latencies, and a float
    object for each latency: several blocks per request, so the bound fails it many times
    over. (Blocks, not bytes: ``sys.getallocatedblocks`` costs nothing to keep, where
    tracing every allocation slows the run severalfold.)"""
    import gc
    import sys

    import trio
    import trio.testing

    seen: dict[int, int] = {}

    def progress(p: Progress) -> None:
        for mark in (1000, 3000):
            if p.finished >= mark and mark not in seen:
                gc.collect()
                seen[mark] = sys.getallocatedblocks()

    async def main() -> None:
        app = SimulatorApp(
            SimulatorConfig(
                ttft=0.01, tokens_per_second=2000, tokens_per_chunk=8, output_tokens=1000
            )
        )
        test = LoadTest(
            model=MODEL,
            shape=OpenLoop.at_rate(100, arrival="constant"),
            requests=3100,
            warmup=0,
            workload=Workload(input_tokens=Lengths("fixed", 8), output_tokens=Lengths("fixed", 32)),
        )
        config = loadtest_config(RuntimeConfig(), "sim", respect_limits=False)
        async with trio.open_nursery() as nursery:
            transport = memory_transport(app, nursery)
            async with sluice.open_runtime(config, transport=transport) as rt:
                with trio.fail_after(600):
                    run = await run_load(
                        rt, test, progress=progress, progress_interval=0.5, folder=tmp_path
                    )
            await transport.aclose()
        assert run.aggregates["requests"]["ok"] == 3100
        assert run.aggregates["itl_s"]["count"] == 3100 * (32 - 8)  # the first chunk has none

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    growth = seen[3000] - seen[1000]
    assert growth < 2000, f"{growth} blocks over 2,000 requests"


@virtual_deadline(60)
async def test_a_run_keeps_its_records_in_the_folder_given_and_leaves_nothing(
    autojump_clock, nursery, tmp_path
):
    app = SimulatorApp(SimulatorConfig(ttft=0.05, tokens_per_second=100, output_tokens=1000))
    test = LoadTest(model=MODEL, shape=OpenLoop.at_rate(5), requests=10)
    config = loadtest_config(RuntimeConfig(), "sim", respect_limits=False)
    transport = memory_transport(app, nursery)
    async with sluice.open_runtime(config, transport=transport) as rt:
        run = await run_load(rt, test, folder=tmp_path)
    await transport.aclose()
    assert isinstance(run.records, RecordFile) and len(run.records) == 10
    assert [r.index for r in run.records] == list(range(10))
    assert list(tmp_path.iterdir()) == []


def test_the_soak_benchmark_samples_a_real_load_tester() -> None:
    """``benchmarks.loadtest_soak`` end to end, for a few seconds: a simulator process, a
    ``sluice loadtest`` process, its RSS sampled; the report says what it measured."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    command = [sys.executable, "-m", "benchmarks.loadtest_soak", "--minutes", "0.1"]
    command += ["--rate", "20", "--sample-every", "1", "--output-tokens", "8"]
    done = subprocess.run(command, cwd=root, capture_output=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
    report = orjson.loads(done.stdout.splitlines()[-1])
    assert report["exit_status"] in (0, 1)  # 1: a busy machine made the run invalid (lag)
    assert report["requests"]["total"] > 0 and report["requests"]["failed"] == 0
    assert len(report["samples"]) >= 2 and all(s["rss_mb"] > 0 for s in report["samples"])
    # The kernel's peak and a sample of the current RSS are counted apart (per-thread
    # counters folded in lazily): the peak is at least about the largest sample.
    assert report["rss_peak_mb"] >= 0.9 * max(s["rss_mb"] for s in report["samples"])
    assert "loadtest --model sim:sim-small --base-url" in report["command"]
