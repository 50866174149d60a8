"""The attempt's pieces that need no actor state: reading a body (whole or up to a limit), a
whole reply's deltas, what shapes the deltas of a call with tools, and a transport's exception
turned into our error tree. Kept apart from :mod:`sluice.actors._provider`, which only carries
out an attempt's steps."""

from __future__ import annotations

from typing import TYPE_CHECKING

import sluice._events as events
from sluice._errors import CallError, ConnectionFailed, ProtocolError
from sluice._events import TextDelta, UsageReported, signature_events
from sluice.transport._errors import (
    ConnectError,
    ConnectTimeout,
    ProxyError,
    ResponseTimeout,
    ResponseTooLarge,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

    from sluice._events import DeltaEvent
    from sluice._mail import Call
    from sluice._protocols.base import AttemptOutput
    from sluice._tools.streaming import ArgumentStreams, ForcedReplyDeltas
    from sluice.transport._base import HotResponse
    from sluice.transport._errors import TransportError

__all__ = ["argument_streams", "call_error", "events_from_output", "read_all", "read_into"]


async def read_all(response: HotResponse, limit: int | None) -> bytes:
    """The whole body, or its first ``limit`` bytes (then the rest is left unread)."""
    pieces: list[bytes] = []
    await read_into(pieces, response, limit)
    return b"".join(pieces)


async def read_into(pieces: list[bytes], response: HotResponse, limit: int | None) -> None:
    """Append the body's pieces to ``pieces`` as they come, up to just past ``limit`` bytes;
    if cancelled, ``pieces`` holds what arrived."""
    size = 0
    while piece := await response.read_some():
        pieces.append(piece)
        size += len(piece)
        if limit is not None and size > limit:
            break


def events_from_output(call_id: str, output: AttemptOutput) -> Iterator[DeltaEvent]:
    """The deltas a streamed reply would have carried, for a reply that came whole."""
    message = output.message
    if message.reasoning:  # (the rarer kinds' classes load with the first: sluice._events.rare)
        yield events.ReasoningDelta(call_id, message.reasoning)
    yield from signature_events(call_id, message)
    if message.text:
        yield TextDelta(call_id, message.text)
    for index, tool_call in enumerate(message.tool_calls):
        yield events.ToolCallDelta(
            call_id, index, tool_call.id, tool_call.name, tool_call.arguments
        )
    if output.usage is not None:
        yield UsageReported(call_id, output.usage)


def call_error(exc: TransportError, *, begun: bool, delivered: int) -> CallError:
    """The error in our tree for a transport's exception: the one place where that happens.

    Timeouts are retried (:class:`CallTimeout`); a reply that broke a size limit is a terminal
    :class:`ProtocolError`; other malformed HTTP and broken connections are retried as
    :class:`ConnectionFailed` (before the reply) or :class:`StreamBroken` (during it), since a
    proxy or network fault can cause them once. The transport's exception is its cause.
    """
    from sluice._errors import CallTimeout, StreamBroken  # loaded by a failure

    error: CallError
    if isinstance(exc, ConnectTimeout):
        error = CallTimeout(f"connecting timed out: {exc}", timeout_kind="connect")
    elif isinstance(exc, ResponseTimeout):
        error = CallTimeout(str(exc), timeout_kind="first_token")
    elif isinstance(exc, ResponseTooLarge):
        # Terminal: a server that sends an absurd size does so again (see decode_shared).
        error = ProtocolError(f"the reply broke a size limit: {exc}", should_retry=False)
    elif isinstance(exc, ProxyError):
        error = ConnectionFailed(f"the proxy failed: {exc}", should_retry=False)
    elif isinstance(exc, ConnectError):
        error = ConnectionFailed(f"could not connect: {exc}")
    else:
        detail = str(exc) or type(exc).__name__
        if begun:  # the reply's head had come
            error = StreamBroken(
                f"the connection broke mid-stream: {detail}", events_delivered=delivered
            )
        else:
            error = ConnectionFailed(f"the connection broke before a reply: {detail}")
    error.__cause__ = exc
    return error


def argument_streams(call: Call) -> ArgumentStreams | ForcedReplyDeltas | None:
    """What shapes the deltas of a call that has tools and a consumer that sees them: parsed
    partial arguments on its tool-call deltas, or, for a tool call forced through the reply's
    text, the envelope text withheld. None for every other call (which then pays nothing)."""
    if call.quiet or call.prepared is None:
        return None
    from sluice._tools.streaming import ArgumentStreams, ForcedReplyDeltas  # calls with tools

    return ArgumentStreams() if call.prepared.plan is None else ForcedReplyDeltas()
