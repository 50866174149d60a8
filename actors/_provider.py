"""The ProviderActor: one per backend; sends each admitted attempt and streams its reply.

It owns the backend's HTTP client (and so its connection pool) and its protocol codec. For each
``StartAttempt`` it starts one task that sends the request, decodes the reply as it arrives, and
pushes every batch of decoded events straight into the consumer's stream (one hop). It releases
the attempt's pending slot at the first chunk, reports usage to the TokenLedger, and answers the
Supervisor with exactly one ``AttemptOutcome``. Expected failures become typed errors in that
outcome; only bugs propagate.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any, assert_never

import attrs
import orjson
import trio

import sluice._errors as errors
import sluice._events as event_kinds
from sluice._content_length import BadContentLength, parse_content_length
from sluice._errors import BadRequest, CallError, Overloaded, ProtocolError
from sluice._events import FirstToken, TextDelta, UsageReported
from sluice._mail import (
    AttemptOutcome,
    AttemptSucceeded,
    ProviderMsg,
    RecordUsage,
    Settle,
    StartAttempt,
    attempt_failure,
)
from sluice._messages import Usage
from sluice._protocols.decode_shared import FOREIGN, STREAM, foreign_reply, reply_form, too_large
from sluice._redact import redact_error, with_headers
from sluice.transport._errors import (
    TransportError,
)

from ._attempt_parts import argument_streams, call_error, events_from_output, read_all, read_into
from ._tell import put, take

if TYPE_CHECKING:
    from collections.abc import Mapping

    from sluice._embeddings import EmbedOutput
    from sluice._errors import CallTimeout
    from sluice._events import CallEvent, DeltaEvent
    from sluice._mail_rare import AttemptFailed, ConsumerGone, ReloadProvider
    from sluice._protocols.base import AttemptOutput, HttpRequest, StreamDecoder
    from sluice.transport._base import HotResponse

    from ._provider_context import ProviderContext

__all__ = ["run_provider"]

_MAX_ERROR_BODY = 64 * 1024
ERROR_BODY_WAIT = 5.0
"""Seconds an error reply's body may take to arrive; then what arrived is decoded."""
_SNIPPET_BODY = 4096
_CHARS_PER_TOKEN = 4


async def run_provider(
    inbox: trio.MemoryReceiveChannel[ProviderMsg],
    ctx: ProviderContext,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve attempts concurrently; return when the inbox closes and every attempt has ended.

    The inbox is not closed here: after a crash the restarter runs this again on it. While
    this runs, the actor's door (:class:`~sluice.actors._doors.ProviderDoor`) starts attempts
    in its nursery.
    """
    sweeping = trio.CancelScope()
    state = ctx.state
    async with trio.open_nursery() as attempts:
        if hasattr(ctx.transport, "sweep"):
            attempts.start_soon(_sweep_idle_connections, ctx.transport, sweeping)

        def start_attempt(msg: StartAttempt) -> None:
            attempts.start_soon(_serve_attempt, ctx, msg, name=msg.call.call_id)

        state.start_attempt = start_attempt
        task_status.started()
        try:
            await _serve(inbox, ctx, attempts, sweeping)
        finally:
            # Before the nursery closes to new tasks: the door sends to the mailbox again.
            state.start_attempt = None


async def _serve(
    inbox: trio.MemoryReceiveChannel[ProviderMsg],
    ctx: ProviderContext,
    attempts: trio.Nursery,
    sweeping: trio.CancelScope,
) -> None:
    """The mailbox loop: what arrives in the mailbox (not through the door) starts here."""
    while True:
        try:
            msg = await take(inbox)
        except trio.EndOfChannel:
            sweeping.cancel()  # the attempts still running finish; then we return
            return
        match msg:
            case StartAttempt():
                attempts.start_soon(_serve_attempt, ctx, msg, name=msg.call.call_id)
            case _:
                _reload(ctx, msg)


def _reload(ctx: ProviderContext, msg: ReloadProvider) -> None:
    """The one other message (its class loads with the first reload)."""
    from sluice._mail_rare import ReloadProvider

    match msg:
        case ReloadProvider(spec=spec):
            ctx.state.reload(spec)
        case _:
            assert_never(msg)


async def _sweep_idle_connections(transport: Any, scope: trio.CancelScope) -> None:
    """Every keep-alive period, close the pool's connections that have expired idle."""
    with scope:
        while True:
            await trio.sleep(transport.keepalive_expiry)
            await transport.sweep()


async def _serve_attempt(ctx: ProviderContext, msg: StartAttempt) -> None:
    """Run one attempt and answer with its outcome.

    If the attempt dies without an outcome (a bug here, or the actor's crash cancelling it),
    the answer is :class:`~sluice._mail_rare.AttemptLost` with what it had delivered, and the
    Supervisor resubmits the attempt; a reply channel closed unanswered means the same.
    """
    # One coroutine from here to the reply's reads (no helper awaited in between, no context
    # manager object): every open stream holds each frame of its attempt while it waits.
    state = ctx.state
    state.in_flight += 1
    try:
        attempt = _Attempt(ctx, msg)
        outcome: AttemptOutcome | None = None
        observer = ctx.observer
        watch = observer.attempt_started(msg) if observer is not None else None
        usage = None
        try:
            outcome = await attempt.run()
        finally:
            await ctx.limiter.settle(attempt.settlement(outcome))
            usage = attempt.usage(outcome)
            if usage is not None:
                await ctx.ledger.record(usage)
            failed = attempt_failure(outcome)
            if observer is not None and failed is None:
                observer.attempt_ended(
                    watch, msg, outcome, attempt.first_token_at, usage, attempt.delivered
                )
            if outcome is None:  # cancelled (the actor crashed) or a bug: the attempt is lost
                from sluice._mail_rare import AttemptLost

                _reply(msg, AttemptLost(attempt.delivered))
        if failed is not None:
            call = msg.call
            # The boundary where server text enters sluice's errors: no key passes it, nor a
            # secret the call sent in its own headers (looked for only off the success path).
            own = call.embed.extra_headers if call.embed is not None else call.request.extra_headers
            error = redact_error(failed.error, with_headers(state.secrets, own)).in_context(
                call_id=call.call_id, provider=ctx.spec.name, model=call.model, attempt=msg.attempt
            )
            outcome = _failed(error, failed.delivered)
            if observer is not None:  # told the redacted error: it goes to logs and hooks
                observer.attempt_ended(
                    watch, msg, outcome, attempt.first_token_at, usage, attempt.delivered
                )
        _reply(msg, outcome)
    finally:
        msg.reply_to.close()
        state.in_flight -= 1


def _consumer_gone() -> ConsumerGone:
    """The outcome of an attempt whose consumer left (its class loads with the first)."""
    from sluice._mail_rare import ConsumerGone

    return ConsumerGone()


def _failed(error: CallError, delivered: int) -> AttemptFailed:
    """The outcome of an attempt that failed (its class loads with the first)."""
    from sluice._mail_rare import AttemptFailed

    return AttemptFailed(error, delivered)


def _reply(msg: StartAttempt, outcome: AttemptOutcome) -> None:
    """Answer the Supervisor (once per attempt: the reply holds one answer)."""
    try:
        msg.reply_to.send_nowait(outcome)
    except (trio.BrokenResourceError, trio.ClosedResourceError, trio.WouldBlock):
        # The Supervisor's call task is gone (the runtime shutting down, Ctrl-C): it left
        # the reply it handed over, so nobody waits for this answer.
        pass


class _Attempt:
    """The state of one attempt while it runs: what was delivered, whether the slot is free."""

    __slots__ = (
        "arguments",
        "call",
        "ctx",
        "delivered",
        "first_deadline",
        "first_floor",
        "first_token_at",
        "headers",
        "hedge_at",
        "idle",
        "idle_floor",
        "msg",
        "output_chars",
        "scope",
        "usage_seen",
    )

    def __init__(self, ctx: ProviderContext, msg: StartAttempt) -> None:
        self.ctx = ctx
        self.msg = msg
        self.call = msg.call
        self.delivered = 0
        self.first_token_at: float | None = None
        self.headers: Mapping[str, str] | None = None
        self.output_chars = 0
        """Characters of output decoded so far (for an estimate when no usage comes)."""
        self.usage_seen: Usage | None = None
        """The last usage the provider reported while streaming."""
        self.scope = msg.scope
        """The attempt's one cancel scope (see :meth:`run`)."""
        self.idle = msg.call.idle_timeout
        """Seconds a reply may go without progress: the call's idle deadline, else the
        reply limits' ``read_idle_timeout`` (so some limit holds without configuration)."""
        self.idle_floor = False
        """The idle limit in force is the reply limits', not the call's."""
        if self.idle is None and ctx.limits.read_idle_timeout is not None:
            self.idle = ctx.limits.read_idle_timeout
            self.idle_floor = True
        self.first_floor = False
        """The deadline before the first chunk is the reply limits' ``read_idle_timeout``,
        as the call has no first-token deadline (set by :meth:`run`)."""
        self.first_deadline = math.inf
        """When the first-token deadline (or its stand-in) passes (set by :meth:`run`)."""
        self.hedge_at = math.inf
        """When the group's hedge time passes, while it still applies (see
        :attr:`StartAttempt.hedge`): inf once the answer began."""
        self.arguments = argument_streams(msg.call)
        """Shapes the consumer's deltas of a call with tools (see :func:`argument_streams`)."""

    def _tally(self, decoded: list[DeltaEvent]) -> None:
        for event in decoded:
            kind = type(event)
            if kind is TextDelta:  # every chunk: no union built
                self.output_chars += len(event.text)  # type: ignore[union-attr]
            elif isinstance(event, UsageReported):
                self.usage_seen = event.usage
            # The rarer kinds last: their classes load with the first (sluice._events.rare).
            elif kind is event_kinds.ReasoningDelta:
                self.output_chars += len(event.text)  # type: ignore[union-attr]
            elif isinstance(event, event_kinds.ToolCallDelta):
                self.output_chars += len(event.arguments) + len(event.name or "")

    def usage(self, outcome: AttemptOutcome | None) -> RecordUsage | None:
        """What to tell the TokenLedger this attempt used (None: nothing was generated).

        The provider's usage when it reported it whole; otherwise, once output had begun (the
        attempt broke, was abandoned, or the provider sends no usage), an estimate marked as
        such: the prompt as the provider counted it or as estimated at admission, and the
        output decoded so far at about four characters a token, or what the provider reported
        so far if that is more.
        """
        call = self.call
        if isinstance(outcome, AttemptSucceeded) and outcome.output.usage is not None:
            usage, estimated = outcome.output.usage, False
        elif self.first_token_at is None:
            return None
        else:
            seen = self.usage_seen
            output = -(-self.output_chars // _CHARS_PER_TOKEN)
            if seen is None:
                usage, estimated = Usage(call.cost.input_tokens, output), True
            else:
                estimated = output > seen.output_tokens or not seen.input_tokens
                usage = attrs.evolve(
                    seen,
                    input_tokens=seen.input_tokens or call.cost.input_tokens,
                    output_tokens=max(output, seen.output_tokens),
                )
        return RecordUsage(
            self.ctx.spec.name, call.model, usage, call.request.tag, estimated=estimated
        )

    def settlement(self, outcome: AttemptOutcome | None) -> Settle:
        """What to tell the RateLimiter when the attempt ends (``None``: it was cancelled).

        Usage settles the token reservation: the reported usage on success; nothing when the
        attempt failed before its first chunk (the provider generated nothing); otherwise the
        estimate stands, since the provider may have processed the whole prompt.
        """
        ticket = self.msg.ticket
        usage = None if self.first_token_at is not None else Usage()
        if isinstance(outcome, AttemptSucceeded):
            return Settle(ticket, "ok", outcome.output.usage, headers=self.headers)
        failed = attempt_failure(outcome)
        if failed is None:  # cancelled, or the consumer left
            return Settle(ticket, "failed", usage, headers=self.headers)
        error = failed.error
        if isinstance(error, errors.RateLimited):  # (its class loads with a failure's)
            return Settle(
                ticket,
                "rate_limited",
                usage,
                wait=error.retry_after,
                quota=error.quota == "quota",
                headers=self.headers,
            )
        if isinstance(error, Overloaded):
            return Settle(ticket, "overloaded", usage, headers=self.headers)
        return Settle(ticket, "failed", usage, headers=self.headers)

    async def run(self) -> AttemptOutcome:
        """The attempt, under ONE cancel scope whose deadline moves as the stream goes.

        Until the first chunk it is the first-token deadline, then each read pushes it to the
        idle deadline, and it never passes the call's total deadline; the consumer cancels it
        when it leaves (``Call.abandon``), even a quiet consumer that would otherwise only be
        noticed at the end. When it fires, the time says which deadline it was.
        """
        call = self.call
        now = trio.current_time()
        first = call.first_token_timeout
        if first is None:
            first = self.ctx.limits.read_idle_timeout
            self.first_floor = first is not None
        self.first_deadline = min(call.deadline, now + first if first is not None else math.inf)
        hedge = self.msg.hedge
        if hedge is not None and now + hedge < self.first_deadline:
            self.hedge_at = now + hedge
        scope = self.scope  # made by the Supervisor, so a consumer that leaves can cancel it
        scope.deadline = min(self.first_deadline, self.hedge_at)
        with scope:
            try:
                # The exchange itself is written out here rather than awaited from a method
                # of its own: a frame less that every open stream holds while it waits. The
                # request is dropped once sent: an open stream holds none of it (its body
                # above all).
                request = self._request()
                phases = call.phases
                if phases is None:
                    response = await self.ctx.transport.send(
                        request.method, request.url, request.headers, request.body
                    )
                else:
                    response = await self.ctx.transport.send(
                        request.method, request.url, request.headers, request.body, phases=phases
                    )
                del request
                self.headers = response.headers
                try:
                    if response.status >= 400:
                        return await self._error_reply(response)
                    output: AttemptOutput | EmbedOutput
                    if not self._streams(response):
                        output = await self._read_whole(response)
                    else:
                        # A quiet call's reader awaited from here, not from _read_stream: a
                        # frame less that each open stream holds.
                        decoder = self._stream_decoder()
                        if self.call.quiet and hasattr(decoder, "feed_quiet"):
                            output = await self._read_quietly(response, decoder)
                        else:
                            output = await self._read_stream(response, decoder)
                finally:
                    # Read to its end, a response has nothing to close: no shielded scope.
                    if getattr(response, "holds_connection", True):
                        with trio.CancelScope(shield=True):
                            await response.aclose()
                request_id = self.headers.get("x-request-id") or self.headers.get("request-id")
                return AttemptSucceeded(output, self.first_token_at, request_id, self.delivered)
            except CallError as exc:
                return _failed(exc, self.delivered)
            except TransportError as exc:
                return _failed(
                    call_error(exc, begun=self.headers is not None, delivered=self.delivered),
                    self.delivered,
                )
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return _consumer_gone()
        if call.abandoned:
            return _consumer_gone()
        return _failed(self._timeout(), self.delivered)

    def _timeout(self) -> CallTimeout:
        """Which deadline fired, told apart by the clock."""
        from sluice._errors import CallTimeout  # loaded by the first timeout

        call = self.call
        now = trio.current_time()
        if now >= call.deadline:
            return CallTimeout("the call's total deadline passed", timeout_kind="total")
        if self.first_token_at is None and now >= self.hedge_at:
            what = "no reply" if self.headers is None else "no first chunk"
            return CallTimeout(
                f"{what} within the model group's hedge time ({self.msg.hedge:g} s): the call"
                " moves on to another deployment",
                timeout_kind="hedge",
            )
        if self.first_token_at is None:
            if self.first_floor:
                return CallTimeout(
                    f"no reply for {self.ctx.limits.read_idle_timeout:g} s "
                    "(reply_limits.read_idle_timeout; no first-token deadline is set)",
                    timeout_kind="first_token",
                )
            if self.headers is None:
                return CallTimeout(
                    "no reply before the first-token deadline", timeout_kind="first_token"
                )
            return CallTimeout("no first token before the deadline", timeout_kind="first_token")
        return self._idle_timeout()

    def _idle_timeout(self) -> CallTimeout:
        from sluice._errors import CallTimeout

        if self.idle_floor:
            return CallTimeout(
                f"no progress for {self.idle:g} s in the middle of the reply "
                "(reply_limits.read_idle_timeout)",
                timeout_kind="idle",
            )
        return CallTimeout(
            f"no data for {self.call.idle_timeout} s in the middle of the stream",
            timeout_kind="idle",
        )

    def _streams(self, response: HotResponse) -> bool:
        """Whether the reply is a stream. It is read as it came, whatever was asked: a server
        may answer a streamed request with one JSON completion, and a base URL may point at
        a web site (:meth:`_read_whole` reads both)."""
        form = reply_form(response.headers.get("content-type"))
        if form is None:
            form = STREAM if self.call.request.stream else None
        if form is STREAM:
            return True
        if self.hedge_at < math.inf:
            # A whole reply has begun: its body may take the whole generation to come.
            self.hedge_at = math.inf
            self.scope.deadline = self.first_deadline
        return False

    async def _read_whole(self, response: HotResponse) -> AttemptOutput | EmbedOutput:
        """A reply that came whole: one JSON completion (decoded whole: one request, one
        generation billed), or a foreign body such as a web page (a terminal error).

        Raises:
            CallError: the reply is a web page or other foreign body, too large, or not what
                the protocol sends.
        """
        content_type = response.headers.get("content-type")
        if reply_form(content_type) is FOREIGN:
            snippet = await read_all(response, _SNIPPET_BODY)
            raise foreign_reply(
                response.status,
                content_type or "",
                snippet[:_SNIPPET_BODY],
                response.headers.get("location"),
            )
        return await self._read_body(response)

    def _request(self) -> HttpRequest:
        """The attempt's request, built with the provider's current settings.

        Raises:
            BadRequest: the caller's data cannot be written as JSON.
        """
        ctx, call = self.ctx, self.call
        spec = ctx.state.settings
        base_url = spec.base_url or ctx.base_url  # None: served here, at the actor's URL
        try:
            if call.embed is None:
                request = ctx.codec.build_request(
                    call.request,
                    base_url=base_url,
                    api_key=spec.api_key.reveal() if spec.api_key else None,
                    headers=spec.headers,
                )
            else:
                from sluice._embed_calls import embed_for  # only embedding calls load these
                from sluice.providers._embedding import build_embed

                request = build_embed(
                    ctx.codec,
                    spec,
                    embed_for(call),
                    base_url=base_url,
                    api_key=spec.api_key.reveal() if spec.api_key else None,
                )
        except orjson.JSONEncodeError as exc:
            # The caller's data (extra_body, a schema) cannot be written as JSON: nested too
            # deep, or a value JSON has no form for. That is this call's fault alone; left to
            # propagate, it would crash the actor and, repeated, end the runtime.
            raise BadRequest(f"the request cannot be written as JSON: {exc}") from None
        return request

    async def _error_reply(self, response: HotResponse) -> AttemptOutcome:
        # The status and headers already tell what happened (a 429 and its pause, say); the
        # body only adds detail. It is read under a shielded scope with a bound of its own:
        # under the attempt's, a body slower than the first-token deadline would turn the
        # error into a timeout (no cooldown, a breaker failure). What arrived is decoded.
        pieces: list[bytes] = []
        with trio.move_on_after(ERROR_BODY_WAIT, shield=True):
            await read_into(pieces, response, _MAX_ERROR_BODY)
        body = b"".join(pieces)
        headers = self.headers or {}
        error = self.ctx.codec.decode_error(
            response.status, headers, body[:_MAX_ERROR_BODY], wall_now=time.time()
        )
        verdict = headers.get("x-should-retry")
        if verdict in ("true", "false"):
            error = attrs.evolve(error, should_retry=verdict == "true")
        return _failed(error, 0)

    async def _first_chunk(self) -> list[CallEvent]:
        """Note the first chunk: free the pending slot and build the FirstToken event."""
        now = self.first_token_at = trio.current_time()
        self.hedge_at = math.inf
        await self.ctx.limiter.release(self.msg.ticket)
        call = self.call
        first = FirstToken(call.call_id, self.msg.attempt, now, now - call.submitted_at)
        return [*self.msg.lead, first]

    def _stream_decoder(self) -> StreamDecoder:
        """The codec's decoder for this attempt's streamed reply, within the reply limits."""
        limits = self.ctx.limits
        return self.ctx.codec.stream_decoder(
            self.call.call_id, max_line=limits.max_line_bytes, max_event=limits.max_event_bytes
        )

    async def _read_stream(self, response: HotResponse, decoder: StreamDecoder) -> AttemptOutput:
        call = self.call
        limits = self.ctx.limits
        events_out = None if call.quiet else call.events
        idle = self.idle
        scope = self.scope
        total = call.deadline
        left = limits.max_stream_bytes
        while data := await response.read_some():
            left -= len(data)
            if left < 0:
                raise too_large("the streamed reply", limits.max_stream_bytes, "max_stream_bytes")
            events = decoder.feed(data)
            if not events:
                continue
            self._tally(events)
            if self.arguments is not None:
                events = self.arguments.annotate(events)
            batch: list[CallEvent] | list[DeltaEvent] = events
            if self.first_token_at is None:
                batch = await self._first_chunk()
                batch.extend(events)
                if idle is None:
                    scope.deadline = total
            if events_out is not None:
                # One hop per network read; no checkpoint of our own while the consumer keeps
                # up (the next read is one), and backpressure when its buffer fills.
                await put(events_out, batch)
                self.delivered += len(events)
            if idle is not None:
                scope.deadline = min(total, trio.current_time() + idle)
            del data, events, batch  # delivered: an open stream holds none of it while it waits
        try:
            return decoder.finish()
        except errors.StreamBroken as exc:  # (looked up only when something was raised)
            raise attrs.evolve(exc, events_delivered=self.delivered) from None

    async def _read_quietly(self, response: HotResponse, decoder: Any) -> AttemptOutput:
        """:meth:`_read_stream` for a quiet call whose decoder can skip the deltas (it has
        ``feed_quiet``, ``output_chars`` and ``usage_seen``, as the OpenAI decoder does): none
        is made, and what :meth:`_tally` would have counted is taken from the decoder when the
        reading stops. The slot, the deadlines and the limits move exactly as there."""
        limits = self.ctx.limits
        idle = self.idle
        scope = self.scope
        total = self.call.deadline
        left = limits.max_stream_bytes
        try:
            while data := await response.read_some():
                left -= len(data)
                if left < 0:
                    raise too_large(
                        "the streamed reply", limits.max_stream_bytes, "max_stream_bytes"
                    )
                if not decoder.feed_quiet(data):  # no bound method held while the stream waits
                    continue
                # A read that completed the body gave the connection back: nothing waits
                # under the scope any more, so its deadline is left as it is.
                holds = getattr(response, "holds_connection", True)
                if self.first_token_at is None:
                    # What _first_chunk does but its events: nobody reads a quiet call's.
                    self.first_token_at = trio.current_time()
                    self.hedge_at = math.inf
                    # A reply whose first chunk came with its end: the Settle, told in this
                    # same step (no wait lies between: the next read returns b"" at once, no
                    # consumer is fed), frees the slot, one message instead of two.
                    if holds:
                        await self.ctx.limiter.release(self.msg.ticket)
                        if idle is None:
                            scope.deadline = total
                if idle is not None and holds:
                    scope.deadline = min(total, trio.current_time() + idle)
                del data  # an open stream holds none of it while it waits
        finally:
            self.output_chars = decoder.output_chars
            self.usage_seen = decoder.usage_seen
        try:
            return decoder.finish()  # type: ignore[no-any-return]
        except errors.StreamBroken as exc:  # (looked up only when something was raised)
            raise attrs.evolve(exc, events_delivered=self.delivered) from None

    async def _whole_body(self, response: HotResponse) -> bytes:
        """The whole body, at most ``max_body_bytes`` of it.

        A whole reply is the model's first token, so the first-token deadline (or the reply
        limits' ``read_idle_timeout`` standing in for it) bounds its reading: some servers
        send the head at once and the body only when the generation is done.

        Raises:
            ProtocolError: the body is larger than the limit (terminal, not retried).
        """
        limit = self.ctx.limits.max_body_bytes
        headers = response.headers
        length = headers.get("content-length")
        if length is not None and "content-encoding" not in headers:
            try:
                declared = parse_content_length(length)
            except BadContentLength:
                declared = 0  # both transports refuse it first; the loop below still bounds it
            if declared > limit:
                raise too_large("the reply body", limit, "max_body_bytes")
        pieces: list[bytes] = []
        size = 0
        while piece := await response.read_some():
            pieces.append(piece)
            size += len(piece)
            if size > limit:
                raise too_large("the reply body", limit, "max_body_bytes")
        return b"".join(pieces)

    def _decode_as_stream(self, body: bytes, error: ProtocolError) -> AttemptOutput:
        """A whole body that is no JSON document: decoded as a stream if it is one (a server
        that labels its stream ``application/json``), else ``error`` stands."""
        decoder = self._stream_decoder()
        try:
            decoder.feed(body)
            return decoder.finish()
        except CallError:
            raise error from None

    async def _read_body(self, response: HotResponse) -> AttemptOutput | EmbedOutput:
        body = await self._whole_body(response)
        codec = self.ctx.codec
        embed = self.call.embed
        if embed is not None:
            # An embedding reply has no deltas: decoded whole, it is the first chunk.
            from sluice.providers._embedding import decode_embed

            vectors = decode_embed(codec, body, len(embed.input))
            await self._first_chunk()
            return vectors
        try:
            output = codec.decode_body(body)
        except ProtocolError as exc:
            output = self._decode_as_stream(body, exc)
        deltas = list(events_from_output(self.call.call_id, output))
        self._tally(deltas)
        if self.arguments is not None:
            deltas = self.arguments.annotate(deltas)
        batch: list[CallEvent] = await self._first_chunk()
        if not self.call.quiet:
            batch.extend(deltas)
            await put(self.call.events, batch)
            self.delivered += len(deltas)
        return output
