"""Issue 35's load-tester correctness list, run for real: what the requests carry
(``--extra-body``, ``--header``, ``--fixed-output`` and the verdict on short replies), the
server's request id kept on a failure, sluice's own queueing and retries shown, the load as
sent and the verdict on a run that fell behind, the aggregates CSV, and ``compare``'s
intervals and configuration warning.

Runs go through the real runtime under the autojump clock, over memory streams to the
suite's own burst server (:mod:`tests.sse_bursts`, which keeps what it read) or to the
simulator's app; the CLI parts run the real command.
"""

from __future__ import annotations

import csv
import io
from typing import TYPE_CHECKING, Any

import orjson
import pytest

import sluice
from sluice import RuntimeConfig
from sluice._cli import main
from sluice._cli.loadtest import format_summary
from sluice._config import ProviderConfig, Secret
from sluice._errors import ConfigError
from sluice._jobs.loadtest import (
    ClosedLoop,
    Lengths,
    LoadTest,
    LoadTestOptions,
    OpenLoop,
    Workload,
    build_test,
    loadtest_config,
    run_load,
)
from sluice._jobs.loadtest.compare import compare, config_differences
from sluice._jobs.loadtest.endpoints import responses_config
from sluice._jobs.loadtest.report import render_report
from sluice._jobs.loadtest.results import FORMAT, aggregates_csv, results_document
from sluice.simulator import SimulatorApp, SimulatorConfig
from sluice.transport import FastTransport

from .helpers import memory_transport, virtual_deadline
from .sse_bursts import BurstServer

if TYPE_CHECKING:
    from pathlib import Path


@pytest.fixture(autouse=True)
def no_ambient_config(monkeypatch):
    monkeypatch.delenv("SLUICE_CONFIG", raising=False)


def burst_config(*, respect_limits: bool = False) -> RuntimeConfig:
    providers = {"t": ProviderConfig(base_url="http://burst.test/v1", api_key=Secret("sk-t"))}
    config = RuntimeConfig(providers=providers)
    return loadtest_config(config, "t", respect_limits=respect_limits)


async def run_burst(server: BurstServer, test: LoadTest):
    transport = FastTransport(open_stream=server.open_stream)
    config = burst_config()
    if test.endpoint == "responses":  # as the command sets it up
        config = responses_config(config, test.model)
    async with sluice.open_runtime(config, transport=transport) as rt:
        return await run_load(rt, test)


def options(tmp_path: Path, **flags: Any) -> LoadTestOptions:
    base: dict[str, Any] = {"model": "t:m", "out": tmp_path / "r.json", "concurrency": "1"}
    base |= {"requests": 3, "warmup": "0", "output_tokens": "16", "input_tokens": "3"}
    return LoadTestOptions(**(base | flags))


# --- what each request carries ----------------------------------------------------------------


# Each endpoint whose calls go through the runtime's chat path, the path its requests take
# and the body a request has without the flags (the 16 output tokens asked under its name).
SHAPED = {
    "chat": (
        "/v1/chat/completions",
        {"model", "messages", "max_tokens", "stream", "stream_options"},
        "max_tokens",
    ),
    "responses": (
        "/v1/responses",
        {"model", "input", "max_output_tokens", "store", "stream"},
        "max_output_tokens",
    ),
}
shaped_endpoints = pytest.mark.parametrize("endpoint", list(SHAPED))


@shaped_endpoints
@virtual_deadline(60)
async def test_extra_body_headers_and_fixed_output_reach_the_server(
    autojump_clock, nursery, tmp_path, endpoint
):
    path, plain_keys, length = SHAPED[endpoint]
    # 16 words: exactly what is asked
    server = BurstServer(nursery=nursery, responses=endpoint == "responses")
    test = build_test(
        options(
            tmp_path,
            endpoint=endpoint,
            extra_body='{"top_k": 20, "repetition_penalty": 1.1}',
            header=("x-team:search", "X-Trace: abc 1"),
            fixed_output=True,
        )
    ).test
    run = await run_burst(server, test)
    assert len(server.received) == 3
    for request in server.received:
        body = request.body
        assert request.path == path
        added = {"top_k", "repetition_penalty", "ignore_eos", "min_tokens"}
        assert body.keys() == plain_keys | added
        assert (body["top_k"], body["repetition_penalty"]) == (20, 1.1)
        assert body["ignore_eos"] is True and body["min_tokens"] == body[length] == 16
        assert request.header("x-team") == "search" and request.header("x-trace") == "abc 1"
    assert run.aggregates["valid"] is True
    assert run.aggregates["output_length"]["requests_exact"] == 3
    described = results_document(run)["config"]
    # The header names are kept, never their values (a header may carry a credential).
    assert described["header_names"] == ["x-team", "X-Trace"] and described["fixed_output"]
    assert "abc 1" not in orjson.dumps(described).decode()


@shaped_endpoints
@virtual_deadline(60)
async def test_fixed_output_marks_a_run_with_short_replies_invalid_with_the_count(
    autojump_clock, nursery, tmp_path, endpoint
):
    # A server that ignores ignore_eos and min_tokens: 10 words of the 16 asked.
    def server() -> BurstServer:
        return BurstServer(nursery=nursery, reply_words=10, responses=endpoint == "responses")

    test = build_test(options(tmp_path, endpoint=endpoint, fixed_output=True)).test
    run = await run_burst(server(), test)
    agg = run.aggregates
    assert agg["valid"] is False
    assert agg["invalid_reason"].startswith(
        "3 of 3 replies came back shorter than the output length asked (30 of 48 tokens in all)"
    )
    # Without --fixed-output a short reply is the server's choice (EOS), not a broken run,
    # and the body is the endpoint's own, nothing added.
    plain = build_test(options(tmp_path, endpoint=endpoint)).test
    again = await run_burst(unflagged := server(), plain)
    assert again.aggregates["valid"] is True
    assert again.aggregates["output_length"]["requests_short"] == 3
    path, plain_keys, length = SHAPED[endpoint]
    for request in unflagged.received:
        assert request.path == path and request.body.keys() == plain_keys
        assert request.body[length] == 16 and request.header("x-team") is None


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"extra_body": "[1, 2]"}, "--extra-body must be a JSON object"),
        ({"extra_body": "{top_k: 1}"}, "--extra-body is not JSON"),
        ({"header": ("no-colon",)}, "--header 'no-colon': expected NAME:VALUE"),
        ({"header": ("bad name:1",)}, "expected NAME:VALUE"),
        ({"header": (":x",)}, "--header ':x': expected NAME:VALUE"),
    ],
)
def test_bad_request_flags_are_refused_naming_the_flag(tmp_path, flags, message):
    with pytest.raises(ConfigError, match=message):
        options(tmp_path, **flags)


# --- failures keep the server's request id -----------------------------------------------------


@virtual_deadline(60)
async def test_a_failed_request_keeps_the_servers_request_id(autojump_clock, nursery, tmp_path):
    run = await run_burst(
        BurstServer(nursery=nursery, status=500), build_test(options(tmp_path)).test
    )
    assert [(r.ok, r.status, r.request_id) for r in run.records] == [
        (False, 500, "req-1"),
        (False, 500, "req-2"),
        (False, 500, "req-3"),
    ]
    lines = list(results_document(run)["requests"])
    assert [line["request_id"] for line in lines] == ["req-1", "req-2", "req-3"]


# --- sluice's own queueing and retries are shown -----------------------------------------------


async def run_sim(nursery, app: SimulatorApp, test: LoadTest, *, respect_limits: bool):
    transport = memory_transport(app, nursery)
    config = loadtest_config(RuntimeConfig(), "sim", respect_limits=respect_limits)
    try:
        async with sluice.open_runtime(config, transport=transport) as rt:
            return await run_load(rt, test)
    finally:
        await transport.aclose()


def small(shape, requests: int) -> LoadTest:
    workload = Workload(input_tokens=Lengths("fixed", 4), output_tokens=Lengths("fixed", 2))
    return LoadTest(
        model="sim:sim-small", shape=shape, requests=requests, workload=workload, warmup=0
    )


@virtual_deadline(600)
async def test_respect_limits_shows_queue_wait_retries_and_latency_without_them(
    autojump_clock, nursery
):
    # The first request gets a 429 with a 5 s Retry-After: sluice retries it after the
    # cooldown and holds the next ones in its queue meanwhile.
    config = SimulatorConfig(ttft=0.2, output_tokens=1000, script=("429:retry_after=5",))
    test = small(OpenLoop.at_rate(10, arrival="constant"), 10)
    run = await run_sim(nursery, SimulatorApp(config), test, respect_limits=True)
    first = run.records[0]
    assert first.ok and first.attempts == 2
    agg = run.aggregates
    waits = agg["sluice_waits"]
    assert waits["requests_retried"] == 1 and waits["attempts"] == 11
    assert waits["requests_queued"] >= 9
    # From the winning attempt's admission every request is the server's own 0.2 s.
    assert agg["ttft_after_queue_s"]["max"] == pytest.approx(0.2)
    assert agg["ttft_s"]["max"] > 4.0 and agg["queue_wait_s"]["max"] > 4.0
    summary = format_summary(results_document(run))
    assert "retries: 1 of 10 requests retried, 11 attempts in all" in summary
    assert f"queue wait in sluice: {waits['requests_queued']} of 10 requests waited" in summary
    assert "without sluice's waits (from the last attempt's admission): TTFT p50 200.0 ms" in (
        summary
    )
    assert "1 requests retried (11 attempts)" in render_report(results_document(run))
    # The default run: the 429 is a measured failure, nothing queued, no such lines.
    plain = await run_sim(nursery, SimulatorApp(config), test, respect_limits=False)
    assert plain.aggregates["sluice_waits"]["requests_queued"] == 0
    assert "queue wait in sluice" not in format_summary(results_document(plain))


# --- the load as sent, and a run that fell behind ----------------------------------------------


@virtual_deadline(3600)
async def test_the_offered_rate_is_measured_and_a_run_past_saturation_is_invalid(
    autojump_clock, nursery
):
    # Two generation slots, each request holding one for 0.1 + 1 / 2 s: the server completes
    # at most 2 / 0.6 = 3.3 requests/s.
    config = SimulatorConfig(ttft=0.1, tokens_per_second=2, output_tokens=1000, capacity=2)
    kept = await run_sim(
        nursery,
        SimulatorApp(config),
        small(OpenLoop.at_rate(2, arrival="constant"), 60),
        respect_limits=False,
    )
    load = kept.aggregates["load"]
    assert load["scheduled_rate_per_s"] == 2 and load["offered_rate_per_s"] == pytest.approx(2)
    assert load["saturated"] is False and kept.aggregates["valid"] is True
    over = await run_sim(
        nursery,
        SimulatorApp(config),
        small(OpenLoop.at_rate(6, arrival="constant"), 120),
        respect_limits=False,
    )
    agg = over.aggregates
    load = agg["load"]
    # Everything went out on time: the client kept its schedule, the server did not keep up.
    assert load["offered_rate_per_s"] == pytest.approx(6) and agg["client_lag_s"]["max"] < 1e-9
    assert load["saturated"] is True and load["completed_rate_per_s"] < 4.5
    assert load["latency_growth"] > 1.5
    assert agg["valid"] is False
    assert agg["invalid_reason"].startswith("saturated: requests completed at")
    assert "/s while 6/s were sent, and the median latency grew" in agg["invalid_reason"]
    summary = format_summary(results_document(over))
    assert "load: scheduled 6/s, sent 6/s, completed" in summary and "SATURATED" in summary
    assert "scheduled 6/s, sent 6.00/s, completed" in render_report(results_document(over))


@virtual_deadline(60)
async def test_a_closed_loop_reports_its_sending_rate_but_is_not_judged(autojump_clock, nursery):
    config = SimulatorConfig(ttft=0.25, output_tokens=1000)
    run = await run_sim(
        nursery, SimulatorApp(config), small(ClosedLoop(1), 5), respect_limits=False
    )
    load = run.aggregates["load"]
    assert load["scheduled_rate_per_s"] is None and load["saturated"] is None
    assert load["offered_rate_per_s"] == pytest.approx(4, rel=1e-6)  # one every 0.25 s


# --- the aggregates CSV ------------------------------------------------------------------------


@virtual_deadline(60)
async def test_the_aggregates_csv_has_counts_error_rate_goodput_and_validity(
    autojump_clock, nursery, tmp_path
):
    config = SimulatorConfig(ttft=0.1, output_tokens=1000, script=("500", "ok", "ok", "ok"))
    run = await run_sim(
        nursery, SimulatorApp(config), small(ClosedLoop(1), 4), respect_limits=False
    )
    rows = list(csv.reader(io.StringIO(aggregates_csv(results_document(run)))))
    sections: dict[str, dict[str, str]] = {}
    current = None
    for row in rows:
        if not row:
            current = None
        elif current is None and len(row) == 2 and row[1] == "value":
            current = sections.setdefault(row[0], {})
        elif current is not None:
            current[row[0]] = row[1]
    assert rows[0][0] == "metric" and {"ttft_s", "e2e_s", "queue_wait_s"} <= {
        r[0] for r in rows if r
    }
    assert sections["validity"] == {
        "valid": "False",
        "invalid_reason": run.aggregates["invalid_reason"],
    }
    assert (sections["requests"]["total"], sections["requests"]["failed"]) == ("4", "1")
    assert float(sections["requests"]["error_rate"]) == 0.25
    assert sections["goodput"]["good"] == "3" and sections["goodput"]["met"] == "True"
    assert {"offered_rate_per_s", "saturated"} <= set(sections["load"])
    assert sections["sluice_waits"]["attempts"] == "4"


# --- compare ------------------------------------------------------------------------------------


def document(p50: float, ci: tuple[float, float], **config) -> dict:
    return {
        "format": FORMAT,
        "valid": True,
        "config": {"model": "sim:sim-small", "rate": 5.0, "workload": {"output_tokens": "64"}}
        | config,
        "aggregates": {"ttft_s": {"p50": p50, "ci95": {"p50": list(ci)}}},
    }


def test_compare_calls_no_winner_inside_overlapping_intervals():
    a = document(0.100, (0.095, 0.105))
    close = compare(a, document(0.102, (0.097, 0.108)))[0]
    assert close.verdict == "within CI" and close.change == pytest.approx(0.02)
    apart = compare(a, document(0.120, (0.114, 0.126)))[0]
    assert apart.verdict == "worse"
    assert compare(a, document(0.080, (0.075, 0.085)))[0].verdict == "better"


def test_compare_warns_naming_the_settings_that_differ(tmp_path, capsys):
    a = document(0.1, (0.09, 0.11))
    b = document(0.105, (0.095, 0.115), rate=10.0, wall_s=3.0)
    b["config"]["workload"] = {"output_tokens": "128"}
    assert config_differences(a, b) == [
        ("rate", 5.0, 10.0),
        ("workload.output_tokens", "64", "128"),
    ]
    paths = [tmp_path / "a.json", tmp_path / "b.json"]
    for path, doc in zip(paths, (a, b), strict=True):
        path.write_bytes(orjson.dumps(doc))
    assert main(["loadtest", "compare", *map(str, paths)]) == 0
    out = capsys.readouterr().out
    assert "within CI" in out
    assert (
        "warning: B was not run with the same configuration as A, so a difference may come "
        "from the test rather than the endpoint: rate: 5.0 in A, 10.0 in B; "
        "workload.output_tokens: '64' in A, '128' in B"
    ) in out
    old = tmp_path / "old.json"
    old.write_bytes(orjson.dumps(a | {"format": "sluice-loadtest/1"}))
    assert main(["loadtest", "compare", str(old), str(paths[0])]) == 2
    assert "written by an older sluice (format sluice-loadtest/1" in capsys.readouterr().err


# --- the flags on the real command line ---------------------------------------------------------


def test_the_request_flags_work_from_the_command_line(tmp_path, capsys):
    # The in-process simulator honours ignore_eos and min_tokens: every reply is as long as
    # asked, and the flags reach the results' config (the header's value never does).
    out = tmp_path / "r.json"
    code = main(
        [
            *("loadtest", "--model", "sim:sim-small", "--concurrency", "1", "--requests", "3"),
            *("--output-tokens", "5", "--max-lag", "2s", "--out", str(out), "--fixed-output"),
            *("--header", "x-team:search", "--header", "x-run:42"),
            *("--extra-body", '{"top_k": 20}'),
        ]
    )
    assert code == 0, capsys.readouterr().err
    document = orjson.loads(out.read_bytes())
    config = document["config"]
    assert config["header_names"] == ["x-team", "x-run"] and config["fixed_output"] is True
    assert config["extra_body"] == {"top_k": 20}
    assert document["aggregates"]["output_length"]["requests_exact"] == 3
    assert b"search" not in out.read_bytes()
    assert main(["loadtest", "--model", "sim:sim-small", "--rate", "1", "--requests", "1",
                 "--extra-body", "[]", "--out", str(out)]) == 2  # fmt: skip
    assert "--extra-body must be a JSON object" in capsys.readouterr().err


def test_compare_of_many_marks_a_best_run_only_outside_the_others_intervals():
    from sluice._jobs.loadtest.compare import format_many

    runs = [document(0.100, (0.095, 0.105)), document(0.098, (0.094, 0.103))]
    row = next(line for line in format_many(runs, ["1", "2"]).splitlines() if "TTFT" in line)
    assert "*" not in row  # 98 ms inside 100 ms's interval: no winner
    runs.append(document(0.050, (0.048, 0.052)))
    row = next(line for line in format_many(runs, ["1", "2", "3"]).splitlines() if "TTFT" in line)
    assert row.endswith("50.00 ms (-50.0 %) *")


def test_judging_replies_that_took_no_time_does_not_divide_by_zero():
    from sluice._jobs.loadtest.metrics import Tracker
    from sluice._jobs.loadtest.saturation import judge

    instant = [
        Tracker(i, i * 0.1, i * 0.1).finish(i * 0.1, input_tokens=1, output_tokens=1, ok=True)
        for i in range(30)
    ]
    verdict = judge(instant, 3.0)
    assert verdict.growth is None and not verdict.saturated
