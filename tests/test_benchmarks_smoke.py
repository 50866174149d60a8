"""The overhead benchmark runs end to end against the in-process simulator and reports sanely."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from benchmarks._open_loop import Response
from benchmarks.gateway import add_comparisons, interleaved

ROOT = Path(__file__).resolve().parent.parent


def test_overhead_benchmark_runs_against_the_simulator() -> None:
    command = [sys.executable, "-m", "benchmarks.overhead", "--sim"]
    command += ["--calls", "20", "--concurrency", "4", "--repeat", "1"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
    lines = done.stdout.decode().strip().splitlines()
    assert len(lines) == 1, lines
    report = orjson.loads(lines[0])
    assert report["errors"] == 0, report["first_errors"]
    assert report["ratio"] > 0
    assert report["sluice_cpu_s_per_1k"] > 0 and report["bare_cpu_s_per_1k"] > 0
    assert report["calls"] == 20 and report["concurrency"] == 4 and report["chunks"] == 20
    assert report["server"] == "in-process sim"
    assert report["texts_match"] is True


def _run_benchmark(*args: str, timeout: float = 60) -> dict[str, Any]:
    command = [sys.executable, "-m", *args]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, timeout=timeout, check=False)
    assert done.returncode == 0, (
        done.stdout.decode(errors="replace")[-2000:] + done.stderr.decode(errors="replace")[-2000:]
    )
    lines = done.stdout.decode().strip().splitlines()
    assert len(lines) == 1, lines
    report: dict[str, Any] = orjson.loads(lines[0])
    return report


def test_limiter_benchmark_never_exceeds_its_window() -> None:
    report = _run_benchmark(
        "benchmarks.limiter",
        *("--cycles", "300", "--concurrency", "10", "--keys", "1,10"),
        *("--limit", "10", "--per", "1", "--windows", "2", "--ttft", "0.01"),
    )
    assert [r["keys"] for r in report["actor"]["runs"]] == [1, 10]
    for run in report["actor"]["runs"]:
        assert run["admissions_per_s"] > 0 and run["cpu_us_per_admission"] > 0
        assert run["held_after"] == 0
    sat = report["saturation"]
    assert sat["window_exceeded"] is False
    assert sat["max_admitted_in_any_window"] <= 10
    assert sat["server_max_in_any_window"] <= 10
    assert sat["admitted_in_windows"] > 0 and sat["utilisation"] > 0.5
    assert sat["calls_finished"] == sat["calls"] == sat["calls_ok"] + sat["calls_failed"]
    assert sat["held_after"] == 0 and sat["timed_out"] is False


def test_limiter_benchmark_over_redis_reports_each_process_count(redis_url) -> None:
    report = _run_benchmark(
        "benchmarks.limiter",
        *("--store", redis_url, "--processes", "1,2", "--cycles", "200", "--concurrency", "5"),
    )
    runs = report["redis"]["runs"]
    assert [r["processes"] for r in runs] == [1, 2]
    for run in runs:
        assert run["admissions"] == 200
        assert run["admissions_per_s"] > 0 and run["client_cpu_us_per_admission"] > 0
        # One script run per admission; settlements ride along or are batched.
        assert 1.0 <= run["script_runs_per_admission"] < 1.5


def test_chaos_benchmark_ends_every_call_once() -> None:
    report = _run_benchmark(
        "benchmarks.chaos",
        *("--calls", "60", "--concurrency", "12", "--levels", "0,0.3"),
        *("--ttft", "0.005", "--tokens-per-second", "0", "--max-seconds", "30"),
    )
    assert report["ok"] is True
    levels = report["levels"]
    assert [(lv["fault_rate"], lv["mode"]) for lv in levels] == [
        (0.0, "fail_fast"),
        (0.0, "wait"),
        (0.3, "fail_fast"),
        (0.3, "wait"),
    ]
    assert all(lv["requests_per_call"] >= 1 for lv in levels)
    clean, faulty = levels[0], levels[2]
    assert clean["completed"] == 60 and clean["failed"] == 0 and clean["retries"] == 0
    for level in (clean, faulty):
        assert level["finished"] == 60 and level["ended_twice"] == 0
        assert level["completed"] + level["failed"] == 60
        assert level["leak_free"] is True, level["held_after"]
        assert level["results_not_matching_the_common_text"] == 0
    assert faulty["server_requests"] > 60  # faults happened and were retried


# -- overhead (every side), open_streams, import_time ------------------------------------------


def _run_json(*args: str, timeout: float = 120) -> dict:
    """Run ``python -m <args>`` from the repository root; its one JSON line on stdout."""
    done = subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]
    lines = done.stdout.decode().strip().splitlines()
    assert len(lines) == 1, lines
    parsed: dict[Any, Any] = orjson.loads(lines[0])
    return parsed


def test_batch_pacing_benchmark_runs_a_batch_against_a_slow_simulator() -> None:
    report = _run_json(
        "benchmarks.batch_pacing",
        *("--lines", "40", "--rpm", "2400", "--ttft", "0.3", "--max-error", "1"),
    )
    assert report["ok"] is True
    (run,) = report["runs"]
    assert (run["ok"], run["failed"], run["output_lines"]) == (40, 0, 40)
    assert run["ideal_s"] == 1.0 and run["schedule_s"] == 0.3
    assert run["elapsed_s"] >= 0.3  # every reply waited for its first chunk


def test_overhead_benchmark_measures_every_side_on_paced_streams() -> None:
    import importlib.util

    has_aiohttp = importlib.util.find_spec("aiohttp") is not None
    report = _run_json(
        "benchmarks.overhead",
        *("--sim", "--calls", "16", "--concurrency", "8", "--repeat", "1", "--warmup", "4"),
        *("--chunks", "4", "--itl-ms", "2", "--gc", "tuned"),
    )
    assert report["errors"] == 0, report["first_errors"]
    assert report["gc"] == "tuned"  # every side, the aiohttp child included, runs it
    assert report["texts_match"] is True and report["timed_out"] is False
    assert report["chunks"] == 4 and report["itl_ms"] == 2 and report["concurrency"] == 8
    for side in ("sluice", "sluice_httpx", "bare"):
        assert report[f"{side}_cpu_s_per_1k"] > 0, side
    assert report["ratio"] > 0 and report["ratio_httpx"] > 0
    if has_aiohttp:
        assert report["sides"] == ["bare", "sluice", "sluice_httpx", "aiohttp"]
        assert report["aiohttp_cpu_s_per_1k"] > 0 and report["ratio_aiohttp"] > 0
        assert report["aiohttp"] and len(report["rounds"]["aiohttp"]) == 1
    else:
        assert report["aiohttp_cpu_s_per_1k"] is None and report["ratio_aiohttp"] is None
        assert report["aiohttp_skipped"]


def test_overhead_benchmark_selects_sides() -> None:
    import pytest

    from benchmarks.overhead import parse_args

    a = parse_args(["--sim", "--only", "sluice_httpx,bare"])
    assert a.sides == ["bare", "sluice_httpx"]  # always in the canonical order
    assert parse_args(["--sim", "--only", "both"]).sides == ["bare", "sluice"]
    with pytest.raises(SystemExit):
        parse_args(["--sim", "--only", "sluice,nope"])
    assert parse_args(["--sim", "--api", "aio"]).sides[-1] == "sluice_aio"
    assert parse_args(["--sim", "--only", "both", "--api", "sync"]).sides == [
        "bare",
        "sluice",
        "sluice_sync",
    ]
    with pytest.raises(SystemExit):
        parse_args(["--sim", "--only", "sluice_aio"])  # a door's side needs its --api
    assert parse_args(["--sim", "--only", "both", "--observability"]).sides == [
        "bare",
        "sluice",
        "sluice_observed",
        "sluice_metrics",
        "sluice_noop_tracing",
    ]
    assert "sluice_metrics" not in parse_args(["--sim"]).sides  # only when asked


def test_overhead_benchmark_splits_observability_into_its_parts() -> None:
    report = _run_json(
        "benchmarks.overhead",
        *("--sim", "--calls", "16", "--concurrency", "4", "--repeat", "2", "--warmup", "4"),
        *("--only", "sluice", "--observability", "--count-calls", "8"),
    )
    assert report["errors"] == 0, report["first_errors"]
    sides = ["sluice", "sluice_observed", "sluice_metrics", "sluice_noop_tracing"]
    assert report["sides"] == sides
    # each round in two blocks per side (ABCD DCBA); the ratios' spread and block pairs beside
    assert report["blocks"] == 2
    for key in ("metrics", "noop_tracing", "observed"):
        low, high = report[f"{key}_ratio_spread"]
        assert 0 < low <= high, key
        assert report[f"{key}_ratio_pooled"] > 0 and report[f"{key}_ratio_of_blocks"] > 0, key
    # the counts a busy machine does not blur, per sluice side
    counts = report["counts_per_call"]
    assert set(counts) == set(sides)
    assert all(c["python_calls"] > 0 and c["tasks_spawned"] >= 2 for c in counts.values())
    assert set(report["python_calls_ratio"]) == set(sides[1:])
    assert all("met_by_counts" in goal for goal in report["observability_goals"].values())
    for key in ("metrics_ratio", "noop_tracing_ratio", "observed_ratio"):
        assert report[key] > 0, key
    assert len(report["metrics_ratio_per_round"]) == 2
    assert len(report["noop_tracing_ratio_per_round"]) == 2
    # the SDK's replayed share, and sluice's own part of the SDK-traced side beside it
    assert report["otel_sdk_replay_ms_per_call"] > 0 and report["otel_sdk_replay_share"] > 0
    assert report["observed_ratio_without_sdk"] < report["observed_ratio_of_rounds"]
    # sluice's own observer work, replayed: a few microseconds a call, metrics or no-op tracing
    replayed = report["observer_replay_us_per_call"]
    assert set(replayed) == {"off", "metrics", "noop_tracing"}
    assert all(0 < us < 1000 for us in replayed.values()), replayed
    assert report["metrics_own_ratio"] > 0 and report["noop_tracing_own_ratio"] > 0
    goals = report["observability_goals"]
    assert {k: v["ceiling"] for k, v in goals.items()} == {
        "metrics_ratio": 1.03,
        "noop_tracing_ratio": 1.03,
        "observed_ratio": 1.05,
    }


def test_overhead_benchmark_can_open_the_plain_runtime_after_the_observed_one() -> None:
    """The order-effect control: the same run with the plain runtime opened last."""
    report = _run_json(
        "benchmarks.overhead",
        *("--sim", "--calls", "8", "--concurrency", "4", "--repeat", "1", "--warmup", "4"),
        *("--only", "sluice", "--observed", "--observe", "off", "--plain-last"),
    )
    assert report["errors"] == 0, report["first_errors"]
    assert report["sides"] == ["sluice", "sluice_observed"]
    assert report["plain_opened"] == "last" and report["observe"] == "off"
    assert report["observed_ratio"] > 0


def test_overhead_benchmark_measures_the_front_doors_next_to_the_trio_api() -> None:
    for api in ("aio", "sync"):
        report = _run_json(
            "benchmarks.overhead",
            *("--sim", "--calls", "16", "--concurrency", "4", "--repeat", "1", "--warmup", "4"),
            *("--only", "both", "--api", api),
        )
        door = f"sluice_{api}"
        assert report["errors"] == 0, report["first_errors"]
        assert report["sides"] == ["bare", "sluice", door] and report["door"] == door
        assert report["texts_match"] is True
        assert report["door_cpu_s_per_1k"] > 0 and report["ratio_door"] > 0


def test_open_streams_benchmark_holds_every_stream_open_at_once() -> None:
    report = _run_json(
        "benchmarks.open_streams",
        *("--sim", "--streams", "40", "--chunks", "3", "--ttft-ms", "300", "--itl-ms", "300"),
        *("--warmup", "2", "--rounds", "2", "--sample-interval", "0.05", "--quiet"),
    )
    assert report["completed"] == 40 and report["errors"] == 0, report["first_errors"]
    assert report["not_finished"] == 0 and report["timed_out"] is False
    assert report["max_streaming"] == 40 and report["max_admitted"] == 40
    assert report["kb_per_open_stream"] is not None
    assert report["rss_at_max_streaming_mb"] >= report["rss_before_mb"] > 0
    assert report["completed_all_rounds"] == 80 and report["errors_all_rounds"] == 0
    for one in report["rounds"]:
        assert one["left_in_flight"]["calls"] == 0 and one["left_in_flight"]["admitted"] == 0
    limits = report["rlimit_nofile"]
    assert limits["soft"] >= limits["soft_before"] and limits["soft"] <= limits["hard"]
    assert report["timeline"] and len(report["timeline"][0]) == len(report["timeline_columns"])


def test_import_time_benchmark_reports_the_import_and_what_it_loads() -> None:
    report = _run_json("benchmarks.import_time", "--runs", "1", "--top", "3")
    assert report["module"] == "sluice" and report["import_ms"] > 0
    assert len(report["import_ms_runs"]) == 1 and len(report["top_cumulative"]) == 3
    assert all(row["module"] != "sluice" for row in report["top_cumulative"])
    from benchmarks.import_time import HEAVY

    assert set(report["heavy_loaded"]) | set(report["heavy_not_loaded"]) == set(HEAVY)
    assert report["heavy_loaded"] == []
    assert report["sluice_modules_loaded"] == ["sluice"]  # every name loads on first use
    assert isinstance(report["meets_goal"], bool)
    chat = report["chat_path"]
    assert chat["ms"] > 0 and chat["trio_ms"] > 0
    # Each figure is rounded from the unrounded medians: they agree within one rounding step.
    assert abs(chat["over_trio_ms"] - (chat["ms"] - chat["trio_ms"])) <= 0.1 + 1e-9
    assert "sluice._runtime" in chat["sluice_modules_loaded"] and chat["heavy_loaded"] == []
    # The goal is judged by the figure timed in one interpreter, without -X importtime.
    assert chat["trio_ms_without_importtime"] > 0 and chat["over_trio_ms_without_importtime"] > 0
    assert len(chat["over_trio_ms_without_importtime_runs"]) == 1
    assert chat["meets_goal"] is (
        chat["over_trio_ms_without_importtime"] <= chat["goal_over_trio_ms"]
    )
    first = report["first_call"]  # the chat path, then one call over an in-process transport
    assert first["ms"] > first["chat_ms"] > 0 and first["call_ms"] > 0
    assert first["classes"] >= first["chat_classes"] > 0
    assert first["sluice_modules_loaded"] > first["chat_sluice_modules"] > 0
    assert "sluice.transport._pool" in first["loaded_by_the_call"]


def test_request_head_benchmark_times_both_parsers() -> None:
    report = _run_json("benchmarks.request_head", "--runs", "1", "--number", "200")
    assert report["sluice_us"] > 0 and report["h11_us"] > 0 and report["ratio"] > 0


def test_import_time_parser_keeps_only_the_module_subtree() -> None:
    from benchmarks.import_time import chat_rows, import_subtree, parse_importtime, top_level_us

    text = "\n".join(
        [
            "import time: self [us] | cumulative | imported package",
            "import time:       100 |        100 | site",
            "import time:        10 |         10 |     leaf",
            "import time:        20 |         30 |   sluice.inner",
            "import time:         5 |          5 |   other",
            "import time:        40 |         75 | sluice",
            "import time:        30 |         30 |   sluice._messages",
            "import time:        20 |         50 | sluice._runtime",
        ]
    )
    rows = parse_importtime(text)
    assert chat_rows(rows) == rows[1:]  # from sluice's subtree on
    assert top_level_us(chat_rows(rows)) == 125  # import sluice, then what touching loaded
    assert rows[0] == ("site", 100, 100, 0)
    assert rows[1] == ("leaf", 10, 10, 2)
    assert [r[0] for r in import_subtree(rows, "sluice")] == [
        "leaf",
        "sluice.inner",
        "other",
        "sluice",
    ]


def test_batch_benchmark_paces_by_rpm_and_reports_rss_per_file_size() -> None:
    report = _run_json(
        "benchmarks.batch",
        *("--rpm", "3600", "--rpm-lines", "90", "--lines", "100,300", "--max-error", "1"),
    )
    assert report["ok"] is True
    rpm = report["rpm"]
    assert rpm["per_second"] == 60 and rpm["schedule_s"] == 1
    assert rpm["completion_s"] >= 1.0  # the last 30 lines waited for the second second
    assert rpm["run"]["ok"] == 90 and rpm["run"]["one_line_per_input_line"] is True
    small, large = report["unlimited"]["runs"]
    assert (small["lines"], large["lines"]) == (100, 300)
    for run in (small, large):
        assert run["lines_per_s"] > 0 and run["peak_rss_mb"] >= run["rss_before_mb"] > 0
        assert run["run"]["failed"] == 0 and run["run"]["one_line_per_input_line"] is True
    assert report["unlimited"]["rss_growth_mb"] == round(
        large["peak_rss_mb"] - small["peak_rss_mb"], 1
    )


def test_loadtest_client_benchmark_steps_the_rate_up() -> None:
    # A lag limit no step can miss: every step is good, so the rate goes up each time and the
    # last one is the answer (the real limit, 1 ms, is for a quiet machine and the nginx mock).
    report = _run_json(
        "benchmarks.loadtest_client",
        *("--sim", "--start", "20", "--seconds", "0.5", "--max-steps", "2", "--refine", "0"),
        *("--max-lag-ms", "5000", "--chunks", "4"),
    )
    assert report["benchmark"] == "loadtest_client" and report["server"] == "in-process sim"
    assert [step["rate"] for step in report["steps"]] == [20.0, 30.0]
    assert report["max_rate"] == 30.0 and report["limit_reached"] is False
    for step in report["steps"]:
        assert step["sent"] > 0 and step["failed"] == 0 and step["good"] is True
        assert step["lag_p99_ms"] >= step["lag_p50_ms"] >= 0


def test_gateway_benchmark_counts_streams_ending_in_an_error_event_as_errors() -> None:
    # The paced upstream ends every 5th reply with an error event and no [DONE]. Turns run in
    # the order direct then sluice, each a warm-up of 6 requests and a phase of 20, so direct's
    # phase gets upstream replies 7-26, four of which (10, 15, 20, 25) fail.
    report = _run_benchmark(
        "benchmarks.gateway",
        *("--rates", "20", "--duration", "1", "--warmup", "0.3", "--settle", "0.1"),
        *("--workers", "1", "--ttft-ms", "10", "--itl-ms", "5", "--chunks", "5"),
        *("--fail-every", "5", "--max-lag-ms", "1000", "--drain", "5"),
        timeout=120,
    )
    assert report["upstream"]["kind"].startswith("paced")
    assert report["order"] == {"20": ["direct", "sluice-w1"]}
    direct, gateway = report["targets"]["direct"]["20"], report["targets"]["sluice-w1"]["20"]
    assert direct["requests"] == gateway["requests"] == 20
    assert direct["ok"] == 16 and direct["error_kinds"] == {"error event in the stream": 4}
    assert gateway["errors"] >= 4 and gateway["ok"] + gateway["errors"] == 20
    # A paced reply takes at least TTFT + 6 gaps (5 content chunks, then the finish): 40 ms.
    assert direct["p50_ms"] >= 40 and gateway["p50_ms"] >= 40
    assert gateway["added_p50_ms"] == round(gateway["p50_ms"] - direct["p50_ms"], 3)
    # Failed requests count as infinitely slow: with 4 of 20 failed, p99 is no number.
    assert direct["p99_ms"] is None and gateway["added_p99_ms"] is None
    assert gateway["cpu_ms_per_request"] > 0 and direct["upstream_cpu_ms_per_request"] > 0
    assert gateway["generator_cpu_ms_per_request"] > 0
    assert gateway["other_cpu_util"] is not None
    assert gateway["send_lag_p99_ms"] >= gateway["send_lag_p50_ms"] >= 0
    assert report["valid"] is True
    # Errors disqualify a rate from the 5 ms criterion.
    assert report["sluice_max_rate_p99_added_under_5ms"] == {"sluice-w1": None}


def test_gateway_benchmark_marks_the_run_invalid_when_the_generator_lags() -> None:
    command = [sys.executable, "-m", "benchmarks.gateway", "--rates", "20", "--duration", "0.5"]
    command += ["--warmup", "0", "--settle", "0", "--workers", "", "--max-lag-ms", "0"]
    command += ["--ttft-ms", "5", "--itl-ms", "2", "--chunks", "3"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, timeout=60, check=False)
    assert done.returncode == 1, done.stderr.decode(errors="replace")[-2000:]
    report = orjson.loads(done.stdout.decode().strip().splitlines()[-1])
    direct = report["targets"]["direct"]["20"]
    assert direct["errors"] == 0 and direct["ok"] == 10
    assert direct["valid"] is False and "fell behind" in direct["invalid"]
    assert report["valid"] is False


def _reply(chunks: list[bytes], status: bytes = b"200 OK") -> bytes:
    head = b"HTTP/1.1 " + status + b"\r\ntransfer-encoding: chunked\r\n\r\n"
    return head + b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"


_TEXT = b'data: {"choices":[{"delta":{"content":" hi"}}]}\n\n'
_ERROR_EVENT = "error event in the stream"
_USAGE = b'data: {"choices":[],"usage":{"completion_tokens":2,"total_tokens":3}}\n\n'


@pytest.mark.parametrize(
    ("reply", "error", "tokens"),
    [
        (_reply([_TEXT, _TEXT, _USAGE + b"data: [DONE]\n\n"]), None, 2),
        (_reply([_TEXT, _TEXT]), "stream ended without data: [DONE]", None),
        (_reply([_TEXT, b'data: {"error":{"message":"x"}}\n\n']), _ERROR_EVENT, None),
        (_reply([b"event: error\ndata: {}\n\n", b"data: [DONE]\n\n"]), _ERROR_EVENT, None),
        (_reply([_TEXT, b"data: [DONE]\n\n"], b"500 Internal Server Error"), "HTTP 500", None),
        (b"HTTP/1.1 429 Too Many\r\ncontent-length: 2\r\n\r\n{}", "HTTP 429", None),
    ],
)  # fmt: skip
def test_gateway_generator_judges_a_response_the_same_however_it_is_split(
    reply: bytes, error: str | None, tokens: int | None
) -> None:
    for cut in range(1, len(reply)):
        in_two = [reply[:cut], reply[cut:]]
        in_many = [reply[i : i + cut] for i in range(0, len(reply), cut)]
        for pieces in (in_two, in_many):
            response = Response()
            done = [response.feed(p) for p in pieces]
            assert done[-1] and not any(done[:-1]), (cut, pieces)
            assert (response.error, response.usage_tokens) == (error, tokens), (cut, pieces)


def test_gateway_generator_counts_a_close_mid_response_as_an_error() -> None:
    reply = _reply([_TEXT, _USAGE + b"data: [DONE]\n\n"])
    response = Response()
    assert not response.feed(reply[:-20])
    assert response.end_of_file() and response.error == "connection closed mid-response"


def test_gateway_highest_rate_under_5ms_needs_every_lower_rate_valid_and_clean() -> None:
    def phase(p99: float | None, valid: bool = True, errors: int = 0) -> dict[str, Any]:
        return {"p50_ms": 1.0, "p99_ms": p99, "valid": valid, "errors": errors}

    report: dict[str, Any] = {
        "rates": [200.0, 500.0, 1000.0, 2000.0],
        "targets": {
            "direct": {k: phase(10.0) for k in ("200", "500", "1000", "2000")},
            "sluice-w1": {"200": phase(12.0), "500": phase(14.9), "1000": phase(15.0),
                          "2000": phase(11.0)},
            "sluice-w2": {"200": phase(11.0), "500": phase(None, valid=False),
                          "1000": phase(11.0), "2000": phase(11.0)},
            "litellm-w1": {"200": phase(11.0, errors=1), "500": phase(11.0),
                           "1000": phase(11.0), "2000": phase(11.0)},
        },
    }  # fmt: skip
    add_comparisons(report)
    assert report["sluice_max_rate_p99_added_under_5ms"] == {"sluice-w1": 500.0, "sluice-w2": 200.0}
    assert report["targets"]["litellm-w1"]["max_rate_p99_added_under_5ms"] is None
    assert report["targets"]["sluice-w1"]["1000"]["added_p99_ms"] == 5.0
    assert report["targets"]["sluice-w2"]["500"]["added_p99_ms"] is None
    assert report["targets"]["sluice-w2"]["2000"]["added_p99_ms"] == 1.0  # past a failed rate
    assert interleaved(["a", "b", "c"], 0) == ["a", "b", "c"]
    assert interleaved(["a", "b", "c"], 4) == ["b", "c", "a"]


def test_gateway_server_benchmark_measures_sluices_server() -> None:
    report = _run_benchmark(
        "benchmarks.gateway_server", "--rate", "50", "--duration", "0.5", timeout=60
    )
    assert report["sluice"]["errors"] == 0 and report["sluice"]["requests"] == 25
    assert report["sluice"]["cpu_us_per_request"] > 0
    assert "hypercorn" not in report


def test_soak_benchmark_runs_a_short_mixed_load_and_ends_flat() -> None:
    command = [sys.executable, "-m", "benchmarks.soak", "--minutes", "0.05", "--rate", "40"]
    command += ["--sample-every", "1", "--burst", "20", "--burst-every", "1", "--idle-wait", "0"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
    lines = done.stdout.decode().strip().splitlines()
    assert lines[0].split()[:3] == ["t", "phase", "rss_mb"]  # the table
    report = orjson.loads(lines[-1])
    counts = report["counts"]
    assert counts["full"] and counts["abandoned"] and counts["plain"] and counts["burst"]
    assert report["errors"].get("BadRequest", 0) >= counts["failing"] > 0  # the failing mix
    assert report["unexpected"] == []
    assert [s["phase"] for s in report["samples"]][:2] == ["start", "baseline"]
    assert report["samples"][-1]["phase"] == "idle"
    assert report["statistics_zero"] is True
    assert report["tasks_final"] == report["tasks_baseline"]
    assert report["hook_calls"] + report["hook_dropped"] == sum(counts.values())


def test_overhead_benchmark_measures_metrics_and_tracing_in_the_same_run() -> None:
    report = _run_benchmark(
        "benchmarks.overhead", "--sim", "--calls", "20", "--concurrency", "4", "--repeat", "1",
        "--only", "sluice", "--observed", timeout=120,
    )  # fmt: skip
    assert report["sides"] == ["sluice", "sluice_observed"]
    assert report["errors"] == 0 and report["texts_match"] is True
    assert report["sluice_observed_cpu_s_per_1k"] > 0 and report["observed_ratio"] > 0
    # The SDK's own share, from replaying the spans the observed runtime made.
    assert 0 < report["otel_sdk_replay_ms_per_call"] < report["sluice_observed_cpu_s_per_1k"]
    assert report["otel_sdk_replay_share"] > 0


def test_overhead_benchmark_measures_a_model_group_beside_one_provider() -> None:
    report = _run_benchmark(
        "benchmarks.overhead",
        *("--sim", "--calls", "30", "--concurrency", "6", "--repeat", "1"),
        *("--only", "sluice,sluice_group", "--group", "3"),
        timeout=120,
    )
    assert report["errors"] == 0, report["first_errors"]
    assert report["sides"] == ["sluice", "sluice_group"]
    assert report["group_deployments"] == 3
    assert report["sluice_group_cpu_s_per_1k"] > 0 and report["ratio_group"] > 0
    assert report["texts_match"] is True


def test_model_names_benchmark_runs_sluice_serve_and_reports_rss_and_series() -> None:
    report = _run_benchmark(
        "benchmarks.model_names",
        "--names",
        "30",
        "--rounds",
        "1",
        "--warmup",
        "5",
        "--concurrency",
        "4",
        timeout=120,
    )
    assert report["names"] == 30 and report["statuses"] == [{"200": 30}]
    assert report["model_label_values"] == [1, 31] and report["ledger"] == "memory"
    assert report["rss_before_mb"] > 0 and report["rss_after_mb"] > 0
    refused = _run_benchmark(
        "benchmarks.model_names",
        "--names",
        "30",
        "--rounds",
        "1",
        "--warmup",
        "5",
        "--concurrency",
        "4",
        "--models",
        "sim:sim-small",
        "--ledger-file",
        timeout=120,
    )
    assert refused["statuses"] == [{"404": 30}] and refused["ledger"] == "file"
    assert refused["model_label_values"] == [1, 1]


def test_embed_many_benchmark_stays_within_its_token_window() -> None:
    report = _run_benchmark(
        "benchmarks.embed_many", *("--texts", "3000", "--tpm", "12000", "--per", "2")
    )
    assert report["in_order"] is True and report["outcomes"] == 3000
    assert report["failed"] == 0 and report["server_429"] == 0
    assert report["within_limit"] is True
    assert report["max_tokens_in_any_window"] <= 12000
    assert report["requests"] >= 3  # 24,000 tokens through a 12,000-token window


def test_call_cost_benchmark_counts_the_actors_steps_per_call() -> None:
    report = _run_json(
        "benchmarks.call_cost", "--sim", "--calls", "40", "--concurrency", "4", "--profile"
    )
    steps = report["task_steps_per_call_by_function"]
    assert steps["_supervise"] == 3.0  # start, admitted, answered
    assert "_one" not in steps  # a mapped call's outcome is handed over by its Supervisor task
    assert report["tasks_spawned_per_call"] >= 2
    assert report["python_calls_per_call"] > 0 and report["cpu_ms_per_call"] > 0


def test_call_cost_times_the_observer_in_the_runtime_and_replayed() -> None:
    """``--observer-times`` reports each observer method's median per call, in the runtime
    and replayed through a fresh observer with the same parts on; each side saw every
    method (a method never timed would be 0)."""
    report = _run_json(
        "benchmarks.call_cost",
        *("--sim", "--calls", "30", "--concurrency", "4", "--observe", "both"),
        "--observer-times",
    )
    times = report["observer_us_per_call"]
    for side in ("in_situ", "replayed"):
        found = times[side]
        methods = {"call_started", "attempt_started", "attempt_ended", "call_ended"}
        assert set(found) == {*methods, "sum"}
        assert all(found[name] > 0 for name in found), (side, found)
        # The SDK's span is made at the call's end: that method is the dearest on each side.
        assert found["call_ended"] == max(v for k, v in found.items() if k != "sum"), found
