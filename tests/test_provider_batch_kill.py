"""The real ``sluice batch --via provider`` process killed with SIGKILL at each step of a
batch's life, then resumed: one output line per input line, one create per batch.

A ``sluice sim`` subprocess serves the batch API over loopback; its delay knobs hold each
step open long enough for the kill to land inside it (the create answers only seconds after
the batch exists; a batch takes seconds to run; results trickle out at a set byte rate).
Where the kill landed is read from the journal and the output, never from hooks in sluice.
Its counters (GET /sim/stats) show the creates per batch content: a duplicate paid job would
be a second create of the same lines. Real clock; the tests assert outcomes, not timing.
"""

from __future__ import annotations

import signal
import subprocess
import time

import httpx
import orjson
import pytest

from .helpers import SLUICE, count_lines, sim_process, start_batch, whole_lines

TIMEOUT = 60
LINES = 300
PER_BATCH = 100


@pytest.fixture(autouse=True)
def no_ambient_config(monkeypatch):
    monkeypatch.delenv("SLUICE_CONFIG", raising=False)
    monkeypatch.setenv("SLUICE_LEDGER_DB", "off")


def write_input(path, n=LINES):
    path.write_bytes(
        b"".join(
            orjson.dumps(
                {
                    "custom_id": f"req-{i}",
                    "method": "POST",
                    "url": "/v1/chat/completions",
                    "body": {
                        "model": "sim:sim-small",
                        "messages": [{"role": "user", "content": f"line {i}"}],
                        "max_tokens": 8,
                    },
                }
            )
            + b"\n"
            for i in range(n)
        )
    )
    return path


def args(source, out, url):
    return [
        str(source),
        "-o",
        str(out),
        "--resume",
        "--via",
        "provider",
        "--poll-interval",
        "0.1",
        "--model",
        "sim:sim-small",
        "--base-url",
        url,
        "--api-key",
        "sk-test",
        "--batch-size",
        str(PER_BATCH),
    ]


def journal(out):
    path = out.with_name("out.batches.jsonl")
    if not path.exists():
        return []
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.endswith(b"}")]


def stats(url):
    return httpx.get(f"{url}/sim/stats").json()


def wait_until(proc, ready, what):
    deadline = time.monotonic() + TIMEOUT
    while not ready():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"never reached: {what}"
        time.sleep(0.01)


def kill(proc):
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == -signal.SIGKILL


def resume_and_check(source, out, url, batches):
    done = subprocess.run(
        [SLUICE, "batch", *args(source, out, url)], capture_output=True, timeout=TIMEOUT
    )
    assert done.returncode == 0, done.stderr.decode()
    got = whole_lines(out)
    assert sorted(o["custom_id"] for o in got) == sorted(f"req-{i}" for i in range(LINES))
    assert all(o["error"] is None for o in got)
    counted = stats(url)
    assert counted["duplicate_creates"] == 0
    assert counted["batches_created"] == batches
    fingerprints = {
        k: n for k, n in counted["creates_by_metadata"].items() if "sluice_fingerprint" in k
    }
    assert len(fingerprints) == batches and set(fingerprints.values()) == {1}
    return done


def sim(*flags):
    return sim_process("--batch-max-requests", str(PER_BATCH), *flags)


def started(out):
    return lambda: any(r["t"] == "file" for r in journal(out))


def test_kill_after_the_upload_before_its_answer(tmp_path):
    # The file is stored at the provider, its id never reached the journal and no create was
    # sent: the resume uploads again (the orphan file costs nothing) and creates each batch once.
    source, out = write_input(tmp_path / "in.jsonl"), tmp_path / "out.jsonl"
    with sim("--batch-upload-delay", "2", "--batch-time", "0.2") as url:
        proc = start_batch(*args(source, out, url))
        wait_until(proc, lambda: stats(url)["files_uploaded"] == 1, "the first upload")
        kill(proc)
        kinds = [r["t"] for r in journal(out)]
        assert kinds[-1] == "intent" and "file" not in kinds
        assert stats(url)["batches_created"] == 0
        resume_and_check(source, out, url, batches=3)


def test_kill_after_the_upload_while_the_create_is_unanswered(tmp_path):
    # The batch exists at the provider, its create's answer not yet given: the journal has
    # the intent and the file id, no batch id. The resume finds the batch by fingerprint.
    source, out = write_input(tmp_path / "in.jsonl"), tmp_path / "out.jsonl"
    with sim("--batch-create-delay", "2", "--batch-time", "0.2") as url:
        proc = start_batch(*args(source, out, url))
        wait_until(proc, lambda: stats(url)["batches_created"] == 1, "the first create")
        kill(proc)
        kinds = [r["t"] for r in journal(out)]
        assert kinds[-2:] == ["intent", "file"] and "batch" not in kinds
        resume_and_check(source, out, url, batches=3)


def test_kill_while_polling(tmp_path):
    source, out = write_input(tmp_path / "in.jsonl"), tmp_path / "out.jsonl"
    with sim("--batch-time", "3") as url:
        proc = start_batch(*args(source, out, url))
        ids = lambda: sum(r["t"] == "batch" for r in journal(out))  # noqa: E731
        wait_until(proc, lambda: ids() == 3, "three batches created")
        kill(proc)
        assert count_lines(out) == 0
        resume_and_check(source, out, url, batches=3)


def test_kill_while_downloading(tmp_path):
    source, out = write_input(tmp_path / "in.jsonl"), tmp_path / "out.jsonl"
    # About 600 bytes a result line: a batch's results take a few seconds to come.
    with sim("--batch-time", "0.1", "--batch-download-rate", "30000") as url:
        proc = start_batch(*args(source, out, url))
        wait_until(proc, lambda: 10 < count_lines(out) < LINES - 10, "lines being merged")
        kill(proc)
        assert count_lines(out) < LINES
        resume_and_check(source, out, url, batches=3)


def test_ctrl_c_leaves_the_batches_running_and_cancel_stops_them(tmp_path):
    source, out = write_input(tmp_path / "in.jsonl"), tmp_path / "out.jsonl"
    with sim("--batch-time", "30") as url:
        proc = start_batch(*args(source, out, url))
        ids = lambda: sum(r["t"] == "batch" for r in journal(out))  # noqa: E731
        wait_until(proc, lambda: ids() == 3, "three batches created")
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=TIMEOUT)
        assert proc.returncode == 130, stderr.decode()
        assert b"batch interrupted" in stdout
        assert stats(url)["cancels"] == 0  # still running at the provider
        assert not any(r["t"] == "done" for r in journal(out))

        model = ["--model", "sim:sim-small", "--base-url", url, "--api-key", "sk-test"]
        cancelled = subprocess.run(
            [SLUICE, "batch", "--cancel", str(out), *model], capture_output=True, timeout=TIMEOUT
        )
        assert cancelled.returncode == 0, cancelled.stderr.decode()
        assert b"cancelling 3 batches" in cancelled.stdout
        assert stats(url)["cancels"] == 3

        assert count_lines(out) == 0  # --resume merges them (their lines go again)
