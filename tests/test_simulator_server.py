"""The simulator's HTTP/1.1 front end. Protocol tests run over trio memory streams (autojump
is safe there); one end-to-end test uses a real loopback socket and the real clock."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import h11
import httpx
import orjson
import pytest
import trio
import trio.testing

from sluice.simulator import SimulatorApp, SimulatorConfig, run_simulator, serve_simulator
from sluice.simulator._server import serve_connection

CHAT = orjson.dumps(
    {
        "model": "sim-small",
        "messages": [{"role": "user", "content": "hello"}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
)


def post(body: bytes, *extra: str) -> bytes:
    head = [
        "POST /v1/chat/completions HTTP/1.1",
        "Host: sim",
        "Content-Type: application/json",
        f"Content-Length: {len(body)}",
        *extra,
    ]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


GET_MODELS = b"GET /v1/models HTTP/1.1\r\nHost: sim\r\n\r\n"
NON_STREAM = orjson.dumps({"model": "sim-small", "messages": [{"role": "user", "content": "hi"}]})


class RecordingStream(trio.abc.Stream):
    """Wraps a stream and records every ``send_all`` (to count writes)."""

    def __init__(self, inner: trio.abc.Stream) -> None:
        self.inner = inner
        self.writes: list[bytes] = []

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        self.writes.append(bytes(data))
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        return await self.inner.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def read_response(
    conn: h11.Connection, stream: trio.abc.Stream
) -> tuple[h11.Response, bytes, list[float]]:
    """One response read with an h11 client: head, body, and the arrival time of each piece."""
    response: h11.Response | None = None
    body = b""
    times: list[float] = []
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(bytes(await stream.receive_some()))
        elif isinstance(event, h11.Response):
            response = event
        elif isinstance(event, h11.Data):
            body += event.data
            times.append(trio.current_time())
        elif isinstance(event, h11.EndOfMessage):
            assert response is not None
            return response, body, times
        else:
            raise AssertionError(event)


async def read_all(stream: trio.abc.Stream) -> bytes:
    """Everything the server sends until it closes the connection."""
    raw = b""
    while chunk := await stream.receive_some():
        raw += chunk
    return raw


def drain(conn: h11.Connection) -> None:
    """Consume events until the end of the response (raises if the body was cut)."""
    while not isinstance(conn.next_event(), h11.EndOfMessage):
        pass


def expect(conn: h11.Connection, method: str) -> None:
    """Tell an h11 client a request was sent as raw bytes, so it can parse the response."""
    headers = [("Host", "sim"), ("Content-Length", "0")]
    conn.send(h11.Request(method=method, target="/", headers=headers))
    conn.send(h11.EndOfMessage())


def headers_of(response: h11.Response) -> dict[bytes, bytes]:
    return dict(response.headers)


def sse_events(body: bytes) -> list[Any]:
    out: list[Any] = []
    for block in body.split(b"\n\n"):
        if block:
            payload = block.removeprefix(b"data: ")
            out.append("[DONE]" if payload == b"[DONE]" else orjson.loads(payload))
    return out


async def test_keep_alive_serves_two_requests_on_one_connection(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    with trio.fail_after(10):
        client, server = trio.testing.memory_stream_pair()
        recorder = RecordingStream(server)
        nursery.start_soon(
            serve_connection, SimulatorApp(SimulatorConfig(output_tokens=5)), recorder
        )
        conn = h11.Connection(h11.CLIENT)

        await client.send_all(post(CHAT))
        expect(conn, "POST")
        response, body, _ = await read_response(conn, client)
        assert response.status_code == 200
        head = headers_of(response)
        assert head[b"transfer-encoding"] == b"chunked"
        assert head[b"content-type"] == b"text/event-stream"
        assert b"content-length" not in head
        events = sse_events(body)
        assert events[-1] == "[DONE]"
        assert events[-2]["usage"]["completion_tokens"] == 5
        assert len(recorder.writes) == 1  # head, body and terminator in one write
        assert recorder.writes[0].endswith(b"\r\n0\r\n\r\n")

        conn.start_next_cycle()
        await client.send_all(GET_MODELS)
        expect(conn, "GET")
        response, body, _ = await read_response(conn, client)
        assert response.status_code == 200
        assert headers_of(response)[b"content-length"] == str(len(body)).encode()
        assert headers_of(response)[b"x-request-id"] == b"sim-req-2"
        assert orjson.loads(body)["object"] == "list"
        await client.aclose()


async def test_pipelined_requests_are_answered_in_order(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    with trio.fail_after(10):
        client, server = trio.testing.memory_stream_pair()
        nursery.start_soon(serve_connection, SimulatorApp(), server)
        conn = h11.Connection(h11.CLIENT)
        await client.send_all(GET_MODELS + post(CHAT) + GET_MODELS)
        ids = []
        for method in ("GET", "POST", "GET"):
            expect(conn, method)
            response, _, _ = await read_response(conn, client)
            ids.append(headers_of(response)[b"x-request-id"])
            conn.start_next_cycle()
        assert ids == [b"sim-req-1", b"sim-req-2", b"sim-req-3"]
        await client.aclose()


async def test_paced_stream_goes_out_chunk_by_chunk(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    with trio.fail_after(10):
        client, server = trio.testing.memory_stream_pair()
        recorder = RecordingStream(server)
        config = SimulatorConfig(ttft=0.5, tokens_per_second=4, output_tokens=3)
        nursery.start_soon(serve_connection, SimulatorApp(config), recorder)
        conn = h11.Connection(h11.CLIENT)
        await client.send_all(post(CHAT))
        expect(conn, "POST")
        _, body, times = await read_response(conn, client)
        assert times == [0.5, 0.75, 1.0]
        assert len(sse_events(body)) == 1 + 3 + 1 + 1 + 1
        assert len(recorder.writes) == 4  # head with slot 0, two more slots, terminator
        await client.aclose()


async def test_disconnect_closes_the_socket_mid_body(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    with trio.fail_after(10):
        client, server = trio.testing.memory_stream_pair()
        nursery.start_soon(serve_connection, SimulatorApp(), server)
        await client.send_all(post(CHAT, "x-sim-fault: disconnect:2"))
        raw = await read_all(client)
        assert raw.startswith(b"HTTP/1.1 200 ")
        assert raw.count(b"data: ") == 2
        assert not raw.endswith(b"0\r\n\r\n")
        conn = h11.Connection(h11.CLIENT)
        conn.send(h11.Request(method="POST", target="/", headers=[("Host", "sim")]))
        conn.receive_data(raw)
        conn.receive_data(b"")
        with pytest.raises(h11.RemoteProtocolError):
            drain(conn)


async def test_disconnect_before_any_event_still_sends_the_head(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    with trio.fail_after(10):
        client, server = trio.testing.memory_stream_pair()
        nursery.start_soon(serve_connection, SimulatorApp(), server)
        await client.send_all(post(CHAT, "x-sim-fault: disconnect:0"))
        raw = await read_all(client)
        assert raw.startswith(b"HTTP/1.1 200 ")
        assert raw.endswith(b"\r\n\r\n")
        assert b"data:" not in raw


async def test_connection_close_is_honoured(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    with trio.fail_after(10):
        client, server = trio.testing.memory_stream_pair()
        nursery.start_soon(serve_connection, SimulatorApp(), server)
        await client.send_all(GET_MODELS.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n"))
        raw = await read_all(client)
        assert raw.startswith(b"HTTP/1.1 200 ")
        assert b"connection: close" in raw.lower()


async def test_malformed_request_gets_400_and_close(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    with trio.fail_after(10):
        client, server = trio.testing.memory_stream_pair()
        nursery.start_soon(serve_connection, SimulatorApp(), server)
        await client.send_all(b"THIS IS NOT HTTP\r\n\r\n")
        raw = await read_all(client)
        head, _, body = raw.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 400 ")
        assert orjson.loads(body)["error"]["type"] == "invalid_request_error"


async def test_http10_stream_is_delimited_by_close(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    with trio.fail_after(10):
        client, server = trio.testing.memory_stream_pair()
        nursery.start_soon(serve_connection, SimulatorApp(), server)
        await client.send_all(post(CHAT).replace(b"HTTP/1.1", b"HTTP/1.0", 1))
        raw = await read_all(client)
        head, _, body = raw.partition(b"\r\n\r\n")
        assert b"transfer-encoding" not in head
        assert b"connection: close" in head
        assert sse_events(body)[-1] == "[DONE]"


async def test_expect_100_continue_and_head(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    with trio.fail_after(10):
        client, server = trio.testing.memory_stream_pair()
        nursery.start_soon(serve_connection, SimulatorApp(), server)
        request = post(CHAT, "Expect: 100-continue")
        head, _, body = request.partition(b"\r\n\r\n")
        await client.send_all(head + b"\r\n\r\n")
        assert await client.receive_some() == b"HTTP/1.1 100 Continue\r\n\r\n"
        await client.send_all(body)
        conn = h11.Connection(h11.CLIENT)
        expect(conn, "POST")
        response, _, _ = await read_response(conn, client)
        assert response.status_code == 200
        conn.start_next_cycle()
        await client.send_all(GET_MODELS.replace(b"GET", b"HEAD", 1))
        expect(conn, "HEAD")
        response, body, _ = await read_response(conn, client)
        assert (response.status_code, body) == (200, b"")
        assert int(headers_of(response)[b"content-length"]) > 0
        await client.aclose()


async def test_reset_closes_the_connection_without_a_byte(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    with trio.fail_after(10):
        client, server = trio.testing.memory_stream_pair()
        nursery.start_soon(serve_connection, SimulatorApp(), server)
        await client.send_all(post(CHAT, "x-sim-fault: reset"))
        assert await read_all(client) == b""


async def test_trickle_writes_a_few_bytes_at_a_time(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    with trio.fail_after(600):
        client, server = trio.testing.memory_stream_pair()
        recorder = RecordingStream(server)
        nursery.start_soon(serve_connection, SimulatorApp(), recorder)
        await client.send_all(post(NON_STREAM, "x-sim-fault: trickle:8:0.5"))
        conn = h11.Connection(h11.CLIENT)
        expect(conn, "POST")
        response, body, times = await read_response(conn, client)
        head = headers_of(response)
        assert int(head[b"content-length"]) == len(body)
        assert orjson.loads(body)["object"] == "chat.completion"
        head_write, *body_writes = recorder.writes
        assert head_write.startswith(b"HTTP/1.1 200 ")
        assert head_write.endswith(body[:8])  # the head goes out with the first piece
        assert [len(w) for w in body_writes] == [len(p) for p in chunks_of(body[8:], 8)]
        assert times == [0.5 * i for i in range(len(times))]
        await client.aclose()


def chunks_of(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


async def test_truncated_json_is_well_framed_and_keeps_the_connection(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    with trio.fail_after(10):
        client, server = trio.testing.memory_stream_pair()
        nursery.start_soon(serve_connection, SimulatorApp(), server)
        conn = h11.Connection(h11.CLIENT)
        await client.send_all(post(NON_STREAM, "x-sim-fault: truncated_json"))
        expect(conn, "POST")
        response, body, _ = await read_response(conn, client)
        assert int(headers_of(response)[b"content-length"]) == len(body)
        with pytest.raises(orjson.JSONDecodeError):
            orjson.loads(body)
        conn.start_next_cycle()
        await client.send_all(post(CHAT, "x-sim-fault: truncated_json"))
        expect(conn, "POST")
        response, body, _ = await read_response(conn, client)  # chunked, properly ended
        assert headers_of(response)[b"transfer-encoding"] == b"chunked"
        assert b"[DONE]" not in body
        conn.start_next_cycle()
        await client.send_all(GET_MODELS)
        expect(conn, "GET")
        response, _, _ = await read_response(conn, client)
        assert response.status_code == 200
        await client.aclose()


async def test_stall_sends_no_byte_until_it_ends(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    with trio.fail_after(60):
        client, server = trio.testing.memory_stream_pair()
        nursery.start_soon(serve_connection, SimulatorApp(), server)
        await client.send_all(post(CHAT, "x-sim-fault: stall:12"))
        with trio.move_on_after(11.9):
            await client.receive_some()
            raise AssertionError("bytes arrived during the stall")
        first = await client.receive_some()
        assert trio.current_time() == 12.0
        assert first.startswith(b"HTTP/1.1 200 ")
        await client.aclose()


async def test_anthropic_route_end_to_end_over_loopback(nursery: trio.Nursery) -> None:
    """Real socket, real clock: the messages route, a fault and a reset over HTTP."""
    with trio.fail_after(10):
        app = SimulatorApp(SimulatorConfig(tokens_per_second=1000, output_tokens=5, rpm=100))
        port = await nursery.start(serve_simulator, app)
        payload = {
            "model": "claude-sim",
            "max_tokens": 64,
            "stream": True,
            "messages": [{"role": "user", "content": "hello"}],
        }
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}/v1") as http:
            names = []
            async with http.stream("POST", "/messages", json=payload) as response:
                assert response.headers["request-id"] == "sim-req-1"
                async for line in response.aiter_lines():
                    if line.startswith("event: "):
                        names.append(line.removeprefix("event: "))
            overloaded = await http.post("/messages", json=payload, headers={"x-sim-fault": "529"})
            with pytest.raises(httpx.RemoteProtocolError):
                await http.post("/messages", json=payload, headers={"x-sim-fault": "reset"})
            after = await http.post("/messages", json={**payload, "stream": False})
        assert names[0] == "message_start"
        assert names[-2:] == ["message_delta", "message_stop"]
        assert overloaded.status_code == 529
        assert overloaded.json()["error"]["type"] == "overloaded_error"
        assert overloaded.headers["x-should-retry"] == "true"
        assert after.json()["usage"]["output_tokens"] == 5
        assert after.headers["x-ratelimit-remaining-requests"] == "98"


async def test_end_to_end_over_loopback(nursery: trio.Nursery) -> None:
    """Real socket, real clock: assert behaviour, not timing."""
    with trio.fail_after(10):
        app = SimulatorApp(SimulatorConfig(tokens_per_second=1000, output_tokens=8))
        port = await nursery.start(serve_simulator, app)
        payload = orjson.loads(CHAT)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}/v1") as http:
            lines = []
            async with http.stream("POST", "/chat/completions", json=payload) as response:
                assert response.headers["transfer-encoding"] == "chunked"
                async for line in response.aiter_lines():
                    if line:
                        lines.append(line)
            models = await http.get("/models")
            with pytest.raises(httpx.RemoteProtocolError):
                await http.post(
                    "/chat/completions", json=payload, headers={"x-sim-fault": "disconnect:1"}
                )
            after = await http.post("/chat/completions", json={**payload, "stream": False})
        assert lines[-1] == "data: [DONE]"
        events = [orjson.loads(line.removeprefix("data: ")) for line in lines[:-1]]
        assert events[-1]["usage"]["completion_tokens"] == 8
        assert models.status_code == 200
        assert after.json()["usage"]["completion_tokens"] == 8
        assert app.requests_seen == 4


async def test_run_simulator_announces_its_address(
    nursery: trio.Nursery, capsys: pytest.CaptureFixture[str]
) -> None:
    with trio.fail_after(10):
        port = await nursery.start(run_simulator, SimulatorConfig(), "127.0.0.1", 0)
        assert port > 0
        out = capsys.readouterr().out
        assert out == f"sluice simulator listening on http://127.0.0.1:{port}/v1\n"


def test_importing_the_package_loads_neither_h11_nor_httpx() -> None:
    code = (
        "import sys, sluice; before = set(sys.modules); import sluice.simulator as s; "
        "s.SimulatorConfig; new = set(sys.modules) - before; "
        "print(sorted(m for m in new if m.split('.')[0] in ('h11', 'httpx', 'httpcore')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=os.environ
    )
    assert out.stdout.strip() == "[]"
