"""The load test's HTTP phases per request (connect, time to headers, receive, connection
reused), as sluice's own transport noted them, through the runtime and into every output.

Exact checks run under the autojump clock over in-memory HTTP to the simulator, with a
connection that takes a known time to open; the CLI check runs the real command against the
in-process simulator on loopback (real clock) and asserts behaviour and file shapes.
"""

from __future__ import annotations

import csv
import io

import orjson
import pytest
import trio
import trio.testing

import sluice
from sluice._cli import main
from sluice._cli.loadtest import format_summary
from sluice._config import RuntimeConfig
from sluice._jobs.loadtest import ClosedLoop, Lengths, LoadTest, Workload, loadtest_config, run_load
from sluice._jobs.loadtest.report import render_report
from sluice._jobs.loadtest.results import results_document
from sluice.simulator import SimulatorApp, SimulatorConfig
from sluice.simulator._server import serve_connection
from sluice.transport import FastTransport

from .helpers import virtual_deadline

MODEL = "sim:sim-small"
CONNECT = 0.05
HTTP_FIELDS = {"http_connect_s", "http_headers_s", "http_receive_s", "http_reused"}


@pytest.fixture(autouse=True)
def no_ambient_config(monkeypatch):
    monkeypatch.delenv("SLUICE_CONFIG", raising=False)


@virtual_deadline(600)
async def test_each_request_carries_its_phases_and_they_add_up_to_its_latency(
    autojump_clock, nursery
):
    app = SimulatorApp(SimulatorConfig(ttft=0.3, tokens_per_second=20, output_tokens=1000))
    opened: list[float] = []

    async def open_stream(host: str, port: int) -> trio.abc.Stream:
        await trio.sleep(CONNECT)  # a handshake of known length
        opened.append(trio.current_time())
        client, server = trio.testing.memory_stream_pair()
        nursery.start_soon(serve_connection, app, server)
        return client

    transport = FastTransport(open_stream=open_stream, trust_env=False)
    test = LoadTest(
        model=MODEL,
        shape=ClosedLoop(concurrency=1),
        requests=3,
        warmup=0,
        workload=Workload(input_tokens=Lengths("fixed", 8), output_tokens=Lengths("fixed", 5)),
    )
    config = loadtest_config(RuntimeConfig(), "sim", respect_limits=False)
    try:
        async with sluice.open_runtime(config, transport=transport) as rt:
            run = await run_load(rt, test)
    finally:
        await transport.aclose()

    first, *rest = run.records
    assert len(opened) == 1
    assert first.http_reused is False
    assert first.http_connect == pytest.approx(CONNECT, abs=1e-9)
    assert all(r.http_reused is True and r.http_connect is None for r in rest)
    for r in run.records:
        assert r.ok and r.ttft is not None
        assert r.http_headers is not None and r.http_receive is not None
        # Nothing else takes virtual time: the request's whole latency is its phases.
        own = (r.http_connect or 0.0) + r.http_headers + r.http_receive
        assert own == pytest.approx(r.e2e, abs=1e-9)
        assert (r.http_connect or 0.0) + r.http_headers <= r.ttft + 1e-9
    agg = run.aggregates
    assert agg["http_reuse"] == {"measured": 3, "reused": 2, "new": 1, "fraction": 2 / 3}
    assert agg["http_connect_s"]["count"] == 1
    assert agg["http_connect_s"]["p50"] == pytest.approx(CONNECT, abs=1e-9)
    assert agg["http_headers_s"]["count"] == agg["http_receive_s"]["count"] == 3

    document = results_document(run)
    assert all(set(r) >= HTTP_FIELDS for r in document["requests"])
    html = render_report(document)
    assert "HTTP connect (new connections)" in html
    assert "2 of 3 requests (66.7 %), 1 opened a connection" in html
    summary = format_summary(document)
    assert "HTTP: connect p50 50.0 ms p99 50.0 ms (1 new)" in summary
    assert "66.7 % reused" in summary


def test_the_cli_writes_the_phases_it_measured_on_loopback(tmp_path, capsys):
    # The in-process simulator listens on loopback: a real connection is opened (and timed)
    # for the first request, and the two after it reuse it.
    out, report = tmp_path / "run.json", tmp_path / "run.html"
    assert main(["loadtest", "--model", MODEL, "--concurrency", "1", "--requests", "3",
                 "--warmup", "0", "--output-tokens", "4", "--out", str(out),
                 "--report", str(report)]) == 0  # fmt: skip
    lines = [orjson.loads(x) for x in (tmp_path / "run.requests.jsonl").read_bytes().splitlines()]
    assert [r["http_reused"] for r in lines] == [False, True, True]
    assert lines[0]["http_connect_s"] > 0
    assert [r["http_connect_s"] for r in lines[1:]] == [None, None]
    for r in lines:
        assert 0 < r["http_headers_s"] <= r["e2e_s"]
        assert r["http_headers_s"] + r["http_receive_s"] <= r["e2e_s"]
    rows = list(csv.DictReader(io.StringIO((tmp_path / "run.requests.csv").read_text())))
    assert set(rows[0]) >= HTTP_FIELDS
    assert [row["http_reused"] for row in rows] == ["False", "True", "True"]
    aggregates = list(csv.reader(io.StringIO((tmp_path / "run.aggregates.csv").read_text())))
    metrics = {row[0]: row for row in aggregates[1:] if row}
    assert {"http_connect_s", "http_headers_s", "http_receive_s"} <= set(metrics)
    assert metrics["fraction"][1] == str(2 / 3)
    document = orjson.loads(out.read_bytes())
    assert document["aggregates"]["http_reuse"]["reused"] == 2
    assert "HTTP connections reused" in report.read_text()
    assert "% reused" in capsys.readouterr().out
