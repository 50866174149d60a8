"""``sluice loadtest --endpoint completions`` (issue 35): what chat got, completions get too.

Events that one network read completed share its arrival time, so a server writing four
events per write 100 ms apart gives four 25 ms ITL samples per write (exact under the
autojump clock over memory streams; on loopback equal within a write and at the median
within a millisecond of the gap the server really left, with each event framed as its own
HTTP chunk too). ``--extra-body``, ``--header`` and
``--fixed-output`` reach the server and the verdict on short replies as for chat; a run
without them sends the body it always sent; a key in a header never shows in the results or
on the console, even when the server quotes it back. Embeddings carry ``--extra-body`` and
``--header`` through the runtime; ``--fixed-output`` is refused for them.

The server is the suite's own (:class:`~tests.sse_bursts.BurstServer`, text completions).
"""

from __future__ import annotations

import contextlib
import queue
import threading
from typing import TYPE_CHECKING, Any

import httpx
import orjson
import pytest
import trio

import sluice
from sluice._cli import main
from sluice._errors import ConfigError
from sluice._jobs.loadtest import (
    LoadTest,
    LoadTestOptions,
    build_test,
    run_load,
)
from sluice._jobs.loadtest.endpoints import DirectTarget
from sluice.transport import FastTransport

from .helpers import virtual_deadline
from .sse_bursts import (
    KEY,
    BurstServer,
    assert_loopback_gaps_shared,
    assert_write_gaps_shared,
    burst_test,
)
from .sse_bursts import runtime_config as config

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

SPACING, PER_WRITE, WRITES = 0.1, 4, 4
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
    records = run.records
    assert [r.request_id for r in records] == ["req-1", "req-2", "req-3"]
    # The transport noted the HTTP phases, as for chat: one connection, kept alive.
    assert [r.http_reused for r in records] == [False, True, True]
    assert [r.http_receive for r in records] == [pytest.approx(0.05 + 3 * SPACING)] * 3


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
    assert_loopback_gaps_shared(run, server, 2)


# --- what each request carries ------------------------------------------------------------------


@virtual_deadline(60)
async def test_extra_body_headers_and_fixed_output_reach_the_server(
    autojump_clock, nursery, tmp_path
):
    server = BurstServer(nursery=nursery, completions=True)  # 16 words: exactly what is asked
    test = build_test(
        options(
            tmp_path,
            extra_body='{"top_k": 20, "stream_options": {"continuous_usage_stats": true}}',
            header=("x-team:search", "X-Trace: abc 1", "authorization: Bearer not-this"),
            fixed_output=True,
        )
    ).test
    run = await run_completions(server, test)
    assert len(server.received) == 3
    for request in server.received:
        body = request.body
        assert body["top_k"] == 20 and body["max_tokens"] == 16 and body["prompt"]
        # Merged as chat's extra_body is: a nested object adds to the one it meets.
        assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
        assert body["ignore_eos"] is True and body["min_tokens"] == 16
        assert request.header("x-team") == "search" and request.header("x-trace") == "abc 1"
        # As for chat, --header never replaces the credential.
        assert request.header("authorization") == f"Bearer {KEY}"
    assert run.aggregates["valid"] is True
    assert run.aggregates["output_length"]["requests_exact"] == 3


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


@virtual_deadline(60)
async def test_fixed_output_marks_a_run_with_short_replies_invalid_with_the_count(
    autojump_clock, nursery, tmp_path
):
    # A server that ignores ignore_eos and min_tokens: 10 words of the 16 asked.
    test = build_test(options(tmp_path, fixed_output=True)).test
    short = BurstServer(nursery=nursery, reply_words=10, completions=True)
    run = await run_completions(short, test)
    agg = run.aggregates
    assert agg["valid"] is False
    assert agg["invalid_reason"].startswith(
        "3 of 3 replies came back shorter than the output length asked (30 of 48 tokens in all)"
    )
    # Without --fixed-output a short reply is the server's choice (EOS), not a broken run.
    plain = build_test(options(tmp_path)).test
    short = BurstServer(nursery=nursery, reply_words=10, completions=True)
    again = await run_completions(short, plain)
    assert again.aggregates["valid"] is True
    assert again.aggregates["output_length"]["requests_short"] == 3


# --- a key in a header stays out of everything written ------------------------------------------


@contextlib.contextmanager
def served_in_a_thread(server: BurstServer) -> Iterator[str]:
    """``server`` on a loopback port in a thread of its own (the command runs its own trio
    loop); yields its base URL and stops it when the block ends."""
    started: queue.Queue[tuple[int, trio.CancelScope, trio.lowlevel.TrioToken]] = queue.Queue()

    async def serve() -> None:
        async with trio.open_nursery() as nursery:
            port = await nursery.start(server.serve_tcp)
            started.put((port, nursery.cancel_scope, trio.lowlevel.current_trio_token()))

    thread = threading.Thread(target=trio.run, args=(serve,), daemon=True)
    thread.start()
    port, scope, token = started.get(timeout=30)
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        trio.from_thread.run_sync(scope.cancel, trio_token=token)
        thread.join(30)


# Completions are sent by the load tester itself, chat by the runtime (its ProviderActor
# masks what the call's own headers carried).
@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_a_key_in_a_header_never_shows_in_the_results_or_on_the_console(tmp_path, capsys, endpoint):
    secret = "sk-upstream-5f3a9c"
    # A proxy that fails every request and quotes the header back in its error.
    completions = endpoint == "completions"
    server = BurstServer(completions=completions, status=401, echo_header="x-upstream-key")
    out = tmp_path / "r.json"
    with served_in_a_thread(server) as url:
        code = main(
            [
                *("loadtest", "--endpoint", endpoint, "--model", "sim:m", "--base-url", url),
                *("--api-key", KEY),
                *("--concurrency", "1", "--requests", "2", "--warmup", "0", "--out", str(out)),
                *("--header", f"x-upstream-key: Bearer {secret}", "--header", "x-team:search"),
            ]
        )
    shown = capsys.readouterr()
    assert code != 0, shown  # every request failed: an invalid run
    assert [r.header("x-upstream-key") for r in server.received] == [f"Bearer {secret}"] * 2
    document = orjson.loads(out.read_bytes())
    assert document["config"]["header_names"] == ["x-upstream-key", "x-team"]
    errors = [r["error"] for r in document["requests"]]
    assert errors == ["scripted failure for ********"] * 2
    written = [path for path in tmp_path.iterdir() if path.is_file()]
    assert len(written) >= 3  # the results, the records, the CSVs
    for text in (shown.out, shown.err, *(path.read_text() for path in written)):
        assert secret not in text and KEY not in text


# --- embeddings: the body and the headers, not the output length ---------------------------------


@virtual_deadline(60)
async def test_embeddings_carry_the_extra_body_and_headers_through_the_runtime(
    autojump_clock, tmp_path
):
    seen: list[httpx.Request] = []

    async def server(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        body = orjson.loads(request.content)
        data = [{"object": "embedding", "index": i, "embedding": [0.5]}
                for i, _ in enumerate(body["input"])]  # fmt: skip
        reply = {"object": "list", "data": data, "model": body["model"],
                 "usage": {"prompt_tokens": 4, "total_tokens": 4}}  # fmt: skip
        return httpx.Response(200, json=reply)

    flags = {"endpoint": "embeddings", "extra_body": '{"dimensions": 8, "user": "lt"}'}
    test = build_test(options(tmp_path, **flags, header=("x-team:search",))).test
    async with sluice.open_runtime(
        config("https://api.example.test/v1"), transport=httpx.MockTransport(server)
    ) as rt:
        run = await run_load(rt, test)
    assert run.aggregates["requests"]["ok"] == 3 and len(seen) == 3
    for request in seen:
        body = orjson.loads(request.content)
        assert (body["dimensions"], body["user"]) == (8, "lt") and body["input"]
        assert "ignore_eos" not in body and "min_tokens" not in body
        assert request.headers["x-team"] == "search"


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"fixed_output": True, "endpoint": "embeddings"}, "--fixed-output does not apply to "
         "--endpoint embeddings: an embedding has no output length"),
    ],
)  # fmt: skip
def test_the_flags_are_refused_where_they_do_not_apply(tmp_path, flags, message):
    with pytest.raises(ConfigError, match=message):
        options(tmp_path, **flags)
