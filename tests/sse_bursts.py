"""A chat-completions (or text-completions) server of the suite's own for the load tester's
tests: it streams its reply in bursts, several SSE events in one write (as vLLM and proxies do
when they batch), and keeps every request it read, so a test can check what the load tester
sent.

:class:`BurstServer` serves one connection at a time from either side of the clock: over
trio memory streams (``open_stream``, for sluice's transport under ``autojump_clock``) or on
a loopback TCP port (:meth:`BurstServer.serve_tcp`, real clock). Each reply is ``writes``
writes of ``per_write`` one-word content events, ``spacing`` seconds apart, the first
``first_after`` seconds after the request; then a usage event and ``[DONE]``. ``reply_words``
cuts the reply short (a server that stops early, or ignores ``ignore_eos``); ``status`` other
than 200 answers an error with an ``x-request-id`` header instead (quoting the request's
``echo_header`` in its message, as some proxies do). ``completions`` streams OpenAI text
completions (``choices[].text``) instead of chat deltas, ``responses`` OpenAI's Responses
API events (``response.output_text.delta``, then ``response.completed`` with the usage and no
``[DONE]``); ``chunk_per_event`` frames each event
of a write as an HTTP chunk of its own (still one write), as a server that flushes per event
does when the network coalesces its writes.
"""

from __future__ import annotations

import statistics
from typing import Any

import attrs
import orjson
import pytest
import trio
import trio.testing

from sluice import RuntimeConfig
from sluice._config import ProviderConfig, Secret
from sluice._jobs.loadtest import ClosedLoop, Lengths, LoadTest, Workload, loadtest_config

PIECE = 65536
KEY = "sk-test"


def runtime_config(base_url: str) -> RuntimeConfig:
    """A load test's runtime config for provider ``t`` at ``base_url`` (key :data:`KEY`)."""
    providers = {"t": ProviderConfig(base_url=base_url, api_key=Secret(KEY))}
    return loadtest_config(RuntimeConfig(providers=providers), "t", respect_limits=False)


def burst_test(requests: int, endpoint: str = "chat") -> LoadTest:
    """``requests`` one after another to model ``t:m``, 16 output tokens asked of each."""
    return LoadTest(
        model="t:m",
        shape=ClosedLoop(1),
        requests=requests,
        workload=Workload(input_tokens=Lengths("fixed", 3), output_tokens=Lengths("fixed", 16)),
        warmup=0,
        endpoint=endpoint,
    )


def assert_write_gaps_shared(run: Any, server: BurstServer, requests: int) -> None:
    """``run`` (a load test against ``server`` under the autojump clock) has ``requests``
    records, each ``server``'s whole reply timed exactly: the first write's tokens at the
    TTFT, each later write's tokens sharing that write's gap (exact but for the last bit of
    a double: times are relative to the run's start)."""
    exact = 1e-15
    gap = server.spacing / server.per_write
    assert len(run.records) == requests
    for record in run.records:
        assert record.ok and record.output_tokens == server.writes * server.per_write
        assert record.chunks == server.writes
        later = server.per_write * (server.writes - 1)
        assert record.itls == pytest.approx((gap,) * later, abs=exact)
        assert record.icls == pytest.approx((server.spacing,) * (server.writes - 1), abs=exact)
        assert record.ttst == record.ttft == pytest.approx(server.first_after, abs=exact)
    itl = run.aggregates["itl_s"]
    assert itl["p50"] == pytest.approx(gap, abs=exact)
    assert itl["max"] - itl["min"] < exact


def assert_loopback_gaps_shared(run: Any, server: BurstServer, requests: int) -> None:
    """``run`` (a load test against ``server`` over loopback, real clock) has ``requests``
    records, and each later write's tokens share the gap before their network read: equal
    samples within a write, and at the median within a millisecond of the gap the server
    really left between its writes. Judged against the server's own write times, not its
    nominal spacing, so a loaded box that wakes the server late does not fail it."""
    per_write = server.per_write
    assert len(run.records) == requests and all(r.ok for r in run.records)
    misses = []
    for record in run.records:
        wrote = server.wrote[record.request_id]
        assert len(record.itls) == per_write * (len(wrote) - 1)
        for k in range(1, len(wrote)):
            shares = record.itls[(k - 1) * per_write : k * per_write]
            # One stamp per read: every token of a write gets the same share (stamped per
            # event, three in four were microseconds).
            assert max(shares) - min(shares) < 1e-9, record.itls
            misses.append(abs(shares[0] - (wrote[k] - wrote[k - 1]) / per_write))
    assert statistics.median(misses) < 0.001, misses


@attrs.define
class Received:
    """One request as the server read it."""

    head: bytes
    body: dict[str, Any]

    @property
    def path(self) -> str:
        """The request line's target, e.g. ``/v1/responses``."""
        return self.head.split(b"\r\n", 1)[0].split(b" ")[1].decode()

    def header(self, name: str) -> str | None:
        for line in self.head.split(b"\r\n")[1:]:
            key, _, value = line.partition(b":")
            if key.strip().lower() == name.lower().encode():
                return value.strip().decode()
        return None


@attrs.define
class BurstServer:
    writes: int = 4
    per_write: int = 4
    spacing: float = 0.125
    first_after: float = 0.05
    reply_words: int | None = None
    """Words of the reply when it stops early (None: ``writes * per_write``)."""
    status: int = 200
    echo_header: str | None = None
    completions: bool = False
    responses: bool = False
    chunk_per_event: bool = False
    received: list[Received] = attrs.Factory(list)
    wrote: dict[str, list[float]] = attrs.Factory(dict)
    """Each reply's delta writes (by its ``x-request-id``): when each was handed to the stream."""
    nursery: trio.Nursery | None = None

    @property
    def words(self) -> int:
        full = self.writes * self.per_write
        return full if self.reply_words is None else min(full, self.reply_words)

    async def open_stream(self, host: str, port: int) -> trio.abc.Stream:
        """For ``FastTransport(open_stream=...)``: a memory stream served by :meth:`serve`."""
        assert self.nursery is not None
        client, server = trio.testing.memory_stream_pair()
        self.nursery.start_soon(self.serve, server)
        return client

    async def serve_tcp(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Serve on a free loopback port; ``nursery.start`` returns the port."""
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        task_status.started(listeners[0].socket.getsockname()[1])
        await trio.serve_listeners(self.serve, listeners)

    async def serve(self, stream: trio.abc.Stream) -> None:
        try:
            while await self._one(stream):
                pass
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            await trio.aclose_forcefully(stream)

    async def _one(self, stream: trio.abc.Stream) -> bool:
        """Answer one request; False when the client closed instead of sending one."""
        request = await _read_request(stream)
        if request is None:
            return False
        self.received.append(request)
        number = len(self.received)
        if self.status != 200:
            echoed = request.header(self.echo_header) if self.echo_header else None
            message = "scripted failure" + (f" for {echoed}" if echoed else "")
            body = orjson.dumps({"error": {"message": message, "type": "server_error"}})
            await stream.send_all(
                f"HTTP/1.1 {self.status} Oops\r\ncontent-type: application/json\r\n"
                f"x-request-id: req-{number}\r\ncontent-length: {len(body)}\r\n\r\n".encode()
                + body
            )
            return True
        await stream.send_all(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            + f"x-request-id: req-{number}\r\n".encode()
            + b"transfer-encoding: chunked\r\n\r\n"
            + (_chunked(_RESPONSES_START) if self.responses else b"")
        )
        words = self.words
        sent = 0
        start = trio.current_time() + self.first_after
        for write in range(self.writes):
            await trio.sleep_until(start + write * self.spacing)
            count = min(self.per_write, words - sent)
            if count <= 0:
                break
            events = [self._delta(f" w{sent + i}") for i in range(count)]
            self.wrote.setdefault(f"req-{number}", []).append(trio.current_time())
            if self.chunk_per_event:
                await stream.send_all(b"".join(_chunked(event) for event in events))
            else:
                await stream.send_all(_chunked(b"".join(events)))
            sent += count
        if self.responses:
            end = _event({"type": "response.completed", "response": _response("completed", sent)})
            await stream.send_all(_chunked(end) + b"0\r\n\r\n")
            return True
        usage = {"prompt_tokens": 3, "completion_tokens": sent, "total_tokens": 3 + sent}
        final: dict[str, Any] = {
            "id": "chatcmpl-burst",
            "object": "chat.completion.chunk",
            "model": "m",
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
            "usage": usage,
        }
        if self.completions:
            final |= {"id": "cmpl-burst", "object": "text_completion", "choices": []}
        tail = _event(final)
        await stream.send_all(_chunked(tail + b"data: [DONE]\n\n") + b"0\r\n\r\n")
        return True

    def _delta(self, text: str) -> bytes:
        if self.responses:
            return _event(
                {
                    "type": "response.output_text.delta",
                    "item_id": "msg_burst",
                    "output_index": 0,
                    "content_index": 0,
                    "delta": text,
                }
            )
        if not self.completions:
            return _delta(text)
        return _event(
            {
                "id": "cmpl-burst",
                "object": "text_completion",
                "model": "m",
                "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": None}],
            }
        )


def _event(data: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(data) + b"\n\n"


def _delta(text: str) -> bytes:
    return _event(
        {
            "id": "chatcmpl-burst",
            "object": "chat.completion.chunk",
            "model": "m",
            "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}],
        }
    )


def _response(status: str, words: int | None = None) -> dict[str, Any]:
    """The Responses API's response object: in progress (no output yet), or completed with
    its message of ``words`` words and the usage counting them."""
    response: dict[str, Any] = {
        "id": "resp_burst",
        "object": "response",
        "status": status,
        "model": "m",
        "output": [],
        "usage": None,
    }
    if words is not None:
        text = "".join(f" w{i}" for i in range(words))
        content = [{"type": "output_text", "text": text, "annotations": []}]
        message = {**_MESSAGE, "status": "completed", "content": content}
        usage = {"input_tokens": 3, "output_tokens": words, "total_tokens": 3 + words}
        response |= {"output": [message], "usage": usage}
    return response


_MESSAGE = {"type": "message", "id": "msg_burst", "role": "assistant", "content": []}
_RESPONSES_START = _event(
    {"type": "response.created", "response": _response("in_progress")}
) + _event({"type": "response.output_item.added", "output_index": 0, "item": _MESSAGE})


def _chunked(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


async def _read_request(stream: trio.abc.Stream) -> Received | None:
    buf = b""
    while b"\r\n\r\n" not in buf:
        data = await stream.receive_some(PIECE)
        if not data:
            return None
        buf += data
    head, _, body = buf.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        data = await stream.receive_some(PIECE)
        if not data:
            return None
        body += data
    return Received(head, orjson.loads(body) if body else {})
