"""The gateway's HTTP server, protocol details: ``x-request-id``, HTTP/1.0 streams,
``100 Continue`` after the vet, the per-connection barrier, early refusal of a chunk size, and
error bodies without Python in them. Virtual time over memory streams."""

from __future__ import annotations

import logging
import re
from typing import Any

import orjson
import pytest
import trio
import trio.testing

from sluice._errors import ToolCallError
from sluice._gateway import GatewaySettings, KeyRing, Server, ServerLimits, issue_key
from sluice._gateway.errors import response_for
from sluice.simulator import SimulatorConfig

from .gateway_helpers import chat_body, gateway_harness, messages_body
from .helpers import virtual_deadline

OPEN = GatewaySettings(require_key=False)
GENERATED_ID = re.compile(rb"x-request-id: [0-9a-f]{12}-[0-9a-f]+\r\n")


async def _read_all(stream: trio.abc.ReceiveStream) -> bytes:
    reply = b""
    while piece := await stream.receive_some(65536):
        reply += piece
    return reply


async def _read_until(stream: trio.abc.ReceiveStream, marker: bytes) -> bytes:
    seen = b""
    while marker not in seen:
        piece = await stream.receive_some(65536)
        assert piece, seen
        seen += piece
    return seen


def _head(reply: bytes) -> bytes:
    return reply.partition(b"\r\n\r\n")[0] + b"\r\n"


def _post(path: bytes, body: bytes, *extra: bytes, version: bytes = b"1.1") -> bytes:
    return (
        b"POST %s HTTP/%s\r\nhost: gw\r\n" % (path, version)
        + b"".join(extra)
        + b"content-length: %d\r\n\r\n" % len(body)
        + body
    )


# ---- x-request-id ---------------------------------------------------------------------------


@virtual_deadline(30)
async def test_every_response_carries_the_clients_request_id_or_a_new_one(autojump_clock):
    async with gateway_harness(settings=OPEN) as gw:
        status, headers, _ = await gw.call(
            "/health", None, method="GET", headers=(("x-request-id", "req_Ab-1.2:3"),)
        )
        assert status == 200 and headers["x-request-id"] == "req_Ab-1.2:3"
        made = set()
        for sent in ("", "a" * 129, "has space", 'quote"', "caf\u00e9"):
            extra = (("x-request-id", sent),) if sent else ()
            body = chat_body(stream=True)
            _, headers, _ = await gw.call("/v1/chat/completions", body, headers=extra)
            made.add(headers["x-request-id"])
            assert re.fullmatch(r"[0-9a-f]{12}-[0-9a-f]+", headers["x-request-id"]), sent
        assert len(made) == 5  # a new one each time
        # An error from the gateway carries it too.
        status, headers, _ = await gw.call(
            "/nowhere", None, method="GET", headers=(("x-request-id", "r-404"),)
        )
        assert status == 404 and headers["x-request-id"] == "r-404"


@virtual_deadline(60)
async def test_refusals_before_the_handler_carry_a_request_id(autojump_clock):
    limits = ServerLimits(max_body_bytes=1000, header_timeout=5, max_connections=1)
    async with gateway_harness(settings=OPEN, limits=limits) as gw:
        for data, status in [
            # A head that does not parse has no request id of the client's.
            (b"GET / HTTP/1.1\r\nhost: gw\r\nx-request-id: theirs\r\nbad line\r\n\r\n", b"400"),
            (
                b"POST / HTTP/1.1\r\nhost: gw\r\nx-request-id: mine\r\n"
                b"content-length: 5000\r\n\r\n",
                b"413",
            ),
            (b"GET / HTTP/1.1\r\nhost: gw\r\n", b"408"),  # the head never ends
        ]:
            client = gw.connect()
            await client.send_all(data)
            if status == b"408":
                other = gw.connect()  # over the cap of one connection
                assert GENERATED_ID.search(_head(await _read_all(other)))
            reply = await _read_all(client)
            assert reply.startswith(b"HTTP/1.1 " + status)
            head = _head(reply)
            assert b"x-request-id: mine\r\n" in head or GENERATED_ID.search(head), reply
            assert (b"x-request-id: mine" in head) == (b"mine" in data)


# ---- HTTP/1.0 -------------------------------------------------------------------------------


@virtual_deadline(30)
async def test_an_http_1_0_client_gets_an_unchunked_stream_that_ends_with_the_connection(
    autojump_clock,
):
    sim = SimulatorConfig(tokens_per_second=100, output_tokens=20)
    async with gateway_harness(sim=sim, settings=OPEN) as gw:
        client = gw.connect()
        body = orjson.dumps(chat_body(stream=True))
        await client.send_all(_post(b"/v1/chat/completions", body, version=b"1.0"))
        reply = await _read_all(client)  # the gateway closes the connection at the end
        head, _, stream = reply.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 ")
        assert b"transfer-encoding" not in head and b"content-length" not in head
        assert b"\r\nconnection: close" in head
        events = [e for e in stream.split(b"\n\n") if e]
        assert all(e.startswith(b"data: ") for e in events), stream[:200]
        assert events[-1] == b"data: [DONE]" and len(events) > 3
        assert b"".join(
            orjson.loads(e[6:])["choices"][0]["delta"].get("content", "").encode()
            for e in events[1:-1]
            if orjson.loads(e[6:])["choices"]
        )
        # A whole response to an HTTP/1.0 client keeps its content-length, and closes too.
        client = gw.connect()
        await client.send_all(
            _post(b"/v1/chat/completions", orjson.dumps(chat_body()), version=b"1.0")
        )
        reply = await _read_all(client)
        assert b"content-length: " in _head(reply) and b"connection: close" in _head(reply)
        # HTTP/1.1 still gets chunks.
        status, headers, _ = await gw.call("/v1/chat/completions", chat_body(stream=True))
        assert status == 200 and headers["transfer-encoding"] == "chunked"


# ---- 100 Continue ---------------------------------------------------------------------------


def _keyring() -> tuple[KeyRing, str]:
    key, token = issue_key({}, "ann", now=0.0)
    return KeyRing(None, {"ann": key}), token


@pytest.mark.parametrize(
    ("path", "auth", "length", "status"),
    [
        (b"/v1/chat/completions", b"", 100, b"401"),
        (b"/v1/chat/completions", b"authorization: Bearer sk-wrong\r\n", 100, b"401"),
        (b"/v1/messages", b"x-api-key: sk-wrong\r\nanthropic-version: 2023-06-01\r\n", 100, b"401"),
        (b"/v1/chat/completions", b"KEY", 5000, b"413"),
        (b"/v1/chat/completions", b"", 5000, b"413"),
    ],
)
@virtual_deadline(30)
async def test_a_refused_head_gets_its_refusal_and_no_100_continue(
    autojump_clock, path, auth, length, status
):
    keys, token = _keyring()
    limits = ServerLimits(max_body_bytes=1000)
    async with gateway_harness(keys=keys, limits=limits) as gw:
        if auth == b"KEY":
            auth = b"authorization: Bearer %s\r\n" % token.encode()
        client = gw.connect()
        await client.send_all(
            b"POST %s HTTP/1.1\r\nhost: gw\r\n%sexpect: 100-continue\r\ncontent-length: %d\r\n\r\n"
            % (path, auth, length)
        )
        reply = await _read_all(client)  # the refusal closes the connection; no body sent
        assert reply.startswith(b"HTTP/1.1 " + status + b" ") and b"100 Continue" not in reply
        assert b"connection: close" in _head(reply)
        if status == b"401":
            error = orjson.loads(reply.partition(b"\r\n\r\n")[2])
            kind = "authentication_error" if path == b"/v1/messages" else "invalid_request_error"
            assert error["error"]["type"] == kind
        assert gw.server.refused == {int(status): 1}
        assert gw.sim.chat_requests_seen == 0


@virtual_deadline(30)
async def test_an_accepted_head_gets_100_continue_then_its_answer(autojump_clock):
    keys, token = _keyring()
    async with gateway_harness(keys=keys) as gw:
        body = orjson.dumps(chat_body())
        client = gw.connect()
        await client.send_all(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\nexpect: 100-continue\r\n"
            b"authorization: Bearer %s\r\ncontent-length: %d\r\n\r\n" % (token.encode(), len(body))
        )
        assert await _read_until(client, b"\r\n\r\n") == b"HTTP/1.1 100 Continue\r\n\r\n"
        await client.send_all(body)
        reply = await _read_until(client, b'"finish_reason":"stop"')
        assert reply.startswith(b"HTTP/1.1 200 ")


@virtual_deadline(10)
async def test_the_server_asks_its_vet_only_about_clients_that_wait_for_100(autojump_clock):
    asked = []

    def vet(request):
        asked.append((request.path, request.body))
        return None

    async def handler(request, respond):
        await respond.send(200, [], request.body)

    server = Server(handler, vet=vet)
    async with trio.open_nursery() as nursery:
        client, end = trio.testing.memory_stream_pair()
        nursery.start_soon(server.serve_connection, end)
        await client.send_all(_post(b"/plain", b"abc"))
        assert (await _read_until(client, b"abc")).startswith(b"HTTP/1.1 200 ")
        await client.send_all(
            b"POST /waits HTTP/1.1\r\nhost: a\r\nexpect: 100-continue\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
        )
        assert (await _read_until(client, b"\r\n\r\n")).startswith(b"HTTP/1.1 100 Continue")
        await client.send_all(b"3\r\nxyz\r\n0\r\n\r\n")
        assert (await _read_until(client, b"xyz")).startswith(b"HTTP/1.1 200 ")
        assert asked == [(b"/waits", b"")]
        nursery.cancel_scope.cancel()


# ---- the barrier ----------------------------------------------------------------------------


class _BrokenStream(trio.abc.Stream):
    """A stream whose second read fails with an exception no server expects (a bug's
    stand-in: the server must not let it out)."""

    def __init__(self, inner: trio.abc.Stream) -> None:
        self.inner = inner
        self.reads = 0

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        self.reads += 1
        if self.reads == 2:
            raise RuntimeError("an unexpected failure")
        return await self.inner.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self.inner.aclose()


@virtual_deadline(10)
async def test_a_bug_ends_one_connection_with_500_a_traceback_and_a_count(autojump_clock, caplog):
    async def handler(request, respond):
        await respond.send(200, [], b"fine")

    server = Server(handler)
    async with trio.open_nursery() as nursery:
        client, end = trio.testing.memory_stream_pair()
        nursery.start_soon(server.serve_connection, _BrokenStream(end))
        with caplog.at_level(logging.ERROR, logger="sluice._gateway"):
            await client.send_all(b"GET /x HTTP/1.1\r\n")  # half a head, then the failure
            reply = await _read_all(client)
        assert reply.startswith(b"HTTP/1.1 500 ") and b"connection: close" in reply
        assert server.internal_errors == 1 and server.connections == 0
        [record] = caplog.records
        assert record.exc_info is not None and "RuntimeError" in caplog.text
        assert "an unexpected failure" in caplog.text
        # The server goes on.
        client, end = trio.testing.memory_stream_pair()
        nursery.start_soon(server.serve_connection, end)
        await client.send_all(b"GET /x HTTP/1.1\r\nhost: a\r\n\r\n")
        assert (await _read_until(client, b"fine")).startswith(b"HTTP/1.1 200 ")
        nursery.cancel_scope.cancel()


@virtual_deadline(10)
async def test_a_bug_after_the_response_started_closes_the_connection(autojump_clock, caplog):
    async def handler(request, respond):
        respond.start(200, [])
        await respond.write(b"partial")
        raise RuntimeError("a bug mid-stream")

    server = Server(handler)
    async with trio.open_nursery() as nursery:
        client, end = trio.testing.memory_stream_pair()
        nursery.start_soon(server.serve_connection, end)
        with caplog.at_level(logging.ERROR, logger="sluice._gateway"):
            await client.send_all(b"GET /x HTTP/1.1\r\nhost: a\r\n\r\n")
            reply = await _read_all(client)
        # The chunked body stops where it was, with no last chunk and no 500 glued on.
        assert reply.startswith(b"HTTP/1.1 200 ") and reply.endswith(b"7\r\npartial\r\n")
        assert server.internal_errors == 1 and "a bug mid-stream" in caplog.text
        nursery.cancel_scope.cancel()


@virtual_deadline(10)
async def test_internal_errors_are_a_metric(autojump_clock):
    async with gateway_harness() as gw:
        gw.server.internal_errors = 2
        status, _, body = await gw.call("/metrics", None, method="GET")
        assert status == 200 and b"sluice_gateway_internal_errors_total 2.0" in body


# ---- chunk sizes ----------------------------------------------------------------------------


@virtual_deadline(60)
async def test_a_chunk_size_past_the_limit_is_refused_at_once(autojump_clock):
    async with gateway_harness(settings=OPEN) as gw:
        client = gw.connect()
        started = trio.current_time()
        await client.send_all(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\ntransfer-encoding: chunked\r\n"
            b"\r\nffffffffffffffff"  # and nothing more: the size line has not even ended
        )
        reply = await _read_all(client)
        assert trio.current_time() == started  # not the body timeout later
        assert reply.startswith(b"HTTP/1.1 413 ") and b"over 16777216 bytes" in reply


# ---- no Python in error bodies --------------------------------------------------------------

PYTHON = re.compile(rb"<class |[A-Z][A-Za-z]+\(|\bb'|bytearray|object at 0x|Traceback")
"""What a Python repr or traceback looks like: ``<class 'int'>``, ``ToolOptions(``,
``b'...'``, ``<... object at 0x...>``."""

BAD_BODIES: list[dict[str, Any]] = [
    {"model": 1, "messages": []},
    {"model": "sim:sim-small", "messages": 5},
    {"model": "sim:sim-small", "messages": [{"role": 5, "content": "x"}]},
    {"model": "sim:sim-small", "messages": [{"role": "user", "content": {"a": 1}}]},
    {"model": "sim:sim-small", "messages": [{"role": "user", "content": [1]}]},
    {**chat_body(), "max_tokens": "many"},
    {**chat_body(), "temperature": [1]},
    {**chat_body(), "tools": [{"type": "function", "function": {"name": 5}}]},
    {**chat_body(), "tools": "x"},
    {**chat_body(), "tool_choice": {"type": "function"}},
    {**chat_body(), "response_format": {"type": "json_schema", "json_schema": 3}},
    {**chat_body(), "stop": {"a": 1}},
    {**chat_body(), "n": "two"},
    {"model": "no-provider", "messages": [{"role": "user", "content": "x"}]},
    {"model": "nope:model", "messages": [{"role": "user", "content": "x"}]},
]


@virtual_deadline(60)
async def test_error_bodies_hold_no_python(autojump_clock):
    headers = (("anthropic-version", "2023-06-01"),)
    async with gateway_harness(settings=OPEN) as gw:
        for body in BAD_BODIES:
            for path, extra, shaped in [
                ("/v1/chat/completions", (), body),
                ("/v1/messages", headers, {**messages_body(), **body}),
            ]:
                status, _, reply = await gw.call(path, shaped, headers=extra)
                assert status >= 400 or path == "/v1/messages", body  # it ignores some
                assert not PYTHON.search(reply), (path, body, reply)
        client = gw.connect()
        await client.send_all(
            b"POST / HTTP/1.1\r\nhost: gw\r\ntransfer-encoding: chunked\r\n\r\nxyz\r\n"
        )
        reply = await _read_all(client)
        assert reply.startswith(b"HTTP/1.1 400 ") and not PYTHON.search(reply)


def test_a_tool_call_error_reaches_a_client_without_its_python_fix():
    error = ToolCallError(
        "the model made 2 tool calls but only one is allowed per reply\n"
        "To accept several: ChatRequest(..., parallel_tool_calls=True); "
        "to keep only the first: ToolOptions(keep_first_call=True)",
        reason="too_many_calls",
    )
    for wire in ("openai", "anthropic"):
        status, _, body = response_for(wire, error)
        message = orjson.loads(body)["error"]["message"]
        assert status == 502
        assert message == "the model made 2 tool calls but only one is allowed per reply"
