"""The simulator's request-handling core, shared by the HTTP server and the httpx transport.

:class:`SimulatorApp` turns one HTTP request into a :class:`SimResponse` (or raises
:class:`SimulatedReset`). Latency is ``trio.sleep``, so under trio's ``MockClock`` it is
virtual. The pure parts (request parsing, reply planning, encoding, fault choice and shaping,
quotas) live in their own modules; this one only sequences them and waits.

Routes: ``POST /v1/chat/completions`` (OpenAI), ``POST /v1/messages`` (Anthropic),
``POST /v1/completions`` (OpenAI text completions), ``POST /v1/responses`` (OpenAI's
Responses API), ``POST /v1/embeddings``,
``POST /openai/deployments/{name}/chat/completions`` and ``.../embeddings`` (Azure OpenAI's
deployment API: OpenAI's routes, the deployment's name as the model),
``GET /v1/models``, ``GET /v1/models/{id}``, ``GET /health`` (and ``/v1/health``), the batch
APIs (OpenAI's ``/v1/files`` and ``/v1/batches``: :mod:`.openai_batches`; Anthropic's
``/v1/messages/batches``: :mod:`.message_batches`) and their counters (``GET /sim/stats``).
Anything else is a 404 with an OpenAI-style error body. The generation routes share the
latency model, the fault directives, the fault dice and the quotas; only the wire format
differs (:mod:`.routes`). Embeddings take ``ttft`` (drawn with its jitter) plus their input
tokens at ``embedding_tokens_per_second`` as their latency and count against the quotas, but
draw no faults.

Seeded latency draws are keyed on the request, not on its place in the arrival order: each
generation request draws from a generator seeded with ``latency_seed``, the digest of its
messages and how many times the same messages came before (:func:`~.latency.request_rng`).
So a client's warm-up requests, other clients, or requests arriving in another order do not
change the draws of a given request, and a test can replay them offline.
"""

from __future__ import annotations

import email.utils
import math
import random
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, TypeAlias, assert_never
from urllib.parse import unquote

import attrs
import orjson
import trio

from .._errors import StoreUnavailable
from ._body import Body, ScheduledBody, SimulatedDisconnect, TrickleBody
from ._config import SimulatorConfig
from ._directives import (
    BrokenJson,
    Directive,
    Disconnect,
    Empty,
    Fail,
    Malformed,
    Normal,
    Reset,
    Stall,
    Trickle,
    Truncated,
    choose_directive,
    parse_directive,
)
from ._latency import Generation, GenerationSlots, draw_generation, gamma_draw, request_rng
from ._quota import QuotaWindow, format_duration
from ._reply import Reply, plan_reply
from ._request import RequestError
from ._routes import ANTHROPIC, COMPLETIONS, OPENAI, RESPONSES, Route
from ._shaping import Schedule, cut_after, half, insert_after, schedule, stall_after, truncate
from ._wire import error_body, model_body, models_body

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ._batch_core import BatchStats
    from ._request import ChatRequest
    from ._shared_quota import SharedServerQuota

__all__ = ["Headers", "SimResponse", "SimulatedDisconnect", "SimulatedReset", "SimulatorApp"]

Headers: TypeAlias = Iterable[tuple[bytes, bytes]] | Mapping[str, str] | Mapping[bytes, bytes]
"""Request headers: h11-style ``(name, value)`` byte pairs, or a mapping such as httpx's."""

_JSON = (b"content-type", b"application/json")


class SimulatedReset(Exception):
    """Raised by :meth:`SimulatorApp.handle` instead of answering: the server closes the
    connection without sending any response (the ``reset`` fault).

    Front ends translate it: the HTTP server closes the socket, the httpx transport raises
    ``httpx.RemoteProtocolError`` as httpx does for a server that hangs up on a request.
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
    front end can send head and body in one write. None for paced, trickled or cut bodies."""


class SimulatorApp:
    """Answers requests as an OpenAI- and Anthropic-compatible server would, per a
    :class:`SimulatorConfig`.

    The app owns the only mutable simulator state: the request counter (request ids
    ``sim-req-1``, ``sim-req-2``, ... in arrival order, over all routes), the generation-request
    counter that indexes ``config.script`` (chat and messages requests together), the fault
    dice (``random.Random(fault_seed)``) and the quota window. Use one app per simulated
    server; it is not thread-safe (trio tasks are fine).

    Args:
        config: behaviour; the defaults answer instantly with no faults and no limits.
        wall_clock: source of the ``created`` timestamps in replies and of the dates in
            ``Retry-After`` and ``anthropic-ratelimit-*-reset`` headers (``time.time`` by
            default; inject a constant for byte-identical replies).
    """

    def __init__(
        self,
        config: SimulatorConfig | None = None,
        *,
        wall_clock: Callable[[], float] = time.time,
        shared_quota: SharedServerQuota | None = None,
    ) -> None:
        self.config = config = SimulatorConfig() if config is None else config
        self._shared_quota = shared_quota
        self._wall_clock = wall_clock
        self._script = tuple(parse_directive(d) for d in config.script)
        self._rates = _random_faults(config)
        self._rng = random.Random(config.fault_seed)
        tps = config.tokens_per_second
        self._interval = config.tokens_per_chunk / tps if tps else 0.0
        self._ping_every = (
            max(1, round(config.ping_interval / self._interval)) if self._interval else 0
        )
        self._quota = QuotaWindow(rpm=config.rpm, tpm=config.tpm) if config.has_quota else None
        self._occurrences: dict[bytes, int] = {}
        self._slots = None if config.capacity is None else GenerationSlots(config.capacity)
        self._models = models_body(config.models)
        self._requests = 0
        self._chat_requests = 0
        self._batch_apis: _BatchAPIs | None = None

    @property
    def requests_seen(self) -> int:
        """Requests handled so far, on every route."""
        return self._requests

    @property
    def chat_requests_seen(self) -> int:
        """Generation (chat and messages) requests handled so far; the next one gets
        ``script[this]``."""
        return self._chat_requests

    @property
    def batch_stats(self) -> BatchStats:
        """What the batch APIs were asked to do so far: files uploaded, batches created (per
        content digest, so a duplicate paid job shows), cancels. ``GET /sim/stats`` serves it
        as JSON."""
        return self._batches().core.stats

    def _batches(self) -> _BatchAPIs:
        if self._batch_apis is None:
            self._batch_apis = _BatchAPIs(self.config, self._wall_clock)
        return self._batch_apis

    async def _batch_api(
        self, method: str, path: str, headers: Headers, body: bytes, request_id: bytes
    ) -> SimResponse:
        route = path.partition("?")[0]
        apis = self._batches()
        now = trio.current_time()
        if route in ("/sim/stats", "/v1/sim/stats") and method == "GET":
            return _json(200, apis.core.stats.as_json(), request_id)
        if route.startswith("/v1/messages/batches"):
            host = _header(headers, b"host") or "localhost"
            found = await apis.anthropic.handle(method, path, host, body, request_id, now)
        else:
            content_type = _header(headers, b"content-type")
            found = await apis.openai.handle(method, path, content_type, body, request_id, now)
        if found is None:
            return self._other(method, route, request_id)
        if found.content is not None:
            return SimResponse(found.status, found.headers, Body([found.content]), found.content)
        assert found.body is not None
        return SimResponse(found.status, found.headers, found.body)

    async def handle(self, method: str, path: str, headers: Headers, body: bytes) -> SimResponse:
        """Answer one request.

        Returns when the response head is due: at once for errors and most faults, after
        ``ttft`` for a stream, after the whole simulated generation for a non-streaming reply.
        Always a checkpoint.

        Raises:
            SimulatedReset: the ``reset`` fault: close the connection, send nothing.
        """
        await trio.lowlevel.checkpoint()
        self._requests += 1
        request_id = b"sim-req-%d" % self._requests
        route = path.partition("?")[0]
        if route == "/v1/chat/completions" and method == "POST":
            response = await self._generate(OPENAI, headers, body, request_id)
        elif route == "/v1/messages" and method == "POST":
            response = await self._generate(ANTHROPIC, headers, body, request_id)
        elif route == "/v1/completions" and method == "POST":
            response = await self._generate(COMPLETIONS, headers, body, request_id)
        elif route == "/v1/responses" and method == "POST":
            response = await self._generate(RESPONSES, headers, body, request_id)
        elif route == "/v1/embeddings" and method == "POST":
            response = await self._embed(body, request_id)
        elif method == "POST" and (deployment := azure_deployment(route)) is not None:
            body = with_model(body, deployment)
            response = await self._generate(OPENAI, headers, body, request_id)
        elif method == "POST" and (deployment := azure_deployment(route, _AZURE_EMBED)):
            response = await self._embed(with_model(body, deployment), request_id)
        elif route.startswith(_BATCH_ROUTES):
            response = await self._batch_api(method, path, headers, body, request_id)
        else:
            response = self._other(method, route, request_id)
        if self._quota is not None and self._shared_quota is None:
            now = trio.current_time()
            response.headers.extend(self._quota.headers(now))
            if route == "/v1/messages":
                response.headers.extend(self._quota.anthropic_headers(now, self._wall_clock()))
        return response

    def _other(self, method: str, route: str, request_id: bytes) -> SimResponse:
        readable = method in ("GET", "HEAD")  # front ends drop the body of a HEAD response
        if route in ("/health", "/v1/health") and readable:
            return _json(200, b'{"status":"ok"}', request_id)
        if route == "/v1/models" and readable:
            return _json(200, self._models, request_id)
        if route.startswith("/v1/models/") and readable:
            return _json(200, model_body(route.removeprefix("/v1/models/")), request_id)
        return _json(
            404,
            error_body(f"Invalid URL ({method} {route})", "invalid_request_error"),
            request_id,
        )

    async def _generate(
        self, route: Route, headers: Headers, body: bytes, request_id: bytes
    ) -> SimResponse:
        index = self._chat_requests
        self._chat_requests += 1
        override = None
        raw = _header(headers, b"x-sim-fault")
        if raw is not None:
            try:
                override = parse_directive(raw)
            except ValueError as exc:
                return self._error(route, 400, str(exc), request_id, "x-sim-fault")
        directive = choose_directive(
            index=index, override=override, script=self._script, rates=self._rates, rng=self._rng
        )
        # Exact type tests (directives are final classes) keep the fault-free path short.
        if type(directive) is Fail:
            return self._fail(route, directive, request_id)
        if type(directive) is Reset:
            raise SimulatedReset("the simulator closed the connection without a response")
        config = self.config
        try:
            request = route.parse(body, ignore_tool_choice=config.ignore_tool_choice)
            broken = None
            if type(directive) is BrokenJson and (request.tool is None or route.breaks_tool_json):
                broken = self._rng.choice if directive.kind is None else _Always(directive.kind)
            reply = plan_reply(
                request, seed=config.seed, output_tokens=config.output_tokens, broken=broken
            )
        except RequestError as exc:
            return self._error(route, 400, exc.message, request_id, exc.param)
        if type(directive) is Empty:
            reply = Reply(tokens=(), finish_reason="stop", prompt_tokens=reply.prompt_tokens)
        tokens = reply.prompt_tokens + reply.completion_tokens + route.hidden_tokens(request)
        if self._shared_quota is not None:
            try:
                refusal = await self._shared_quota.admit(tokens)
            except StoreUnavailable as exc:
                return self._error(route, 503, str(exc), request_id, None)
            if refusal is not None:
                return self._over_quota(route, *refusal, request_id)
        elif self._quota is not None:
            refusal = self._quota.admit(trio.current_time(), tokens)
            if refusal is not None:
                return self._over_quota(route, *refusal, request_id)
        if type(directive) is Stall and directive.after is None:
            await trio.sleep(directive.seconds)
        if request.stream:
            return await self._stream(route, request, reply, request_id, directive)
        return await self._complete(route, request, reply, request_id, directive)

    async def _stream(
        self,
        route: Route,
        request: ChatRequest,
        reply: Reply,
        request_id: bytes,
        directive: Directive,
    ) -> SimResponse:
        """SSE reply: head and slot 0 at ``ttft``, slot i ``i * interval`` later, reshaped by
        the directive."""
        config = self.config
        slots = route.stream_events(
            request,
            reply,
            request_id=request_id.decode(),
            created=int(self._wall_clock()),
            tokens_per_chunk=config.tokens_per_chunk,
            paced=config.paced,
            ping_every=self._ping_every,
        )
        timing = None
        if config.latency_modelled:
            timing = self._draw_generation(len(slots), reply.completion_tokens, request.digest)
        if timing is not None:
            await trio.sleep_until(timing.first_chunk_at)
        elif config.ttft:
            await trio.sleep(config.ttft)
        head = route.stream_head(request_id)
        plan: Schedule
        cut = False
        match directive:
            case Normal() | BrokenJson() | Empty() | Stall(after=None) | Trickle():
                pieces = [b"".join(slot) for slot in slots]
                if len(pieces) == 1 and not isinstance(directive, Trickle):
                    return SimResponse(200, head, Body(pieces), pieces[0])
                body: Body | ScheduledBody
                if timing is not None:
                    body = ScheduledBody(pieces, timing.chunk_times())
                else:
                    body = Body(pieces, start=trio.current_time(), interval=self._interval)
                if isinstance(directive, Trickle):
                    trickle = TrickleBody(body, size=directive.size, interval=directive.interval)
                    return SimResponse(200, head, trickle)
                return SimResponse(200, head, body)
            case Disconnect(after=after):
                after = config.disconnect_after if after is None else after
                plan, cut = cut_after(schedule(slots, self._interval), after), True
            case Malformed(after=after):
                plan = insert_after(schedule(slots, self._interval), after, route.malformed)
            case Stall(seconds=seconds, after=after):
                assert after is not None  # a stall before the head was waited out already
                plan = stall_after(schedule(slots, self._interval), after, seconds)
            case Truncated():
                plan = truncate(schedule(slots, self._interval))
            case Fail() | Reset():
                raise AssertionError(f"{directive} is answered before the reply")
            case _:
                assert_never(directive)
        start = trio.current_time()
        pieces = [b"".join(events) for _, events in plan]
        times = [start + at for at, _ in plan]
        return SimResponse(200, head, ScheduledBody(pieces, times, cut=cut))

    async def _complete(
        self,
        route: Route,
        request: ChatRequest,
        reply: Reply,
        request_id: bytes,
        directive: Directive,
    ) -> SimResponse:
        """JSON reply, due when the equivalent stream would have sent its last chunk.

        Faults that count events treat the body as one piece: ``disconnect`` sends half of it
        and cuts, ``stall_after`` sends half, then the rest ``S`` seconds later, ``malformed``
        and ``truncated_json`` send half of it as the whole body.
        """
        config = self.config
        content = route.body(
            request, reply, request_id=request_id.decode(), created=int(self._wall_clock())
        )
        chunks = -(-reply.completion_tokens // config.tokens_per_chunk)
        if config.latency_modelled:
            timing = self._draw_generation(chunks, reply.completion_tokens, request.digest)
            await trio.sleep_until(timing.end)
        else:
            delay = config.ttft + max(chunks - 1, 0) * self._interval
            if delay:
                await trio.sleep(delay)
        if type(directive) is Normal:
            return SimResponse(
                200, route.json_head(len(content), request_id), Body([content]), content
            )
        match directive:
            case Normal() | BrokenJson() | Stall(after=None):
                return self._json(route, 200, content, request_id)
            case Empty():
                return self._json(route, 200, b"", request_id)
            case Truncated() | Malformed():
                return self._json(route, 200, half(content), request_id)
            case Disconnect():
                head = route.json_head(len(content), request_id)
                return SimResponse(200, head, Body([half(content)], cut=True))
            case Stall(seconds=seconds):
                first = half(content)
                now = trio.current_time()
                body = ScheduledBody([first, content[len(first) :]], [now, now + seconds])
                return SimResponse(200, route.json_head(len(content), request_id), body)
            case Trickle(size=size, interval=interval):
                trickle = TrickleBody(Body([content]), size=size, interval=interval)
                return SimResponse(200, route.json_head(len(content), request_id), trickle)
            case Fail() | Reset():
                raise AssertionError(f"{directive} is answered before the reply")
            case _:
                assert_never(directive)

    def _request_rng(self, digest: bytes) -> random.Random:
        """The latency generator of the request whose messages have ``digest`` (see the
        module docstring). The occurrence counts are forgotten past 100,000 distinct
        requests, to bound memory; a repeat after that draws as its first occurrence."""
        seen = self._occurrences
        if len(seen) >= 100_000 and digest not in seen:
            seen.clear()
        occurrence = seen.get(digest, 0)
        seen[digest] = occurrence + 1
        return request_rng(self.config.latency_seed, digest, occurrence)

    def _draw_generation(self, chunks: int, tokens: int, digest: bytes) -> Generation:
        """This request's drawn timing (:mod:`.latency`), booked from now."""
        config = self.config
        tps = config.tokens_per_second
        return draw_generation(
            self._request_rng(digest),
            now=trio.current_time(),
            chunks=chunks,
            tokens=tokens,
            tokens_per_chunk=config.tokens_per_chunk,
            ttft=config.ttft,
            ttft_jitter=config.ttft_jitter,
            token_interval=1 / tps if tps else 0.0,
            itl_jitter=config.itl_jitter,
            slots=self._slots,
        )

    async def _embed(self, body: bytes, request_id: bytes) -> SimResponse:
        """An embeddings reply (:mod:`.embeddings`): refused as OpenAI refuses, held to the
        quotas as a chat request is (its tokens are the inputs'), due after a drawn ``ttft``
        plus the inputs' tokens at ``embedding_tokens_per_second``."""
        from ._embeddings import embeddings_body, parse_embeddings, refusal_body

        try:
            request = parse_embeddings(body)
        except RequestError as exc:
            return self._json(OPENAI, 400, refusal_body(exc), request_id)
        if self._shared_quota is not None:
            try:
                refusal = await self._shared_quota.admit(request.tokens)
            except StoreUnavailable as exc:
                return self._error(OPENAI, 503, str(exc), request_id, None)
            if refusal is not None:
                return self._over_quota(OPENAI, *refusal, request_id)
        elif self._quota is not None:
            refusal = self._quota.admit(trio.current_time(), request.tokens)
            if refusal is not None:
                return self._over_quota(OPENAI, *refusal, request_id)
        config = self.config
        digest = derive_digest(request.inputs)
        delay = gamma_draw(self._request_rng(digest), config.ttft, config.ttft_jitter)
        if config.embedding_tokens_per_second:
            delay += request.tokens / config.embedding_tokens_per_second
        if delay:
            await trio.sleep(delay)
        return _json(200, embeddings_body(request, seed=config.seed), request_id)

    def _json(
        self,
        route: Route,
        status: int,
        content: bytes,
        request_id: bytes,
        extra: list[tuple[bytes, bytes]] | None = None,
    ) -> SimResponse:
        head = route.json_head(len(content), request_id)
        if extra:
            head.extend(extra)
        return SimResponse(status, head, Body([content]), content)

    def _error(
        self, route: Route, status: int, message: str, request_id: bytes, param: str | None = None
    ) -> SimResponse:
        content = route.error("invalid_request_error", message, request_id.decode(), param)
        return self._json(route, status, content, request_id)

    def _fail(self, route: Route, fail: Fail, request_id: bytes) -> SimResponse:
        extra: list[tuple[bytes, bytes]] = []
        if fail.status == 429 or fail.retry_after is not None:
            seconds = self.config.retry_after if fail.retry_after is None else fail.retry_after
            if fail.http_date:
                when = math.ceil(self._wall_clock() + seconds)
                extra.append((b"retry-after", email.utils.formatdate(when, usegmt=True).encode()))
            else:
                extra.append((b"retry-after", b"%d" % math.ceil(seconds)))
                if route is OPENAI or route is RESPONSES:
                    extra.append((b"retry-after-ms", b"%d" % round(seconds * 1000)))
        if route is ANTHROPIC and fail.status == 529:
            extra.append((b"x-should-retry", b"true"))  # as Anthropic's recorded 529s carry
        content = route.status_error(fail.status, request_id.decode())
        return self._json(route, fail.status, content, request_id, extra)

    def _over_quota(
        self, route: Route, wait: float, dimension: str, request_id: bytes
    ) -> SimResponse:
        limit = self.config.rpm if dimension == "requests" else self.config.tpm
        extra = [(b"retry-after", b"%d" % math.ceil(wait))]
        if route is OPENAI or route is RESPONSES:
            extra.append((b"retry-after-ms", b"%d" % math.ceil(wait * 1000)))
            content = error_body(
                f"Rate limit reached on {dimension} per min (simulated): Limit {limit}. "
                f"Please try again in {format_duration(wait)}.",
                dimension,
                None,
                "rate_limit_exceeded",
            )
        else:
            content = route.error(
                "rate_limit_error",
                f"This request would exceed the rate limit of {limit} {dimension} per minute "
                "(simulated).",
                request_id.decode(),
            )
        return self._json(route, 429, content, request_id, extra)


_BATCH_ROUTES = ("/v1/files", "/v1/batches", "/v1/messages/batches", "/sim/stats", "/v1/sim/stats")


class _BatchAPIs:
    """The batch routes, made on first use (most apps never see one)."""

    def __init__(self, config: SimulatorConfig, wall_clock: Callable[[], float]) -> None:
        from ._batch_core import BatchCore
        from ._message_batches import MessageBatches
        from ._openai_batches import OpenAIBatches

        self.core = core = BatchCore(config, wall_clock)
        self.openai = OpenAIBatches(core)
        self.anthropic = MessageBatches(core)


class _Always:
    """A broken-JSON chooser that always names one kind."""

    __slots__ = ("kind",)

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def __call__(self, kinds: Sequence[str]) -> str:
        return self.kind


def _random_faults(config: SimulatorConfig) -> tuple[tuple[Directive, float], ...]:
    """The config's fault rates as ``(directive, probability)``, zero rates left out."""
    rates: list[tuple[Directive, float]] = [
        (Fail(429), config.rate_429),
        (Fail(500), config.rate_500),
        (Disconnect(), config.rate_disconnect),
        (Fail(529), config.rate_529),
        (BrokenJson(), config.rate_broken_json),
    ]
    rates += [(parse_directive(text), rate) for text, rate in config.fault_rates]
    return tuple((directive, rate) for directive, rate in rates if rate > 0)


def derive_digest(inputs: Sequence[str]) -> bytes:
    """The digest that keys an embeddings request's latency draw."""
    import hashlib

    import orjson

    return hashlib.blake2b(orjson.dumps(["embeddings", *inputs]), digest_size=16).digest()


def _json(status: int, content: bytes, request_id: bytes) -> SimResponse:
    head = [_JSON, (b"content-length", b"%d" % len(content)), (b"x-request-id", request_id)]
    return SimResponse(status, head, Body([content]), content)


def _header(headers: Headers, name: bytes) -> str | None:
    """The value of header ``name`` (lower-case), matched case-insensitively; None if absent."""
    items: Iterable[tuple[str | bytes, str | bytes]]
    items = headers.items() if isinstance(headers, Mapping) else headers
    for key, value in items:
        key_b = key if isinstance(key, bytes) else key.encode("latin-1")
        if key_b.lower() == name:
            return value.decode("latin-1") if isinstance(value, bytes) else value
    return None


_AZURE_PREFIX = "/openai/deployments/"
_AZURE_SUFFIX = "/chat/completions"
_AZURE_EMBED = "/embeddings"


def azure_deployment(route: str, operation: str = _AZURE_SUFFIX) -> str | None:
    """The deployment named by an Azure OpenAI path of ``operation`` (chat completions, or
    ``/embeddings``), or None for any other path."""
    if not (route.startswith(_AZURE_PREFIX) and route.endswith(operation)):
        return None
    name = unquote(route[len(_AZURE_PREFIX) : -len(operation)])
    return name if name and "/" not in name else None


def with_model(body: bytes, model: str) -> bytes:
    """``body`` with its ``model`` set to ``model`` (Azure names the model in the path). A body
    that is not a JSON object is left for the request parser to refuse."""
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body
    if not isinstance(parsed, dict):
        return body
    parsed["model"] = model
    return orjson.dumps(parsed)
