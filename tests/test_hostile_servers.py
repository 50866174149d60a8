"""Hostile and broken servers: every call ends, with an error that names the limit, in bounded
time and memory, and the reply limits hold with no deadline configured.

The servers are scripted on trio lockstep streams behind sluice's own transport (see
:mod:`tests.hostile`), under virtual time, so every time is exact. Retries are allowed (three
attempts) so each test also shows whether its error is retried: timeouts are, broken limits
are not.
"""

from __future__ import annotations

import tracemalloc
from typing import Any

import orjson
import pytest
import trio

import sluice
from sluice import ChatRequest
from sluice._messages import Deadlines
from sluice.actors._provider import ERROR_BODY_WAIT
from sluice.transport import FastTransport, ResponseTimeout

from .helpers import virtual_deadline
from .hostile import PIECE, Behaviour, Hostile, forever, head, hostile_config

MiB = 1024 * 1024


async def call(rt: sluice.Runtime, *, stream: bool = True) -> sluice.CallError:
    """Run one call that must fail; return its error."""
    with pytest.raises(sluice.CallError) as caught:
        await rt.chat(ChatRequest(model="h:m", messages="hi", stream=stream))
    return caught.value


# -- time -----------------------------------------------------------------------------------


async def trickle_head(stream: trio.abc.Stream) -> None:
    """A response head, one byte a second, that never ends."""
    for byte in b"HTTP/1.1 200 OK\r\nx-slow: ":
        await stream.send_all(bytes([byte]))
        await trio.sleep(1)
    while True:
        await stream.send_all(b"a")
        await trio.sleep(1)


def after(delay: float, behaviour: Behaviour) -> Behaviour:
    """``behaviour``, after ``delay`` seconds of silence (a model thinking)."""

    async def delayed(stream: trio.abc.Stream) -> None:
        await trio.sleep(delay)
        await behaviour(stream)

    return delayed


@virtual_deadline(2000)
async def test_the_transport_cuts_off_a_head_trickled_byte_by_byte(autojump_clock, nursery):
    server = Hostile(nursery, after(100, trickle_head))
    transport = FastTransport(open_stream=server.open_stream, trust_env=False)
    start = trio.current_time()
    with pytest.raises(ResponseTimeout) as caught:
        await transport.send("POST", "http://hostile.test/v1/x", (), b"{}")
    # 100 s of thinking are the server's right; then the head must come within 60 s.
    assert str(caught.value) == (
        "the response head was not complete 60 s after its first byte (head_timeout)"
    )
    assert trio.current_time() - start == 160.0
    assert transport.statistics().connections == 0  # closed, not pooled
    await transport.aclose()


async def head_after_interim_responses(stream: trio.abc.Stream) -> None:
    for _ in range(3):
        await stream.send_all(b"HTTP/1.1 102 Processing\r\n")
        await trio.sleep(50)
        await stream.send_all(b"\r\n")
    await stream.send_all(head("application/json") + b"{}")


@virtual_deadline(2000)
async def test_the_head_clock_starts_over_after_each_interim_response(autojump_clock, nursery):
    server = Hostile(nursery, head_after_interim_responses)
    transport = FastTransport(open_stream=server.open_stream, trust_env=False, head_timeout=60)
    response = await transport.send("POST", "http://hostile.test/v1/x", (), b"{}")
    assert response.status == 200 and trio.current_time() == 150.0
    await response.aclose()
    await transport.aclose()


@virtual_deadline(2000)
async def test_a_trickled_head_ends_the_call_without_any_deadline_configured(
    autojump_clock, nursery
):
    server = Hostile(nursery, trickle_head)
    transport = FastTransport(open_stream=server.open_stream, trust_env=False)
    async with sluice.open_runtime(hostile_config(), transport=transport) as rt:
        error = await call(rt)
        ended = trio.current_time()
    # The head_timeout (60 s from the head's first byte) cuts each attempt off, and the
    # timeout is retried like any other (three attempts, 0.5 s and 1 s apart).
    assert isinstance(error, sluice.CallTimeout)
    assert error.timeout_kind == "first_token"
    assert "head_timeout" in error.message
    assert server.requests == 3
    assert ended == 3 * 60 + 0.5 + 1.0
    await transport.aclose()


@virtual_deadline(2000)
async def test_a_silent_server_ends_the_call_without_any_deadline_configured(
    autojump_clock, nursery
):
    async def silent(stream: trio.abc.Stream) -> None:
        await trio.sleep_forever()

    server = Hostile(nursery, silent)
    transport = FastTransport(open_stream=server.open_stream, trust_env=False)
    async with sluice.open_runtime(hostile_config(max_attempts=1), transport=transport) as rt:
        error = await call(rt)
        ended = trio.current_time()
    # No first-token deadline is set: the reply limits' read_idle_timeout stands in.
    assert isinstance(error, sluice.CallTimeout) and error.timeout_kind == "first_token"
    assert error.message == (
        "no reply for 300 s (reply_limits.read_idle_timeout; no first-token deadline is set)"
    )
    assert ended == 300.0
    await transport.aclose()


async def one_event_then_silence(stream: trio.abc.Stream) -> None:
    await stream.send_all(head() + b'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n')
    await trio.sleep_forever()


@virtual_deadline(2000)
async def test_a_stream_gone_silent_ends_at_the_idle_limit(autojump_clock, nursery):
    server = Hostile(nursery, one_event_then_silence)
    transport = FastTransport(open_stream=server.open_stream, trust_env=False)
    cfg = hostile_config(max_attempts=1, read_idle_timeout=45.0)
    async with sluice.open_runtime(cfg, transport=transport) as rt:
        error = await call(rt)
        ended = trio.current_time()
    assert isinstance(error, sluice.CallTimeout)
    assert error.timeout_kind == "idle"
    assert "no progress for 45 s" in error.message
    assert ended == 45.0
    await transport.aclose()


@virtual_deadline(2000)
async def test_the_calls_own_idle_deadline_wins_over_the_reply_limit(autojump_clock, nursery):
    server = Hostile(nursery, one_event_then_silence)
    transport = FastTransport(open_stream=server.open_stream, trust_env=False)
    cfg = hostile_config(max_attempts=1, deadlines=Deadlines(idle=7.0))
    async with sluice.open_runtime(cfg, transport=transport) as rt:
        error = await call(rt)
        ended = trio.current_time()
    assert isinstance(error, sluice.CallTimeout) and error.timeout_kind == "idle"
    assert "reply_limits" not in error.message
    assert ended == 7.0
    await transport.aclose()


async def whole_body_trickle(stream: trio.abc.Stream) -> None:
    await stream.send_all(head("application/json"))
    await stream.send_all(b'{"choices": [')
    await trio.sleep_forever()


@virtual_deadline(2000)
async def test_a_whole_body_that_stalls_ends_without_any_deadline_configured(
    autojump_clock, nursery
):
    server = Hostile(nursery, whole_body_trickle)
    transport = FastTransport(open_stream=server.open_stream, trust_env=False)
    async with sluice.open_runtime(hostile_config(max_attempts=1), transport=transport) as rt:
        error = await call(rt, stream=False)
        ended = trio.current_time()
    assert isinstance(error, sluice.CallTimeout) and error.timeout_kind == "first_token"
    assert error.message == (
        "no reply for 300 s (reply_limits.read_idle_timeout; no first-token deadline is set)"
    )
    assert ended == 300.0
    await transport.aclose()


# -- memory ---------------------------------------------------------------------------------


def endless_line(prefix: bytes) -> Behaviour:
    async def behaviour(stream: trio.abc.Stream) -> None:
        await forever(stream, head() + prefix, b"x" * PIECE)

    return behaviour


@pytest.mark.parametrize(
    ("prefix", "limit", "what"),
    [
        (b"data: ", "max_line_bytes", "an SSE line"),
        (b"", "max_line_bytes", "an SSE line"),  # no field name yet: still one line
        (b": comment ", "max_line_bytes", "an SSE line"),
    ],
)
@virtual_deadline(600)
async def test_an_endless_line_is_refused_at_its_limit_and_not_retried(
    autojump_clock, nursery, prefix, limit, what
):
    server = Hostile(nursery, endless_line(prefix))
    transport = FastTransport(open_stream=server.open_stream, trust_env=False)
    limits: dict[str, Any] = {limit: 2 * MiB}
    cfg = hostile_config(**limits)
    async with sluice.open_runtime(cfg, transport=transport) as rt:
        error = await call(rt)
    assert isinstance(error, sluice.ProtocolError)
    assert error.message == f"{what} is larger than the 2 MiB limit (reply_limits.{limit})"
    assert not error.retryable
    assert server.requests == 1
    assert server.sent <= 2 * MiB + 2 * PIECE
    await transport.aclose()


async def endless_event(stream: trio.abc.Stream) -> None:
    await forever(stream, head(), b"data: " + b"y" * 1000 + b"\n")


@virtual_deadline(600)
async def test_an_event_that_never_closes_is_refused_at_the_event_limit(autojump_clock, nursery):
    server = Hostile(nursery, endless_event)
    transport = FastTransport(open_stream=server.open_stream, trust_env=False)
    cfg = hostile_config(max_event_bytes=1 * MiB)
    async with sluice.open_runtime(cfg, transport=transport) as rt:
        error = await call(rt)
    assert isinstance(error, sluice.ProtocolError) and not error.retryable
    assert error.message == (
        "an SSE event is larger than the 1 MiB limit (reply_limits.max_event_bytes)"
    )
    assert server.requests == 1
    await transport.aclose()


async def endless_ndjson_line(stream: trio.abc.Stream) -> None:
    await forever(stream, head("application/x-ndjson") + b'{"message": "', b"z" * PIECE)


@virtual_deadline(600)
async def test_an_endless_ndjson_line_is_refused_at_its_limit(autojump_clock, nursery):
    server = Hostile(nursery, endless_ndjson_line)
    transport = FastTransport(open_stream=server.open_stream, trust_env=False)
    cfg = hostile_config("ollama", max_line_bytes=1 * MiB)
    async with sluice.open_runtime(cfg, transport=transport) as rt:
        error = await call(rt)
    assert isinstance(error, sluice.ProtocolError) and not error.retryable
    assert "an NDJSON line is larger than the 1 MiB limit" in error.message
    assert server.requests == 1
    await transport.aclose()


@virtual_deadline(600)
async def test_the_default_line_limit_bounds_memory(autojump_clock, nursery):
    """With nothing configured, an endless line stops at 32 MiB, and the client never holds
    much more than that (the 265 MB and growing of the bug report)."""
    server = Hostile(nursery, endless_line(b"data: "))
    transport = FastTransport(open_stream=server.open_stream, trust_env=False)
    tracemalloc.start()
    try:
        async with sluice.open_runtime(hostile_config(), transport=transport) as rt:
            error = await call(rt)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert "larger than the 32 MiB limit (reply_limits.max_line_bytes)" in error.message
    assert server.requests == 1
    assert peak < 80 * MiB  # the line, its one join, and the runtime
    await transport.aclose()


async def endless_json_body(stream: trio.abc.Stream) -> None:
    await forever(stream, head("application/json") + b'{"pad": "', b"p" * PIECE)


@virtual_deadline(600)
async def test_an_endless_whole_body_is_refused_at_the_body_limit(autojump_clock, nursery):
    server = Hostile(nursery, endless_json_body)
    transport = FastTransport(open_stream=server.open_stream, trust_env=False)
    cfg = hostile_config(max_body_bytes=1 * MiB)
    async with sluice.open_runtime(cfg, transport=transport) as rt:
        error = await call(rt, stream=False)
    assert isinstance(error, sluice.ProtocolError) and not error.retryable
    assert error.message == (
        "the reply body is larger than the 1 MiB limit (reply_limits.max_body_bytes)"
    )
    assert server.requests == 1
    assert server.sent <= 1 * MiB + 2 * PIECE
    await transport.aclose()


async def huge_content_length(stream: trio.abc.Stream) -> None:
    await stream.send_all(
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 1000000000\r\n\r\n"
    )
    await trio.sleep_forever()


@virtual_deadline(600)
async def test_a_content_length_over_the_body_limit_is_refused_before_reading(
    autojump_clock, nursery
):
    server = Hostile(nursery, huge_content_length)
    transport = FastTransport(open_stream=server.open_stream, trust_env=False)
    async with sluice.open_runtime(hostile_config(), transport=transport) as rt:
        error = await call(rt, stream=False)
        ended = trio.current_time()
    assert error.message == (
        "the reply body is larger than the 64 MiB limit (reply_limits.max_body_bytes)"
    )
    assert ended == 0.0 and server.requests == 1
    await transport.aclose()


# -- absurd sizes and garbage -----------------------------------------------------------------


def sends(data: bytes) -> Behaviour:
    async def behaviour(stream: trio.abc.Stream) -> None:
        await stream.send_all(data)
        await trio.sleep_forever()

    return behaviour


async def endless_headers(stream: trio.abc.Stream) -> None:
    """200 MB of headers, if the client would take them."""
    line = b"x-pad: " + b"a" * 1000 + b"\r\n"
    await stream.send_all(b"HTTP/1.1 200 OK\r\n")
    for _ in range(200_000):
        await stream.send_all(line * 64)


CHUNKED = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
)


@pytest.mark.parametrize(
    ("behaviour", "kind", "retried", "words"),
    [
        pytest.param(
            sends(CHUNKED + b"ffffffffffffffff\r\ndata: "),
            sluice.ProtocolError,
            False,
            "chunk size 0xffffffffffffffff is larger than the 4 GiB limit",
            id="chunk size 2^64-1",
        ),
        pytest.param(
            sends(b"HTTP/1.1 200 OK\r\ncontent-length: 99999999999999999999\r\n\r\n"),
            sluice.ProtocolError,
            False,
            "content-length 99999999999999999999 is larger than the 1 TiB limit",
            id="huge content-length",
        ),
        pytest.param(
            endless_headers,
            sluice.ProtocolError,
            False,
            "the response head is larger than the 65536 bytes limit",
            id="200 MB of headers",
        ),
        pytest.param(
            sends(b"HTTP/1.1 200 OK\r\ncontent-length: -5\r\n\r\n"),
            sluice.ConnectionFailed,
            True,
            "invalid content-length '-5'",
            id="negative content-length",
        ),
        pytest.param(
            sends(b"SSH-2.0-OpenSSH_9.6\r\n\x00\xff garbage"),
            sluice.ConnectionFailed,
            True,
            "the response does not start with HTTP/",
            id="garbage",
        ),
        pytest.param(
            sends(CHUNKED + b"zz\r\n"),
            sluice.StreamBroken,
            True,
            "invalid chunk size",
            id="garbage chunk size",
        ),
    ],
)
@virtual_deadline(600)
async def test_absurd_and_garbage_replies_end_with_a_named_error(
    autojump_clock, nursery, behaviour, kind, retried, words
):
    server = Hostile(nursery, behaviour)
    transport = FastTransport(open_stream=server.open_stream, trust_env=False)
    async with sluice.open_runtime(hostile_config(), transport=transport) as rt:
        error = await call(rt)
    assert type(error) is kind
    assert words in error.message
    assert error.retryable is retried
    assert server.requests == (3 if retried else 1)
    assert server.sent < 1 * MiB  # refused early: the 200 MB of headers were never read
    assert transport.statistics().connections == 0
    await transport.aclose()


# -- replies as they come ---------------------------------------------------------------------

WHOLE_REPLIES = {
    "openai": {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "whole answer"},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
    },
    "anthropic": {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "content": [{"type": "text", "text": "whole answer"}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 5, "output_tokens": 2},
    },
    "gemini": {
        "candidates": [
            {
                "content": {"role": "model", "parts": [{"text": "whole answer"}]},
                "finishReason": "STOP",
            }
        ],
        "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 2},
    },
    "ollama": {
        "model": "m",
        "message": {"role": "assistant", "content": "whole answer"},
        "done": True,
        "done_reason": "stop",
        "prompt_eval_count": 5,
        "eval_count": 2,
    },
}


def json_reply(body: bytes, content_type: str = "application/json") -> Behaviour:
    async def behaviour(stream: trio.abc.Stream) -> None:
        await stream.send_all(
            f"HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\n"
            f"content-length: {len(body)}\r\n\r\n".encode()
            + body
        )

    return behaviour


@pytest.mark.parametrize("protocol", sorted(WHOLE_REPLIES))
@virtual_deadline(60)
async def test_a_json_completion_answering_a_streamed_request_is_the_reply(
    autojump_clock, nursery, protocol
):
    body = orjson.dumps(WHOLE_REPLIES[protocol])
    server = Hostile(nursery, json_reply(body, "application/json; charset=utf-8"))
    transport = FastTransport(open_stream=server.open_stream, trust_env=False)
    async with sluice.open_runtime(hostile_config(protocol), transport=transport) as rt:
        async with rt.stream(ChatRequest(model="h:m", messages="hi")) as stream:
            deltas = [e.text async for e in stream if isinstance(e, sluice.TextDelta)]
        result = stream.result
    assert result is not None
    assert result.text == "whole answer" and deltas == ["whole answer"]
    assert result.finish_reason == "stop"
    assert (result.usage.input_tokens, result.usage.output_tokens) == (5, 2)
    assert result.attempts == 1 and server.requests == 1  # one generation billed
    await transport.aclose()


@pytest.mark.parametrize("protocol", sorted(WHOLE_REPLIES))
@virtual_deadline(60)
async def test_an_event_stream_answering_a_whole_request_is_read_as_a_stream(
    autojump_clock, nursery, protocol
):
    stream_bodies = {
        "openai": b'data: {"choices":[{"index":0,"delta":{"content":"streamed"},'
        b'"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n',
        "anthropic": b'event: message_start\ndata: {"type":"message_start","message":'
        b'{"id":"m","usage":{"input_tokens":1,"output_tokens":0}}}\n\n'
        b'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
        b'"content_block":{"type":"text","text":""}}\n\n'
        b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
        b'"delta":{"type":"text_delta","text":"streamed"}}\n\n'
        b'event: message_delta\ndata: {"type":"message_delta","delta":'
        b'{"stop_reason":"end_turn"},"usage":{"output_tokens":1}}\n\n'
        b'event: message_stop\ndata: {"type":"message_stop"}\n\n',
        "gemini": b'data: {"candidates":[{"content":{"parts":[{"text":"streamed"}]},'
        b'"finishReason":"STOP"}]}\n\n',
        "ollama": b'{"message":{"content":"streamed"},"done":false}\n'
        b'{"message":{"content":""},"done":true,"done_reason":"stop"}\n',
    }
    content_type = "application/x-ndjson" if protocol == "ollama" else "text/event-stream"
    server = Hostile(nursery, json_reply(stream_bodies[protocol], content_type))
    transport = FastTransport(open_stream=server.open_stream, trust_env=False)
    async with sluice.open_runtime(hostile_config(protocol), transport=transport) as rt:
        result = await rt.chat(ChatRequest(model="h:m", messages="hi", stream=False))
    assert result.text == "streamed" and result.attempts == 1
    await transport.aclose()


HTML = b"<!DOCTYPE html>\n<html><head><title>Welcome to nginx!</title></head><body>hi</body></html>"


@pytest.mark.parametrize("protocol", sorted(WHOLE_REPLIES))
@pytest.mark.parametrize("stream", [True, False])
@virtual_deadline(60)
async def test_an_html_page_is_a_terminal_error_with_a_hint(
    autojump_clock, nursery, protocol, stream
):
    server = Hostile(nursery, json_reply(HTML, "text/html; charset=utf-8"))
    transport = FastTransport(open_stream=server.open_stream, trust_env=False)
    async with sluice.open_runtime(hostile_config(protocol), transport=transport) as rt:
        error = await call(rt, stream=stream)
    assert isinstance(error, sluice.ProtocolError) and not error.retryable
    assert error.status == 200
    assert error.message == (
        "HTTP 200 with content type text/html, not a reply of the API (is base_url right?): "
        "<!DOCTYPE html> <html><head><title>Welcome to nginx!</title></head><body>hi</body></html>"
    )
    assert server.requests == 1
    await transport.aclose()


@virtual_deadline(60)
async def test_an_unexpected_type_with_another_2xx_status_has_no_base_url_hint(
    autojump_clock, nursery
):
    async def behaviour(stream: trio.abc.Stream) -> None:
        await stream.send_all(head("image/png", status="203 Non-Authoritative") + b"\x89PNG")

    server = Hostile(nursery, behaviour)
    transport = FastTransport(open_stream=server.open_stream, trust_env=False)
    async with sluice.open_runtime(hostile_config(), transport=transport) as rt:
        error = await call(rt)
    assert error.message.startswith("HTTP 203 with content type image/png, not a reply of the API:")
    assert "base_url" not in error.message
    assert server.requests == 1
    await transport.aclose()


@virtual_deadline(60)
async def test_a_stream_labelled_as_json_is_still_read(autojump_clock, nursery):
    body = (
        b'data: {"choices":[{"index":0,"delta":{"content":"labelled"},'
        b'"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'
    )
    server = Hostile(nursery, json_reply(body, "application/json"))
    transport = FastTransport(open_stream=server.open_stream, trust_env=False)
    async with sluice.open_runtime(hostile_config(), transport=transport) as rt:
        result = await rt.chat("h:m", "hi")
    assert result.text == "labelled" and result.attempts == 1
    await transport.aclose()


@virtual_deadline(60)
async def test_a_page_that_echoes_the_key_never_shows_it(autojump_clock, nursery):
    page = b"<html><body>Your key sk-hostile-test is not welcome here</body></html>"
    server = Hostile(nursery, json_reply(page, "text/html"))
    transport = FastTransport(open_stream=server.open_stream, trust_env=False)
    async with sluice.open_runtime(hostile_config(), transport=transport) as rt:
        error = await call(rt)
    assert "sk-hostile-test" not in str(error) and "sk-hostile-test" not in repr(error)
    assert "is not welcome here" in error.message
    await transport.aclose()


@virtual_deadline(60)
async def test_a_redirect_to_a_web_page_says_where_it_pointed(autojump_clock, nursery):
    async def behaviour(stream: trio.abc.Stream) -> None:
        await stream.send_all(
            head(
                "text/html",
                status="301 Moved Permanently",
                extra="location: https://hostile.test/v1/chat/completions\r\n",
            )
            + b"<html>Moved</html>"
        )

    server = Hostile(nursery, behaviour)
    transport = FastTransport(open_stream=server.open_stream, trust_env=False)
    async with sluice.open_runtime(hostile_config(), transport=transport) as rt:
        error = await call(rt)
    assert isinstance(error, sluice.ProtocolError) and not error.retryable
    assert error.message == (
        "HTTP 301 with content type text/html, not a reply of the API (a redirect to "
        "https://hostile.test/v1/chat/completions: is base_url right?): <html>Moved</html>"
    )
    await transport.aclose()


async def endless_valid_stream(stream: trio.abc.Stream) -> None:
    event = b'data: {"choices":[{"index":0,"delta":{"content":"' + b"w" * 900 + b'"}}]}\n\n'
    await forever(stream, head(), event * 60)


@virtual_deadline(600)
async def test_a_valid_stream_without_end_is_cut_off_at_the_stream_limit(autojump_clock, nursery):
    server = Hostile(nursery, endless_valid_stream)
    transport = FastTransport(open_stream=server.open_stream, trust_env=False)
    cfg = hostile_config(max_stream_bytes=2 * MiB)
    async with sluice.open_runtime(cfg, transport=transport) as rt:
        error = await call(rt)
    assert isinstance(error, sluice.ProtocolError) and not error.retryable
    assert error.message == (
        "the streamed reply is larger than the 2 MiB limit (reply_limits.max_stream_bytes)"
    )
    assert server.requests == 1
    assert server.sent <= 2 * MiB + 2 * PIECE
    await transport.aclose()


async def gzip_bomb(stream: trio.abc.Stream) -> None:
    import zlib

    packer = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    piece = packer.compress(b"\0" * (8 * MiB))
    await stream.send_all(head(extra="content-encoding: gzip\r\n") + piece)
    zeros = b"\0" * (8 * MiB)
    while True:  # about 8 KiB of gzip per 8 MiB of zeros
        await stream.send_all(packer.compress(zeros) + packer.flush(zlib.Z_SYNC_FLUSH))


@virtual_deadline(600)
async def test_a_decompression_bomb_is_refused_with_bounded_memory(autojump_clock, nursery):
    server = Hostile(nursery, gzip_bomb)
    transport = FastTransport(open_stream=server.open_stream, trust_env=False)
    tracemalloc.start()
    try:
        async with sluice.open_runtime(hostile_config(), transport=transport) as rt:
            error = await call(rt)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # The zeros hold no line ending: the SSE line limit (32 MiB) refuses them first.
    assert isinstance(error, sluice.ProtocolError) and not error.retryable
    assert "reply_limits.max_line_bytes" in error.message
    assert server.requests == 1
    assert peak < 200 * MiB
    await transport.aclose()


# -- error replies --------------------------------------------------------------------------

RATE_LIMIT_BODY = (
    b'{"error":{"message":"Rate limit reached for requests","type":"requests",'
    b'"param":null,"code":"rate_limit_exceeded"}}'
)


async def trickled_429(stream: trio.abc.Stream) -> None:
    """A 429 whose JSON body comes one byte a second (a server under load)."""
    await stream.send_all(
        head("application/json", status="429 Too Many Requests", extra="retry-after: 7\r\n")
    )
    for byte in RATE_LIMIT_BODY:
        await stream.send_all(bytes([byte]))
        await trio.sleep(1)


@virtual_deadline(2000)
async def test_a_429_whose_body_trickles_past_the_deadline_is_still_rate_limited(
    autojump_clock, nursery
):
    server = Hostile(nursery, trickled_429)
    transport = FastTransport(open_stream=server.open_stream, trust_env=False)
    config = hostile_config(max_attempts=1, deadlines=Deadlines(first_token=2))
    async with sluice.open_runtime(config, transport=transport) as rt:
        error = await call(rt)
        ended = trio.current_time()
        quotas = (await rt.statistics()).quotas
    # The status and headers decide: the body is read for at most ERROR_BODY_WAIT seconds of
    # its own (the first-token deadline does not cut it), then what arrived is decoded.
    assert type(error) is sluice.RateLimited
    assert error.status == 429 and error.retry_after == 7.0
    assert ended == ERROR_BODY_WAIT
    [quota] = quotas.values()
    assert quota.cooldown_left == 7.0  # the pause the provider asked for, from the reply
    assert server.requests == 1
    await transport.aclose()
