"""``--server-metrics``: the Prometheus text format parsed, and a real endpoint scraped during
a run (a plain HTTP server in the test, over loopback, counting its requests)."""

from __future__ import annotations

import http.server
import threading

import orjson
import pytest

from sluice._cli import main
from sluice._jobs.loadtest.prometheus import ScrapeLog, parse_prometheus, summarize_scrapes

TEXT = """\
# HELP vllm:num_requests_running Number of requests running.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m",engine="0"} 3.0
# TYPE http_requests_total counter
http_requests_total{path="/v1/chat",quote="a \\"b\\" c\\\\d"} 1027 1700000000000
latency_seconds_bucket{le="0.1"} 4
latency_seconds_sum 1.5
latency_seconds_count 9
temperature NaN
limit +Inf
"""


def test_the_text_format_is_parsed():
    samples = parse_prometheus(TEXT)
    assert samples['vllm:num_requests_running{model_name="m",engine="0"}'] == 3.0
    assert samples['http_requests_total{path="/v1/chat",quote="a "b" c\\d"}'] == 1027
    assert samples["latency_seconds_sum"] == 1.5 and samples["latency_seconds_count"] == 9
    assert not any("bucket" in key for key in samples)
    assert samples["limit"] == float("inf") and samples["temperature"] != samples["temperature"]


@pytest.mark.parametrize(
    ("text", "message"),
    [("requests_total", "has no value"), ('x{a="b} 1', "not closed"), ("x one", "not a number")],
)
def test_a_bad_line_is_named(text, message):
    with pytest.raises(ValueError, match=f"line 1: .*{message}"):
        parse_prometheus(text)


def test_the_summary_gives_changes_and_rates():
    log = ScrapeLog("http://x/metrics", 1.0)
    log.scrapes = [(0.0, {"c_total": 10.0, "g": 2.0}), (2.0, {"c_total": 30.0, "g": 1.0})]
    summary = summarize_scrapes(log)
    assert summary["series"]["c_total"] == {
        "first": 10.0,
        "last": 30.0,
        "change": 20.0,
        "per_second": 10.0,
        "min": 10.0,
        "max": 30.0,
    }
    assert summary["series"]["g"]["change"] == -1.0 and summary["scrapes"] == 2


class _Metrics(http.server.BaseHTTPRequestHandler):
    scrapes = 0

    def do_GET(self):
        if self.path != "/metrics":
            self.send_error(404)
            return
        type(self).scrapes += 1
        body = f"# TYPE scrapes_total counter\nscrapes_total {type(self).scrapes}\n".encode()
        self.send_response(200)
        self.send_header("content-type", "text/plain; version=0.0.4")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def metrics_url():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Metrics)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    finally:
        server.shutdown()
        server.server_close()


def test_a_run_scrapes_the_server_and_reports_the_series(tmp_path, metrics_url, monkeypatch):
    monkeypatch.delenv("SLUICE_CONFIG", raising=False)
    out, report = tmp_path / "r.json", tmp_path / "r.html"
    code = main(
        [
            *("loadtest", "--model", "sim:sim-small", "--rate", "20", "--requests", "10"),
            *("--output-tokens", "2", "--max-lag", "2s", "--out", str(out)),
            *("--report", str(report), "--server-metrics", metrics_url),
            *("--server-metrics-interval", "0.1"),
        ]
    )
    assert code == 0
    server = orjson.loads(out.read_bytes())["server_metrics"]
    assert server["url"] == metrics_url and server["failures"] == 0
    assert server["scrapes"] >= 2  # one at the start of the run, then every 0.1 s
    series = server["series"]["scrapes_total"]
    assert series["last"] - series["first"] == server["scrapes"] - 1
    assert "Server metrics" in report.read_text() and "scrapes_total" in report.read_text()


def test_an_unreachable_metrics_endpoint_is_refused_before_the_run(tmp_path, capsys):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = main(
        [
            *("loadtest", "--model", "sim:sim-small", "--rate", "1", "--requests", "1000"),
            *("--out", str(tmp_path / "r.json")),
            *("--server-metrics", f"http://127.0.0.1:{port}/metrics"),
        ]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("sluice: error: cannot scrape --server-metrics") and err.count("\n") == 1
    assert not (tmp_path / "r.json").exists()
