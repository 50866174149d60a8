"""Hostile requests against a real gateway (``sluice.serve``) over loopback sockets.

Each request is one a client could send to kill or wedge a server: lengths of 21 to 5,000
digits, NUL and control bytes in heads, absurd chunk sizes, heads and bodies cut at every
byte, invalid UTF-8, JSON nested past what the gateway can write back. Each must be refused
(a 4xx, 501 or 505 with ``connection: close``) or met by a closed connection, and after each
the gateway answers ``GET /health`` within 1 s; at the end its ``/metrics`` shows no internal
error (the per-connection barrier never had to catch a bug). The real clock; the timeouts
bound a broken gateway, they measure nothing.
"""

from __future__ import annotations

import functools
import json
from typing import TYPE_CHECKING, Any

import httpx
import pytest
import trio

import sluice
from sluice._gateway import GatewaySettings, ServerLimits

from .gateway_helpers import chat_body, messages_body

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

CHAT = (
    b"POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\ncontent-type: application/json\r\n"
    b"connection: close\r\n"
)
REFUSED = (400, 413, 431, 501, 505)


class Gateway:
    def __init__(self, port: int, client: httpx.AsyncClient) -> None:
        self.port = port
        self.client = client

    async def exchange(self, data: bytes, *, end: bool = False) -> bytes:
        """Send ``data`` on a new connection (then end the sending side, if ``end``: a
        client that leaves after its request) and read what comes back until the gateway
        closes."""
        stream = await trio.open_tcp_stream("127.0.0.1", self.port)
        reply = b""
        try:
            with trio.fail_after(5):
                await stream.send_all(data)
                if end:
                    await stream.send_eof()
                while piece := await stream.receive_some(65536):
                    reply += piece
        except trio.BrokenResourceError:  # it closed (reset) while we still sent: a close
            pass
        finally:
            await stream.aclose()
        return reply

    async def healthy(self) -> None:
        with trio.fail_after(1):
            reply = await self.client.get("/health")
        assert reply.status_code == 200


@pytest.fixture
async def gateway(nursery: trio.Nursery) -> AsyncIterator[Gateway]:
    config = sluice.load_config({"ledger": {"persist": False}})
    port = await nursery.start(
        functools.partial(
            sluice.serve,
            config,
            port=0,
            settings=GatewaySettings(require_key=False),
            limits=ServerLimits(max_body_bytes=1024 * 1024),
        )
    )
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as client:
        gw = Gateway(port, client)
        yield gw
        metrics = (await client.get("/metrics")).text
        assert "sluice_gateway_internal_errors_total 0.0" in metrics


def _status(reply: bytes) -> int | None:
    return int(reply[9:12]) if reply.startswith(b"HTTP/1.1 ") else None


def _refused(reply: bytes) -> int:
    """The refusal's status; it closes the connection, and names no Python object."""
    status = _status(reply)
    assert status in REFUSED, reply[:300]
    head, _, body = reply.partition(b"\r\n\r\n")
    assert b"\r\nconnection: close\r\n" in head + b"\r\n" and b"x-request-id: " in head
    assert b"bytearray" not in body and b"b'" not in body and b"<" not in body
    return status


def _chat(body: bytes, *extra: bytes) -> bytes:
    return CHAT + b"".join(extra) + b"content-length: %d\r\n\r\n" % len(body) + body


@pytest.mark.parametrize("digits", [21, 22, 100, 4300, 4301, 5000])
async def test_a_content_length_of_more_than_20_digits_is_refused(gateway, digits):
    reply = await gateway.exchange(CHAT + b"content-length: " + b"1" * digits + b"\r\n\r\n{}")
    assert _refused(reply) == 400
    await gateway.healthy()


async def test_a_20_digit_content_length_is_too_large(gateway):
    reply = await gateway.exchange(CHAT + b"content-length: " + b"9" * 20 + b"\r\n\r\n")
    assert _refused(reply) == 413
    await gateway.healthy()


CONTROL = [*range(0x20), 0x7F]


@pytest.mark.parametrize("where", ["target", "name", "value"])
async def test_nul_and_control_bytes_in_heads_are_refused(gateway, where):
    for byte in CONTROL:
        b = bytes([byte])
        if where == "target":
            head = b"GET /hea" + b + b"lth HTTP/1.1\r\nhost: gw\r\n\r\n"
        elif where == "name":
            head = b"GET /health HTTP/1.1\r\nhost: gw\r\nx-a" + b + b"b: 1\r\n\r\n"
        else:
            head = (
                b"GET /health HTTP/1.1\r\nhost: gw\r\nconnection: close\r\nx-ab: 1"
                + b
                + b"2\r\n\r\n"
            )
        reply = await gateway.exchange(head)
        if where == "value" and b == b"\t":  # a tab is whitespace a value may hold
            assert _status(reply) == 200
        else:
            assert _refused(reply) == 400, b
        await gateway.healthy()


@pytest.mark.parametrize(
    ("size_line", "status"),
    [
        (b"ffffffffffffffff\r\n", 413),  # 2**64 - 1
        (b"ffffffffffffffff", 413),  # refused before the line even ends
        (b"100001", 413),  # 1 MiB + 1, the limit here: before the line ends too
        (b"f" * 17 + b"\r\n", 400),
        (b"f" * 5000 + b"\r\n", 400),
        (b"1" * 5000, 400),
        (b"-1\r\n", 400),
        (b"0x10\r\n", 400),
        (b"\x00\r\n", 400),
    ],
)
async def test_absurd_chunk_sizes_are_refused_at_once(gateway, size_line, status):
    head = CHAT + b"transfer-encoding: chunked\r\n\r\n"
    # The sending side stays open: the refusal comes at once, not at the body timeout.
    reply = await gateway.exchange(head + size_line)
    assert _refused(reply) == status
    await gateway.healthy()


async def test_framing_the_server_does_not_read_is_refused(gateway):
    for extra, status in [
        (b"transfer-encoding: gzip, chunked\r\n", 501),
        (b"transfer-encoding: chunked\r\ncontent-length: 5\r\n", 400),
        (b"content-length: 5\r\ncontent-length: 6\r\n", 400),
    ]:
        reply = await gateway.exchange(CHAT + extra + b"\r\n0\r\n\r\n")
        assert _refused(reply) == status
        await gateway.healthy()
    reply = await gateway.exchange(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
    assert _refused(reply) == 505
    await gateway.healthy()


def _every_cut(data: bytes) -> list[bytes]:
    return [data[:cut] for cut in range(len(data))]


async def test_requests_cut_at_every_byte_end_in_a_close_or_a_refusal(gateway):
    body = json.dumps(chat_body()).encode()

    def whole() -> bytes:
        return _chat(body)

    def chunked() -> bytes:
        return (
            CHAT
            + b"transfer-encoding: chunked\r\n\r\n"
            + b"%x;ext=1\r\n%s\r\n" % (10, body[:10])
            + b"%x\r\n%s\r\n0\r\nx-trailer: 1\r\n\r\n" % (len(body) - 10, body[10:])
        )

    for data in [*_every_cut(whole()), *_every_cut(chunked())]:
        reply = await gateway.exchange(data, end=True)
        if reply:  # a head cut inside a line may leave a malformed one: refused
            _refused(reply)
        await gateway.healthy()
    for make in (whole, chunked):  # uncut, both are answered
        assert _status(await gateway.exchange(make())) == 200


@pytest.mark.parametrize(
    "body",
    [
        b'{"model":"sim:sim-small","messages":[{"role":"user","content":"\xff\xfe"}]}',
        b'{"model":"sim:sim-small","messages":[{"role":"user","content":"\xed\xa0\x80"}]}',
        b'{"model":"sim:sim-small","messages":[{"role":"user","content":"\\ud800"}]}',
        b'{"model":"sim:\xc0\xaf","messages":[]}',
        b"\xff" * 100,
    ],
    ids=["bytes ff fe", "encoded surrogate", "escaped lone surrogate", "overlong", "binary"],
)
async def test_invalid_utf8_bodies_are_refused(gateway, body):
    reply = await gateway.exchange(_chat(body))
    assert _status(reply) == 400 and b"not valid JSON" in reply
    await gateway.healthy()


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


TOOL = '{"type":"function","function":{"name":"f","parameters":{"type":"object","x":%s}}}'
ANTHROPIC_HEAD = (
    b"POST /v1/messages HTTP/1.1\r\nhost: gw\r\nanthropic-version: 2023-06-01\r\n"
    b"connection: close\r\n"
)
DEEP_PLACES: list[tuple[bytes, dict[str, Any]]] = [
    (CHAT, chat_body(messages=[{"role": "user", "content": "DEEP"}])),
    (CHAT, chat_body(tools=["TOOL"], tool_choice="auto")),
    (CHAT, chat_body(metadata={"a": "DEEP"}, stream=True)),
    (
        ANTHROPIC_HEAD,
        messages_body(tools=[{"name": "f", "input_schema": {"type": "object", "x": "DEEP"}}]),
    ),
]
"""Chat bodies with a placeholder where arrays nest deep: places a gateway reads."""


@pytest.mark.parametrize("depth", [129, 200, 254, 255, 300, 1023, 1024, 1025, 100_000])
async def test_deeply_nested_json_is_refused_with_400(gateway, depth):
    deep = _nested(depth)
    for head, body in DEEP_PLACES:
        text = json.dumps(body).replace('"DEEP"', deep).replace('"TOOL"', TOOL % deep)
        data = text.encode()
        reply = await gateway.exchange(head + b"content-length: %d\r\n\r\n" % len(data) + data)
        assert _status(reply) == 400, reply[:300]
        assert b"nests arrays and objects more than 128 deep" in reply or b"not valid JSON" in reply
        await gateway.healthy()


async def test_json_nested_up_to_the_limit_is_served(gateway):
    body = json.dumps(chat_body(metadata={"a": "DEEP"})).replace('"DEEP"', _nested(126))
    reply = await gateway.exchange(_chat(body.encode()))  # 128 levels with the outer object
    assert _status(reply) == 200
