"""Bounds on every reply, whatever the deadlines say: :class:`ReplyLimits`."""

from __future__ import annotations

import attrs
from attrs.validators import ge, gt, optional

from .._record import Value

__all__ = ["MAX_EVENT_BYTES", "MAX_LINE_BYTES", "ReplyLimits"]


MAX_LINE_BYTES = 32 * 1024 * 1024
"""Default cap on one line of a streamed reply (an SSE line, an NDJSON line).

Generous: an image returned inline as base64 fits in one line."""
MAX_EVENT_BYTES = 32 * 1024 * 1024
"""Default cap on the data of one SSE event (all its ``data:`` lines together)."""


_HEAD_TIMEOUT: float | None = 60.0
_READ_IDLE_TIMEOUT: float | None = 300.0


@attrs.frozen(eq=False, kw_only=True, repr=False)
class ReplyLimits(Value):
    """Bounds on every reply, in force even when no deadline is configured.

    They keep a hostile or broken server from holding a call forever or growing its memory
    without end. A size limit passed is a terminal ``ProtocolError`` (the server would do it
    again, and each attempt may be billed); a time limit passed is a ``CallTimeout``, which is
    retried. The ``deadlines`` are usually tighter; these hold when a deadline is unset.
    """

    head_timeout: float | None = attrs.field(default=_HEAD_TIMEOUT, validator=optional(gt(0.0)))
    """Seconds from the first byte of a response head until the whole head has arrived, so a
    server trickling its head a byte at a time is cut off (sluice's own HTTP client; with the
    httpx transport the first-token deadline bounds the wait). None: no limit."""
    read_idle_timeout: float | None = attrs.field(
        default=_READ_IDLE_TIMEOUT, validator=optional(gt(0.0))
    )
    """Seconds a reply may go without progress (no event of a stream, no byte of a whole
    body), for calls whose ``deadlines.idle`` is unset. None: no limit."""
    max_line_bytes: int = attrs.field(default=MAX_LINE_BYTES, validator=ge(1024))
    """The longest line of a streamed reply (SSE or NDJSON)."""
    max_event_bytes: int = attrs.field(default=MAX_EVENT_BYTES, validator=ge(1024))
    """The most data one SSE event may carry."""
    max_body_bytes: int = attrs.field(default=64 * 1024 * 1024, validator=ge(1024))
    """The largest non-streamed reply body (after decompression)."""
    max_stream_bytes: int = attrs.field(default=256 * 1024 * 1024, validator=ge(1024))
    """The most a streamed reply may carry in all (after decompression): a server streaming
    valid events without end is cut off here, not when memory runs out. Set far above what
    the longest reply a model can give takes as SSE (a few hundred bytes per token)."""
