"""The simulator's request-handling core, shared by the HTTP server and the httpx transport.

:class:`SimulatorApp` turns one HTTP request into a :class:`SimResponse`. Latency is
``trio.sleep``, so under trio's ``MockClock`` it is virtual. The pure parts (request parsing,
reply planning, encoding, fault choice) live in their own modules; this one only sequences
them and waits.

Routes: ``POST /v1/chat/completions``, ``GET /v1/models``, ``GET /v1/models/{id}``. Anything
else is a 404 with an OpenAI-style error body.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import TypeAlias, assert_never

import attrs
import trio

from .config import SimulatorConfig
from .directives import Disconnect, Fail, Normal, choose_directive, parse_directive
from .reply import plan_reply
from .request import RequestError, parse_chat_request
from .wire import (
    ChunkEncoder,
    completion_body,
    error_body,
    model_body,
    models_body,
    sse_slots,
    status_error_body,
)

__all__ = ["Headers", "SimResponse", "SimulatedDisconnect", "SimulatorApp"]

Headers: TypeAlias = Iterable[tuple[bytes, bytes]] | Mapping[str, str] | Mapping[bytes, bytes]
"""Request headers: h11-style ``(name, value)`` byte pairs, or a mapping such as httpx's."""

_JSON = (b"content-type", b"application/json")
_SSE = (b"content-type", b"text/event-stream")
_NO_CACHE = (b"cache-control", b"no-cache")


class SimulatedDisconnect(Exception):
    """Raised by a :attr:`SimResponse.body` at the point where the server drops the connection.

    Front ends translate it: the HTTP server closes the socket without finishing the body,
    the httpx transport raises ``httpx.RemoteProtocolError``.
    """


@attrs.frozen
class SimResponse:
    """One response: status and headers are known at once, the body comes in timed pieces."""

    status: int
    headers: list[tuple[bytes, bytes]]
    body: AsyncIterator[bytes]
    """Body pieces; each is due when it is yielded. May raise :class:`SimulatedDisconnect`."""
    content: bytes | None = None
    """The whole body when it is ready at once (``body`` then yields exactly this, once), so a
    front end can send head and body in one write. None for paced or cut bodies."""


class _Body:
    """Yields ``slots[i]`` at ``start + i * interval`` (slot 0 at once), then ends or cuts."""

    __slots__ = ("_cut", "_interval", "_next", "_slots", "_start")

    def __init__(
        self, slots: list[bytes], *, start: float = 0.0, interval: float = 0.0, cut: bool = False
    ) -> None:
        self._slots = slots
        self._start = start
        self._interval = interval
        self._cut = cut
        self._next = 0

    def __aiter__(self) -> _Body:
        return self

    async def __anext__(self) -> bytes:
        i = self._next
        if i >= len(self._slots):
            if self._cut:
                raise SimulatedDisconnect("the simulator dropped the connection mid-body")
            raise StopAsyncIteration
        if i and self._interval:
            await trio.sleep_until(self._start + i * self._interval)
        self._next = i + 1
        return self._slots[i]


class SimulatorApp:
    """Answers requests as an OpenAI-compatible server would, per a :class:`SimulatorConfig`.

    The app owns the only mutable simulator state: the request counter (request ids
    ``sim-req-1``, ``sim-req-2``, ... in arrival order, over all routes), the chat-request
    counter that indexes ``config.script``, and the fault dice (``random.Random(fault_seed)``).
    Use one app per simulated server; it is not thread-safe (trio tasks are fine).

    Args:
        config: behaviour; the defaults answer instantly with no faults.
        wall_clock: source of the ``created`` timestamps in replies (``time.time`` by default;
            inject a constant for byte-identical replies).
    """

    def __init__(
        self,
        config: SimulatorConfig | None = None,
        *,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config = SimulatorConfig() if config is None else config
        self._wall_clock = wall_clock
        self._script = tuple(parse_directive(d) for d in config.script)
        self._rates = (config.rate_429, config.rate_500, config.rate_disconnect)
        self._rng = random.Random(config.fault_seed)
        tps = config.tokens_per_second
        self._interval = config.tokens_per_chunk / tps if tps else 0.0
        self._models = models_body(config.models)
        self._requests = 0
        self._chat_requests = 0

    @property
    def requests_seen(self) -> int:
        """Requests handled so far, on every route."""
        return self._requests

    @property
    def chat_requests_seen(self) -> int:
        """Chat-completion requests handled so far (the next one gets ``script[this]``)."""
        return self._chat_requests

    async def handle(self, method: str, path: str, headers: Headers, body: bytes) -> SimResponse:
        """Answer one request.

        Returns when the response head is due: at once for errors and faults, after ``ttft``
        for a stream, after the whole simulated generation for a non-streaming completion.
        Always a checkpoint.
        """
        await trio.lowlevel.checkpoint()
        self._requests += 1
        request_id = b"sim-req-%d" % self._requests
        route = path.partition("?")[0]
        if route == "/v1/chat/completions" and method == "POST":
            return await self._chat(headers, body, request_id)
        if route == "/v1/models" and method == "GET":
            return _json(200, self._models, request_id)
        if route.startswith("/v1/models/") and method == "GET":
            return _json(200, model_body(route.removeprefix("/v1/models/")), request_id)
        return _json(
            404,
            error_body(f"Invalid URL ({method} {route})", "invalid_request_error"),
            request_id,
        )

    async def _chat(self, headers: Headers, body: bytes, request_id: bytes) -> SimResponse:
        index = self._chat_requests
        self._chat_requests += 1
        override = None
        raw = _header(headers, b"x-sim-fault")
        if raw is not None:
            try:
                override = parse_directive(raw)
            except ValueError as exc:
                body_ = error_body(str(exc), "invalid_request_error", "x-sim-fault")
                return _json(400, body_, request_id)
        directive = choose_directive(
            index=index, override=override, script=self._script, rates=self._rates, rng=self._rng
        )
        cut: int | None = None
        match directive:
            case Fail(status=status, retry_after=retry_after):
                return self._fail(status, retry_after, request_id)
            case Disconnect(after=after):
                cut = self.config.disconnect_after if after is None else after
            case Normal():
                pass
            case _:
                assert_never(directive)
        config = self.config
        try:
            request = parse_chat_request(body)
            reply = plan_reply(request, seed=config.seed, output_tokens=config.output_tokens)
        except RequestError as exc:
            body_ = error_body(exc.message, "invalid_request_error", exc.param)
            return _json(400, body_, request_id)
        completion_id = f"chatcmpl-sim-{self._requests}"
        created = int(self._wall_clock())
        if request.stream:
            encoder = ChunkEncoder(
                completion_id=completion_id,
                created=created,
                model=request.model,
                include_usage=request.include_usage,
            )
            slots = sse_slots(
                encoder,
                reply,
                tokens_per_chunk=config.tokens_per_chunk,
                paced=config.paced,
                cut_after=cut,
            )
            if config.ttft:
                await trio.sleep(config.ttft)
            head = [_SSE, _NO_CACHE, (b"x-request-id", request_id)]
            if cut is None and len(slots) == 1:
                return SimResponse(200, head, _Body(slots), slots[0])
            start = trio.current_time()
            return SimResponse(
                200, head, _Body(slots, start=start, interval=self._interval, cut=cut is not None)
            )
        content = completion_body(
            completion_id=completion_id, created=created, model=request.model, reply=reply
        )
        chunks = -(-reply.completion_tokens // config.tokens_per_chunk)
        delay = config.ttft + max(chunks - 1, 0) * self._interval
        if delay:
            await trio.sleep(delay)
        if cut is None:
            return _json(200, content, request_id)
        part = content[: len(content) // 2]
        head = [_JSON, (b"content-length", b"%d" % len(content)), (b"x-request-id", request_id)]
        return SimResponse(200, head, _Body([part], cut=True))

    def _fail(self, status: int, retry_after: float | None, request_id: bytes) -> SimResponse:
        extra: list[tuple[bytes, bytes]] = []
        if status == 429 or retry_after is not None:
            seconds = self.config.retry_after if retry_after is None else retry_after
            extra.append((b"retry-after", b"%d" % math.ceil(seconds)))
            extra.append((b"retry-after-ms", b"%d" % round(seconds * 1000)))
        return _json(status, status_error_body(status), request_id, extra)


def _json(
    status: int, content: bytes, request_id: bytes, extra: list[tuple[bytes, bytes]] | None = None
) -> SimResponse:
    head = [_JSON, (b"content-length", b"%d" % len(content)), (b"x-request-id", request_id)]
    if extra:
        head.extend(extra)
    return SimResponse(status, head, _Body([content]), content)


def _header(headers: Headers, name: bytes) -> str | None:
    """The value of header ``name`` (lower-case), matched case-insensitively; None if absent."""
    items: Iterable[tuple[str | bytes, str | bytes]]
    items = headers.items() if isinstance(headers, Mapping) else headers
    for key, value in items:
        key_b = key if isinstance(key, bytes) else key.encode("latin-1")
        if key_b.lower() == name:
            return value.decode("latin-1") if isinstance(value, bytes) else value
    return None
