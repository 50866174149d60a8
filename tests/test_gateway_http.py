"""The gateway's HTTP server: a client that disconnects mid-stream cancels the upstream call,
slow clients are cut off, limits hold, keep-alive and drain behave. Virtual time over memory
streams, except the idle-connections test, which needs real sockets."""

import functools
import resource
import socket

import httpx
import orjson
import pytest
import trio
import trio.testing

import sluice
from sluice._gateway import GatewaySettings, Server, ServerLimits
from sluice.simulator import SimulatorConfig

from .gateway_helpers import ANTHROPIC, chat_body, gateway_harness, messages_body
from .helpers import virtual_deadline

OPEN = GatewaySettings(require_key=False)
PACED = SimulatorConfig(tokens_per_second=100, output_tokens=1000)
"""A 10-second stream, one token every 10 ms."""


def _request(path: str, body: dict, *extra: bytes) -> bytes:
    data = orjson.dumps(body)
    head = b"POST %s HTTP/1.1\r\nhost: gw\r\ncontent-type: application/json\r\n" % path.encode()
    head += b"".join(extra)
    return head + b"content-length: %d\r\n\r\n" % len(data) + data


async def _read_until(stream, marker: bytes) -> bytes:
    seen = b""
    while marker not in seen:
        piece = await stream.receive_some(65536)
        assert piece, seen
        seen += piece
    return seen


@pytest.mark.parametrize(
    ("path", "body", "extra"),
    [
        ("/v1/chat/completions", chat_body(stream=True), ()),
        ("/v1/messages", messages_body(stream=True, max_tokens=2000), ANTHROPIC),
    ],
)
@virtual_deadline(60)
async def test_disconnect_mid_stream_cancels_upstream_within_100ms(
    autojump_clock, path, body, extra
):
    async with gateway_harness(
        sim=PACED, config={"ledger": {"persist": False}}, settings=OPEN
    ) as gw:
        client = gw.connect()
        headers = [b"%s: %s\r\n" % (k.encode(), v.encode()) for k, v in extra]
        await client.send_all(_request(path, body, *headers))
        await _read_until(client, b"delta")
        await trio.sleep(0.5)  # well into the stream
        assert gw.sim_closed == []
        left_at = trio.current_time()
        await client.aclose()
        with trio.fail_after(1):
            await gw.sim_closed_event.wait()
        assert gw.sim_closed[0] - left_at <= 0.1
        await trio.sleep(0.1)
        assert (await gw.gateway.rt.statistics()).calls_in_flight == 0
        assert gw.server.active == 0


@virtual_deadline(60)
async def test_headers_one_byte_per_second_are_cut_off_at_the_header_timeout(autojump_clock):
    limits = ServerLimits(header_timeout=10.0)
    async with gateway_harness(limits=limits) as gw:
        client = gw.connect()
        started = trio.current_time()
        reply = b""

        async def trickle():
            for byte in b"GET /health HTTP/1.1\r\nhost: gw\r\nx-padding: " + b"a" * 100:
                try:
                    await client.send_all(bytes([byte]))
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    return
                await trio.sleep(1)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(trickle)
            while piece := await client.receive_some(65536):
                reply += piece
            ended = trio.current_time()
            nursery.cancel_scope.cancel()
        assert ended - started == pytest.approx(10.0)
        assert reply.startswith(b"HTTP/1.1 408 ") and b"connection: close" in reply


@virtual_deadline(60)
async def test_slow_body_is_cut_off_at_the_body_timeout(autojump_clock):
    limits = ServerLimits(body_timeout=5.0)
    async with gateway_harness(limits=limits) as gw:
        client = gw.connect()
        await client.send_all(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\ncontent-length: 100\r\n\r\n{"
        )
        started = trio.current_time()
        reply = await _read_until(client, b"\r\n\r\n")
        assert trio.current_time() - started == pytest.approx(5.0)
        assert reply.startswith(b"HTTP/1.1 408 ")


@virtual_deadline(60)
async def test_idle_keep_alive_connections_close_after_the_keepalive_timeout(autojump_clock):
    limits = ServerLimits(keepalive_timeout=30.0)
    async with gateway_harness(limits=limits) as gw:
        client = gw.connect()
        await client.send_all(b"GET /health HTTP/1.1\r\nhost: gw\r\n\r\n")
        await _read_until(client, b'{"status":"ok","pid":')
        answered = trio.current_time()
        assert await client.receive_some(100) == b""
        assert trio.current_time() - answered == pytest.approx(30.0)


@virtual_deadline(60)
async def test_size_limits(autojump_clock):
    limits = ServerLimits(max_body_bytes=1000, max_header_bytes=2048)
    async with gateway_harness(limits=limits) as gw:
        client = gw.connect()
        await client.send_all(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\ncontent-length: 5000\r\n\r\n"
        )
        reply = await _read_until(client, b"\r\n\r\n")
        assert reply.startswith(b"HTTP/1.1 413 ")
        client = gw.connect()
        await client.send_all(
            b"GET /health HTTP/1.1\r\nhost: gw\r\nx-big: " + b"a" * 4000 + b"\r\n\r\n"
        )
        reply = await _read_until(client, b"\r\n\r\n")
        assert reply.startswith(b"HTTP/1.1 431 ")


@virtual_deadline(60)
async def test_connection_cap_and_requests_per_connection(autojump_clock):
    limits = ServerLimits(max_connections=2, max_requests_per_connection=2)
    async with gateway_harness(limits=limits) as gw:
        first, second = gw.connect(), gw.connect()
        await trio.sleep(0.01)
        third = gw.connect()
        reply = await _read_until(third, b"\r\n\r\n")
        assert reply.startswith(b"HTTP/1.1 503 ")
        ping = b"GET /health HTTP/1.1\r\nhost: gw\r\n\r\n"
        await first.send_all(ping + ping)  # pipelined
        replies = b""
        while piece := await first.receive_some(65536):
            replies += piece
        assert replies.count(b"HTTP/1.1 200 ") == 2 and replies.count(b"connection: close") == 1
        await second.aclose()


@virtual_deadline(60)
async def test_drain_closes_idle_connections_and_finishes_streams(autojump_clock):
    async with gateway_harness(
        sim=SimulatorConfig(tokens_per_second=100, output_tokens=100), settings=OPEN
    ) as gw:
        idle = gw.connect()
        busy = gw.connect()
        await busy.send_all(_request("/v1/chat/completions", chat_body(stream=True)))
        await _read_until(busy, b"delta")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(gw.server.drain)
            assert await idle.receive_some(100) == b""
            rest = b""
            while piece := await busy.receive_some(65536):
                rest += piece
        assert rest.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n")
        late = gw.connect()
        assert (await _read_until(late, b"\r\n\r\n")).startswith(b"HTTP/1.1 503 ")


async def test_two_thousand_idle_connections_do_not_stop_new_requests():
    needed = 4500  # both ends of every connection live in this process
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed:
        assert hard >= needed, f"the test needs {needed} file descriptors; the hard limit is {hard}"
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
    config = sluice.load_config({"ledger": {"persist": False}})
    idle: list[socket.socket] = []
    try:
        async with trio.open_nursery() as nursery:
            port = await nursery.start(
                lambda task_status: sluice.serve(
                    config, port=0, settings=OPEN, task_status=task_status
                )
            )
            for _ in range(2000):
                sock = socket.create_connection(("127.0.0.1", port))
                idle.append(sock)
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
                with trio.fail_after(10):
                    reply = await client.post("/v1/chat/completions", json=chat_body())
            assert reply.status_code == 200
            assert reply.json()["choices"][0]["message"]["content"]
            nursery.cancel_scope.cancel()
    finally:
        for sock in idle:
            sock.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.mark.parametrize(
    ("path", "body", "extra", "marker"),
    [
        ("/v1/chat/completions", chat_body(stream=True), (), b'data: {"error":'),
        (
            "/v1/messages",
            messages_body(stream=True),
            (b"anthropic-version: 2023-06-01\r\n",),
            b"event: error\ndata: ",
        ),
    ],
)
@virtual_deadline(60)
async def test_a_stream_that_breaks_after_output_ends_with_an_error_event(
    autojump_clock, path, body, extra, marker
):
    # The simulator cuts every stream after 3 events: output has reached the client, so the
    # call is not retried (a retry could not take back what was sent) and the stream ends
    # with an error event in the client's format.
    sim = SimulatorConfig(rate_disconnect=1.0, disconnect_after=3, tokens_per_second=100)
    async with gateway_harness(sim=sim, settings=OPEN) as gw:
        client = gw.connect()
        await client.send_all(_request(path, body, *extra))
        reply = await _read_until(client, b"0\r\n\r\n")
        assert reply.startswith(b"HTTP/1.1 200 ")
        assert b"delta" in reply and marker in reply
        assert gw.sim.chat_requests_seen == 1


@virtual_deadline(60)
async def test_a_call_that_fails_before_output_gets_an_error_status(autojump_clock):
    sim = SimulatorConfig(script=("500",) * 10)
    config = {"ledger": {"persist": False}, "retry": {"max_attempts": 2, "base_delay": 0}}
    async with gateway_harness(sim=sim, config=config, settings=OPEN) as gw:
        status, _, body = await gw.call("/v1/chat/completions", chat_body(stream=True))
        assert status == 502 and orjson.loads(body)["error"]["type"] == "server_error"
        status, _, body = await gw.call("/v1/messages", messages_body(), headers=ANTHROPIC)
        assert status == 502 and orjson.loads(body)["error"]["type"] == "api_error"
        # One upstream request each: the gateway leaves retrying what its client can see to
        # the client (issue 27), whatever the runtime's max_attempts.
        assert gw.sim.chat_requests_seen == 2


@virtual_deadline(60)
async def test_chunked_bodies_and_expect_continue_are_read_by_h11(autojump_clock):
    async with gateway_harness(settings=OPEN) as gw:
        client = gw.connect()
        data = orjson.dumps(chat_body())
        await client.send_all(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\ntransfer-encoding: chunked\r\n\r\n"
            + b"%x\r\n%s\r\n" % (10, data[:10])
            + b"%x\r\n%s\r\n0\r\n\r\n" % (len(data) - 10, data[10:])
        )
        reply = await _read_until(client, b'"finish_reason":"stop"')
        assert reply.startswith(b"HTTP/1.1 200 ")
        # The same connection goes on with a content-length request and 100-continue.
        await client.send_all(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\nexpect: 100-continue\r\n"
            b"content-length: %d\r\n\r\n" % len(data)
        )
        assert (await _read_until(client, b"\r\n\r\n")).startswith(b"HTTP/1.1 100 Continue")
        await client.send_all(data)
        reply = await _read_until(client, b'"finish_reason":"stop"')
        assert b"HTTP/1.1 200 " in reply


@virtual_deadline(10)
async def test_a_failing_handler_never_ends_the_server(autojump_clock):
    async def handler(request, respond):
        if request.path == b"/gone":
            raise trio.BrokenResourceError("the client went away mid-write")
        if request.path == b"/bug":
            raise RuntimeError("a bug")
        await respond.send(200, [], b"fine")

    server = Server(handler)
    async with trio.open_nursery() as nursery:

        async def connect():
            client, end = trio.testing.memory_stream_pair()
            nursery.start_soon(server.serve_connection, end)
            return client

        for path, expected in ((b"/gone", b""), (b"/bug", b"HTTP/1.1 500 ")):
            client = await connect()
            await client.send_all(b"GET %s HTTP/1.1\r\nhost: gw\r\n\r\n" % path)
            reply = b""
            while piece := await client.receive_some(65536):
                reply += piece
            assert reply.startswith(expected)
        client = await connect()
        await client.send_all(b"GET /ok HTTP/1.1\r\nhost: gw\r\n\r\n")
        assert (await _read_until(client, b"fine")).startswith(b"HTTP/1.1 200 ")
        assert server.internal_errors == 1  # the bug; a client gone is no error
        nursery.cancel_scope.cancel()


@virtual_deadline(60)
async def test_a_client_that_stops_reading_is_cut_off_after_the_write_timeout(autojump_clock):
    limits = ServerLimits(write_timeout=5.0)
    async with gateway_harness(sim=PACED, settings=OPEN, limits=limits) as gw:
        # A lockstep pair has no buffer: the gateway's write waits until the client reads.
        client, end = trio.testing.lockstep_stream_pair()
        gw.nursery.start_soon(gw.server.serve_connection, end)
        await client.send_all(_request("/v1/chat/completions", chat_body(stream=True)))
        await _read_until(client, b"delta")
        stopped = trio.current_time()
        with trio.fail_after(10):
            await gw.sim_closed_event.wait()
        assert 5.0 <= gw.sim_closed[0] - stopped <= 5.1
        await trio.sleep(0.1)
        assert (await gw.gateway.rt.statistics()).calls_in_flight == 0
        assert gw.server.connections == 0


async def _serve_on_loopback(nursery, server: Server) -> int:
    listeners = await nursery.start(
        functools.partial(trio.serve_tcp, server.serve_connection, 0, host="127.0.0.1")
    )
    return int(listeners[0].socket.getsockname()[1])


async def test_over_a_real_socket_big_responses_arrive_whole_and_a_non_reader_is_cut_off():
    """Responses go straight to the socket while it takes them; what it does not take goes
    the usual way, so a body far larger than the socket's buffer arrives byte for byte, and a
    client that stops reading is still cut off after the write timeout."""
    big = bytes(range(256)) * (16 * 1024 * 4)  # 16 MiB
    ended: list[type[BaseException]] = []
    cut_off = trio.Event()

    async def handler(request, respond):
        try:
            if request.path == b"/stream":
                respond.start(200, [(b"content-type", b"application/octet-stream")])
                await respond.write(big)
                await respond.finish(b"end")
            else:
                await respond.send(200, [(b"content-type", b"application/octet-stream")], big)
        except BaseException as exc:
            ended.append(type(exc))
            cut_off.set()
            raise

    server = Server(handler, ServerLimits(write_timeout=0.5))
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            port = await _serve_on_loopback(nursery, server)
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
                reply = await client.get("/whole")
                assert reply.status_code == 200 and reply.content == big
                reply = await client.get("/stream")
                assert reply.status_code == 200 and reply.content == big + b"end"
            # A client that sends a request and never reads its response.
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            await stream.send_all(b"GET /whole HTTP/1.1\r\nhost: a\r\n\r\n")
            await cut_off.wait()
            assert ended == [trio.BrokenResourceError]
            await stream.aclose()
            nursery.cancel_scope.cancel()
