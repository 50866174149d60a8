"""``sluice loadtest --endpoint completions`` (issue 35): what chat got, completions get too.

Events that one network read completed share its arrival time, so a server writing four
events per write 100 ms apart gives four 25 ms ITL samples per write (exact under the
autojump clock over memory streams; within a millisecond at the median on loopback, with
each event framed as its own HTTP chunk too). ``--extra-body``, ``--header`` and
``--fixed-output`` reach the server and the verdict on short replies as for chat; a run
without them sends the body it always sent; a key in a header never shows in the results or
on the console, even when the server quotes it back. Embeddings carry ``--extra-body`` and
``--header`` through the runtime; ``--fixed-output`` is refused for them.

The server is the suite's own (:class:`~tests.sse_bursts.BurstServer`, text completions).
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any

import pytest
import trio

import sluice
from sluice._jobs.loadtest import (
    LoadTest,
    LoadTestOptions,
    build_test,
    run_load,
)
from sluice._jobs.loadtest.endpoints import DirectTarget
from sluice.transport import FastTransport

from .helpers import virtual_deadline
from .sse_bursts import KEY, BurstServer, assert_write_gaps_shared, burst_test
from .sse_bursts import runtime_config as config

if TYPE_CHECKING:
    from pathlib import Path

SPACING, PER_WRITE, WRITES = 0.1, 4, 4
TOKEN_GAP = SPACING / PER_WRITE
URL = "http://burst.test/v1"


@pytest.fixture(autouse=True)
def no_ambient_config(monkeypatch):
    monkeypatch.delenv("SLUICE_CONFIG", raising=False)


def completions_test(requests: int) -> LoadTest:
    return burst_test(requests, "completions")


def options(tmp_path: Path, **flags: Any) -> LoadTestOptions:
    base: dict[str, Any] = {"model": "t:m", "out": tmp_path / "r.json", "concurrency": "1"}
    base |= {"requests": 3, "warmup": "0", "output_tokens": "16", "input_tokens": "3"}
    return LoadTestOptions(**(base | {"endpoint": "completions"} | flags))


async def run_completions(server: BurstServer, test: LoadTest):
    """``test`` against ``server`` over memory streams (``server.nursery`` serves them)."""
    transport = FastTransport(open_stream=server.open_stream)
    async with sluice.open_runtime(config(URL), transport=transport) as rt:
        return await run_load(rt, test, direct=DirectTarget(URL, "m", KEY))


def bursts(chunk_per_event: bool, nursery: trio.Nursery | None = None) -> BurstServer:
    """Four text-completions events per write, a write every 100 ms."""
    return BurstServer(
        writes=WRITES,
        per_write=PER_WRITE,
        spacing=SPACING,
        completions=True,
        chunk_per_event=chunk_per_event,
        nursery=nursery,
    )


# --- one stamp per network read -----------------------------------------------------------------


@pytest.mark.parametrize("chunk_per_event", [False, True], ids=["one-chunk", "chunk-per-event"])
@virtual_deadline(60)
async def test_tokens_of_one_read_split_its_gap_exactly(autojump_clock, nursery, chunk_per_event):
    server = bursts(chunk_per_event, nursery)
    run = await run_completions(server, completions_test(3))
    assert_write_gaps_shared(run, server, 3)
    assert [r.request_id for r in run.records] == ["req-1", "req-2", "req-3"]


@pytest.mark.parametrize("chunk_per_event", [False, True], ids=["one-chunk", "chunk-per-event"])
async def test_over_loopback_each_token_gets_its_share_of_the_write_gap(chunk_per_event):
    server = bursts(chunk_per_event)
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(server.serve_tcp)
            url = f"http://127.0.0.1:{port}/v1"
            async with sluice.open_runtime(config(url)) as rt:
                run = await run_load(rt, completions_test(2), direct=DirectTarget(url, "m", KEY))
            nursery.cancel_scope.cancel()
    itls = [gap for record in run.records for gap in record.itls]
    assert all(r.ok for r in run.records) and len(itls) == 2 * PER_WRITE * (WRITES - 1)
    # Per-event stamps gave three samples in four of microseconds; one stamp per read none.
    assert min(itls) > TOKEN_GAP / 2, itls
    assert statistics.median(itls) == pytest.approx(TOKEN_GAP, abs=0.001)


# --- what each request carries ------------------------------------------------------------------


@virtual_deadline(60)
async def test_a_run_without_the_flags_sends_the_body_it_always_sent(
    autojump_clock, nursery, tmp_path
):
    server = BurstServer(nursery=nursery, completions=True)
    await run_completions(server, build_test(options(tmp_path, requests=1)).test)
    (request,) = server.received
    assert list(request.body) == ["model", "prompt", "max_tokens", "stream", "stream_options"]
    assert request.body | {"prompt": None} == {
        "model": "m",
        "prompt": None,
        "max_tokens": 16,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    assert request.header("authorization") == f"Bearer {KEY}"
