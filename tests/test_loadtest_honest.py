"""``sluice loadtest`` and ``sluice sim`` tell the truth (issue 15): failing runs are invalid,
429s are measured rather than waited out, output paths are checked before the run, Ctrl-C
keeps what was measured, and ``sim`` drains on the first Ctrl-C and exits on the second.

The CLI tests run the real command (in-process, or as a subprocess where signals are sent)
against the simulator over loopback on the real clock, and assert behaviour, never timing.
What depends on timing (queue waits, the sweep's verdicts) runs under the autojump clock over
in-memory HTTP, with exact assertions.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
from typing import TYPE_CHECKING

import httpx
import orjson
import pytest

import sluice
from sluice._cli import main
from sluice._cli.loadtest import format_summary
from sluice._config import RuntimeConfig
from sluice._jobs.loadtest import (
    Lengths,
    LoadTest,
    OpenLoop,
    SweepPlan,
    Workload,
    loadtest_config,
    run_load,
    run_sweep,
)
from sluice._jobs.loadtest.results import results_document
from sluice.simulator import SimulatorApp, SimulatorConfig

from .helpers import SLUICE, memory_transport, sim_process, virtual_deadline

if TYPE_CHECKING:
    from collections.abc import Iterator

MODEL = "sim:sim-small"
TIMEOUT = 60


@pytest.fixture(autouse=True)
def no_ambient_config(monkeypatch):
    monkeypatch.delenv("SLUICE_CONFIG", raising=False)


def loadtest(*args: str) -> int:
    return main(["loadtest", "--model", MODEL, *args])


# --- honest exit codes ---------------------------------------------------------------------


def test_a_run_past_the_error_rate_exits_1_and_says_why(tmp_path, capsys):
    out = tmp_path / "r.json"
    with sim_process("--rate-500", "1") as url:
        code = loadtest(
            *("--base-url", url, "--api-key", "sk-test", "--rate", "50", "--arrival", "constant"),
            *("--requests", "10", "--output-tokens", "2", "--max-lag", "2s", "--warmup", "0"),
            *("--out", str(out)),
        )
    printed = capsys.readouterr()
    assert code == 1, printed.err
    document = orjson.loads(out.read_bytes())
    assert document["valid"] is False
    assert document["invalid_reason"].startswith("10 of 10 requests failed (100.0%)")
    assert "--max-error-rate" in document["invalid_reason"]
    assert "INVALID RUN: 10 of 10 requests failed" in printed.out
    assert document["aggregates"]["requests"]["statuses"] == {"500": 10}


def test_the_error_rate_allowed_is_a_flag(tmp_path, capsys):
    out = tmp_path / "r.json"
    with sim_process("--fault-script", str(script(tmp_path, ["500", "ok", "ok", "ok"]))) as url:
        base = ["--base-url", url, "--api-key", "sk-test", "--concurrency", "1"]
        base += ["--requests", "4", "--output-tokens", "2", "--warmup", "0", "--out", str(out)]
        base += ["--max-lag", "2s"]  # about the error rate: a busy machine's lag is not
        assert loadtest(*base, "--max-error-rate", "0.25") == 0
    document = orjson.loads(out.read_bytes())
    assert document["valid"] is True and document["aggregates"]["requests"]["failed"] == 1
    capsys.readouterr()
    assert loadtest("--rate", "5", "--requests", "5", "--max-error-rate", "2", "--out",
                    str(out)) == 2  # fmt: skip
    assert "--max-error-rate must be a fraction from 0 to 1" in capsys.readouterr().err


def script(tmp_path, directives):
    path = tmp_path / "faults.txt"
    path.write_text("# the first requests, in arrival order\n" + "\n".join(directives) + "\n")
    return path


async def run_against(app, nursery, test, *, respect_limits=False):
    transport = memory_transport(app, nursery)
    config = loadtest_config(RuntimeConfig(), "sim", respect_limits=respect_limits)
    try:
        async with sluice.open_runtime(config, transport=transport) as rt:
            return await run_load(rt, test)
    finally:
        await transport.aclose()


@virtual_deadline(600)
async def test_a_429_is_a_measured_error_not_a_wait_in_sluices_queue(autojump_clock, nursery):
    # The first request is refused with a 5 s Retry-After; the next ones, every 0.1 s, must go
    # straight out (no cooldown in sluice's queue) and see the server's own 0.2 s TTFT.
    config = SimulatorConfig(ttft=0.2, output_tokens=1000, script=("429:retry_after=5",))
    test = LoadTest(
        model=MODEL,
        shape=OpenLoop.at_rate(10, arrival="constant"),
        requests=10,
        workload=Workload(input_tokens=Lengths("fixed", 4), output_tokens=Lengths("fixed", 2)),
        warmup=0,
    )
    run = await run_against(SimulatorApp(config), nursery, test)
    first, *rest = run.records
    assert (first.ok, first.status, first.queue_wait) == (False, 429, 0.0)
    assert all(r.ok and r.queue_wait == 0.0 for r in rest)
    assert [round(r.ttft, 9) for r in rest] == [0.2] * 9
    assert run.aggregates["requests"]["error_rate"] == pytest.approx(0.1)
    # With --respect-limits the same 429 pauses the queue: what the default run must not do.
    kept = await run_against(SimulatorApp(config), nursery, test, respect_limits=True)
    assert max(r.queue_wait for r in kept.records) > 1.0


# --- the sweep says when it found no saturation ---------------------------------------------


@virtual_deadline(3600)
async def test_a_sweep_that_never_saturates_says_so(autojump_clock, nursery):
    app = SimulatorApp(SimulatorConfig(ttft=0.05, output_tokens=1000))
    transport = memory_transport(app, nursery)
    config = loadtest_config(RuntimeConfig(), "sim", respect_limits=False)
    template = LoadTest(
        model=MODEL,
        shape=OpenLoop.at_rate(1),
        duration=10,
        workload=Workload(input_tokens=Lengths("fixed", 4), output_tokens=Lengths("fixed", 2)),
    )
    async with sluice.open_runtime(config, transport=transport) as rt:
        result = await run_sweep(rt, template, SweepPlan(rates=(2.0, 4.0)))
    await transport.aclose()
    document = results_document(result.best.run, sweep=result)
    summary = format_summary(document)
    assert "saturation rate: no saturation found: every rate up to 4/s was sustained" in summary
    assert "sweep higher rates" in summary


# --- outputs checked before the run ----------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d: (d / "file.txt" / "r.json", None), "file.txt is a file"),
        (lambda d: (d, None), "is a folder; give a file name"),
        (lambda d: (d / "r.json", d / "r.json"), "is given for two outputs"),
        (lambda d: (d / "r.json", d / "file.txt" / "r.html"), "file.txt is a file"),
    ],
)
def test_an_unwritable_output_is_refused_before_the_run(tmp_path, make, message):
    (tmp_path / "file.txt").write_text("x")
    out, report = make(tmp_path)
    args = [SLUICE, "loadtest", "--model", MODEL, "--rate", "1", "--requests", "1000"]
    args += ["--out", str(out)] + (["--report", str(report)] if report else [])
    # 1000 requests at 1/s would take 17 minutes: returning at all shows nothing was sent.
    done = subprocess.run(args, capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("sluice: error: ") and message in lines[0]
    assert done.stdout == "" and "Traceback" not in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file.txt"]


# --- Ctrl-C keeps what was measured ----------------------------------------------------------


def start_loadtest(url: str, out, *extra: str) -> subprocess.Popen[str]:
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


def test_ctrl_c_writes_the_partial_results_marked_interrupted(tmp_path):
    out = tmp_path / "r.json"
    with sim_process("--ttft", "0.3") as url:
        proc = start_loadtest(url, out)
        wait_for(proc.stderr, "sluice loadtest:")  # the first progress line: it is sending
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 130, stderr
    assert "stopping: no new requests" in stderr and "Traceback" not in stderr
    document = orjson.loads(out.read_bytes())
    assert document["interrupted"] == "drained" and document["valid"] is False
    assert "interrupted" in document["invalid_reason"]
    records = document["requests"]
    assert 0 < len(records) < 2000
    # Drained: the requests in flight finished, so every one sent is there, and ok.
    assert all(r["ok"] for r in records)
    assert sorted(r["index"] for r in records) == list(range(len(records)))
    lines = (tmp_path / "r.requests.jsonl").read_bytes().splitlines()
    assert len(lines) == len(records) + 1  # and the warm-up request, marked
    assert "INTERRUPTED (drained)" in stdout


def test_a_second_ctrl_c_cancels_the_requests_in_flight_and_still_writes(tmp_path):
    out = tmp_path / "r.json"
    with sim_process("--ttft", "30") as url:
        proc = start_loadtest(url, out, "--warmup", "0")
        wait_for(proc.stderr, "sluice loadtest:")
        proc.send_signal(signal.SIGINT)
        wait_for(proc.stderr, "stopping")
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 130, stderr
    document = orjson.loads(out.read_bytes())
    assert document["interrupted"] == "cancelled"
    records = document["requests"]
    # Nothing could finish (30 s to first token): every request sent is one Cancelled record.
    assert records and all(r["error_type"] == "Cancelled" for r in records)
    assert sorted(r["index"] for r in records) == list(range(len(records)))


# --- sim: Ctrl-C drains, twice exits; the port is checked ----------------------------------


@contextlib.contextmanager
def started_sim(*flags: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``sluice sim`` in a subprocess (killed at the end if still running) and its URL."""
    with subprocess.Popen(
        [SLUICE, "sim", "--port", "0", *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            assert proc.stdout is not None
            banner = proc.stdout.readline()
            assert "listening on " in banner, banner
            yield proc, banner.split("listening on ")[1].strip()
        finally:
            proc.kill()
            proc.wait()


def open_stream(url: str, client: httpx.Client):
    request = client.build_request(
        "POST",
        f"{url}/chat/completions",
        json={
            "model": "sim-small",
            "stream": True,
            "messages": [{"role": "user", "content": "hi"}],
        },
    )
    response = client.send(request, stream=True)
    lines = response.iter_lines()
    assert next(lines).startswith("data: ")  # the head and the first chunk are here
    return response, lines


def test_sim_first_ctrl_c_drains_the_requests_under_way(tmp_path):
    with started_sim("--tps", "4", "--output-tokens", "6") as (proc, url):
        with httpx.Client(timeout=TIMEOUT) as client:
            response, lines = open_stream(url, client)
            proc.send_signal(signal.SIGINT)
            wait_for(proc.stderr, "stopping: no new connections")
            rest = [line for line in lines if line]
            response.close()
            assert rest[-1] == "data: [DONE]"  # the stream under way ran to its end
            with pytest.raises(httpx.ConnectError):
                httpx.get(f"{url}/models", timeout=5)
        assert proc.wait(timeout=TIMEOUT) == 130


def test_sim_second_ctrl_c_exits_at_once(tmp_path):
    flags = ("--tps", "0.05", "--output-tokens", "6", "--drain", "600")
    with started_sim(*flags) as (proc, url), httpx.Client(timeout=TIMEOUT) as client:
        response, lines = open_stream(url, client)
        proc.send_signal(signal.SIGINT)
        wait_for(proc.stderr, "stopping")
        proc.send_signal(signal.SIGINT)
        # A drain of 600 s, a stream of 100 s: returning at all shows it did not wait.
        assert proc.wait(timeout=TIMEOUT) == 130
        assert proc.stderr is not None
        assert "exiting now" in proc.stderr.read()
        with pytest.raises(httpx.HTTPError):
            list(lines)
        response.close()


@pytest.mark.parametrize("port", ["70000", "-1"])
def test_sim_refuses_a_port_out_of_range(capsys, port):
    assert main(["sim", "--port", port]) == 2
    err = capsys.readouterr().err
    assert err.startswith("sluice: error: ") and "1-65535" in err


def test_sim_refuses_a_bad_fault_script(tmp_path, capsys):
    assert main(["sim", "--fault-script", str(script(tmp_path, ["ok", "teapot"]))]) == 2
    err = capsys.readouterr().err
    assert err.startswith("sluice: error: bad simulator setting: script[1]")


def test_sim_takes_every_fault_and_quota_option(tmp_path):
    flags = ["--fault-script", str(script(tmp_path, ["529", "ok"])), "--rpm", "2"]
    flags += ["--tokens-per-chunk", "3", "--output-tokens", "7"]
    with sim_process(*flags) as url:
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
        with httpx.Client(timeout=TIMEOUT) as client:
            first = client.post(f"{url}/chat/completions", json=body)
            second = client.post(f"{url}/chat/completions", json=body)
            third = client.post(f"{url}/chat/completions", json=body)
            fourth = client.post(f"{url}/chat/completions", json=body)
            health = client.get(url.removesuffix("/v1") + "/health")
    assert first.status_code == 529
    assert second.status_code == 200
    chunks = [
        orjson.loads(line[6:]) for line in second.text.splitlines() if line.startswith("data: {")
    ]
    texts = [c["choices"][0]["delta"].get("content") for c in chunks if c["choices"]]
    assert [t for t in texts if t] and [len(t.split()) for t in texts if t] == [3, 3, 1]
    # The 529 used no quota (a fault answers before admission): the third is the second
    # admitted, the fourth is over --rpm 2.
    assert third.status_code == 200
    assert fourth.status_code == 429 and fourth.headers["x-ratelimit-limit-requests"] == "2"
    assert health.status_code == 200 and health.json() == {"status": "ok"}
