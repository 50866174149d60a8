"""``sluice loadtest`` at its edges (issue 28): every output path is checked before the run, a
file that is not a loadtest's own output is replaced only with --overwrite, SIGTERM keeps what
was measured like Ctrl-C, numbers that cannot bound a run are refused, and the schedule's
clock starts once the runtime is warm.

The real command runs (in-process, or as a subprocess where signals are sent or a fresh
process matters) against the simulator over loopback on the real clock.
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import time
from pathlib import Path

import orjson
import pytest

from sluice._cli import main
from sluice._jobs.loadtest.results import own_output, side_files

from .helpers import SLUICE, sim_process

MODEL = "sim:sim-small"
TIMEOUT = 60


@pytest.fixture(autouse=True)
def no_ambient_config(monkeypatch):
    monkeypatch.delenv("SLUICE_CONFIG", raising=False)


def refused(args: list[str]) -> subprocess.CompletedProcess[str]:
    """Run a loadtest of 1,000 requests at 1/s (17 minutes): returning at all shows it
    stopped before sending; it must exit 2 with one error line and no traceback."""
    argv = [SLUICE, "loadtest", "--model", MODEL, "--rate", "1", "--requests", "1000", *args]
    started = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("sluice: error: "), done.stderr
    assert done.stdout == "" and "Traceback" not in done.stderr
    assert time.monotonic() - started < 30
    return done


# --- output paths, before the run ----------------------------------------------------------


def test_an_output_folder_that_cannot_be_made_is_refused_at_once(tmp_path):
    done = refused(["--out", "/proc/nope/x.json"])
    assert "/proc/nope/x.json" in done.stderr and "cannot" in done.stderr
    out = tmp_path / "r.json"
    done = refused(["--out", str(out), "--report", "/proc/nope/r.html"])
    assert "/proc/nope/r.html" in done.stderr
    assert list(tmp_path.iterdir()) == []  # the results were not written either


@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]])
def test_a_device_is_never_an_output(overwrite):
    done = refused(["--out", "/dev/full", *overwrite])
    assert "/dev/full is not a regular file" in done.stderr
    assert Path("/dev/full").is_char_device()


@pytest.mark.parametrize("which", ["out", "requests.jsonl", "requests.csv", "report"])
def test_a_file_that_is_not_a_loadtest_output_is_kept(tmp_path, which):
    out, report = tmp_path / "r.json", tmp_path / "r.html"
    target = {"out": out, "report": report, **side_files(out)}[which]
    target.write_bytes(b"my notes: do not lose these\n")
    done = refused(["--out", str(out), "--report", str(report)])
    assert f"{target} already exists and is not a loadtest result (28 bytes)" in done.stderr
    assert "--overwrite to replace it" in done.stderr
    assert target.read_bytes() == b"my notes: do not lose these\n"
    assert [p.name for p in tmp_path.iterdir()] == [target.name]


def run_quick(out: Path, *extra: str) -> int:
    head = ["loadtest", "--model", MODEL, "--rate", "50", "--requests", "4"]
    return main([*head, "--output-tokens", "3", "--max-lag", "5s", "--out", str(out), *extra])


def test_overwrite_replaces_a_file_that_is_not_a_loadtest_output(tmp_path, capsys):
    out = tmp_path / "r.json"
    out.write_text("notes")
    side_files(out)["requests.csv"].write_text("a,b\n1,2\n")
    assert run_quick(out, "--overwrite") == 0, capsys.readouterr().err
    assert orjson.loads(out.read_bytes())["aggregates"]["requests"]["ok"] == 4
    assert side_files(out)["requests.csv"].read_text().startswith("index,warmup,")


def test_a_previous_result_is_replaced_without_overwrite(tmp_path, capsys):
    out, report = tmp_path / "r.json", tmp_path / "r.html"
    assert run_quick(out, "--report", str(report)) == 0, capsys.readouterr().err
    first = out.read_bytes()
    written = [out, report, *side_files(out).values()]
    assert all(own_output(path) for path in written)
    time.sleep(1 - time.time() % 1)  # to the next whole second: a new started_at
    assert run_quick(out, "--report", str(report)) == 0, capsys.readouterr().err
    again = out.read_bytes()
    assert orjson.loads(again)["started_at"] != orjson.loads(first)["started_at"]
    # An empty file holds nothing to lose.
    empty = tmp_path / "empty.json"
    empty.touch()
    assert run_quick(empty) == 0


def test_what_counts_as_a_loadtest_output(tmp_path):
    cases = {
        "results.json": (b'{\n  "format": "sluice-loadtest/1",\n  "x": 1}', True),
        "other.json": (b'{"format": "something-else/1"}', False),
        "batch.jsonl": (b'{"custom_id": "a", "response": {}}\n', False),
        "empty": (b"", True),
        "records.jsonl": (b'{"index":0,"scheduled":0.0}\n', True),
        "notes.csv": (b"index,name\n", False),
    }
    for name, (content, own) in cases.items():
        (tmp_path / name).write_bytes(content)
        assert own_output(tmp_path / name) is own, name
    assert own_output(tmp_path / "missing") is False


# --- numbers that cannot bound a run ------------------------------------------------------

FIVE = ["--rate", "1", "--requests", "5"]
SCRAPED = [*FIVE, "--server-metrics", "http://127.0.0.1:9/metrics"]


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--rate", "1", "--duration", "inf"], "--duration"),
        (["--rate", "1", "--duration", "nan"], "--duration"),
        (["--rate", "1", "--duration", "-5"], "--duration"),
        (["--rate", "inf", "--duration", "5"], "--rate"),
        (["--rate", "nan", "--duration", "5"], "--rate"),
        (["--rate", "1", "--requests", "5", "--timeout", "inf"], "--timeout"),
        (["--rate", "1", "--requests", "5", "--timeout", "nan"], "--timeout"),
        ([*FIVE, "--arrival", "gamma", "--burstiness", "inf"], "--burstiness"),
        (["--rate", "1", "--requests", "5", "--max-error-rate", "nan"], "--max-error-rate"),
        (["--rate", "1", "--requests", "5", "--prefix-ratio", "inf"], "--prefix-ratio"),
        (["--ramp", "inf:10"], "--ramp"),
        (["--ramp", "2:inf"], "--ramp"),
        (["--sweep", "1,2", "--duration", "inf"], "--duration"),
        ([*SCRAPED, "--server-metrics-interval", "inf"], "--server-metrics-interval"),
    ],
)
def test_a_number_that_cannot_bound_a_run_is_refused(tmp_path, capsys, args, flag):
    out = tmp_path / "r.json"
    code = main(["loadtest", "--model", MODEL, *args, "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("sluice: error: ") and flag in lines[0]
    assert list(tmp_path.iterdir()) == []


# --- SIGTERM keeps what was measured -------------------------------------------------------


def start_loadtest(url: str, out: Path, *extra: str) -> subprocess.Popen[str]:
    args = [SLUICE, "loadtest", "--model", MODEL, "--base-url", url, "--api-key", "sk-test"]
    args += ["--rate", "20", "--arrival", "constant", "--requests", "2000"]
    args += ["--output-tokens", "4", "--max-lag", "1s", "--out", str(out), *extra]
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for(stream, text: str) -> str:
    """Lines of ``stream`` up to the first holding ``text``."""
    seen = ""
    while text not in seen:
        line = stream.readline()
        assert line, f"the stream ended before {text!r}: {seen}"
        seen += line
    return seen


def test_sigterm_writes_the_partial_results_and_exits_143(tmp_path):
    out = tmp_path / "r.json"
    with sim_process("--ttft", "0.3") as url:
        proc = start_loadtest(url, out)
        wait_for(proc.stderr, "sluice loadtest:")  # the first progress line: it is sending
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 143, stderr
    assert "stopping: no new requests (SIGTERM)" in stderr and "Traceback" not in stderr
    document = orjson.loads(out.read_bytes())
    assert document["interrupted"] == "drained" and document["valid"] is False
    assert "interrupted (SIGTERM, drained)" in document["invalid_reason"]
    records = document["requests"]
    assert 0 < len(records) < 2000
    assert all(r["ok"] for r in records)  # drained: the ones in flight finished
    assert sorted(r["index"] for r in records) == list(range(len(records)))
    lines = side_files(out)["requests.jsonl"].read_bytes().splitlines()
    assert len(lines) == len(records) + 1  # and the warm-up request
    assert "INTERRUPTED (drained)" in stdout


def test_a_second_sigterm_cancels_the_requests_in_flight_and_still_writes(tmp_path):
    out = tmp_path / "r.json"
    with sim_process("--ttft", "30") as url:
        proc = start_loadtest(url, out, "--warmup", "0")
        wait_for(proc.stderr, "sluice loadtest:")
        proc.send_signal(signal.SIGTERM)
        wait_for(proc.stderr, "stopping")
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 143, stderr
    document = orjson.loads(out.read_bytes())
    assert document["interrupted"] == "cancelled"
    records = document["requests"]
    assert records and all(r["error_type"] == "Cancelled" for r in records)
    assert sorted(r["index"] for r in records) == list(range(len(records)))


# --- the clock starts when the runtime is warm ----------------------------------------------


def test_the_first_requests_leave_on_time_without_a_warm_up(tmp_path):
    """A fresh process with no warm-up request: starting the provider (its codec, its
    transport, the in-process simulator) took long enough that the requests due meanwhile
    left in one burst, each hundreds of milliseconds late. With the clock started after the
    provider, the first ones leave on time, like the rest."""
    out = tmp_path / "r.json"
    argv = [SLUICE, "loadtest", "--model", MODEL, "--rate", "100", "--arrival", "constant"]
    argv += ["--requests", "40", "--warmup", "0", "--output-tokens", "4", "--max-lag", "5s"]
    done = subprocess.run(
        [*argv, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    assert done.returncode == 0, done.stderr
    records = sorted(orjson.loads(out.read_bytes())["requests"], key=lambda r: r["index"])
    first = [r["lag_s"] for r in records[:10]]
    # The median, not the maximum: one scheduling hiccup on a busy machine is not a burst.
    assert statistics.median(first) < 0.025, [round(x * 1000, 1) for x in first]
