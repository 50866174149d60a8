"""What every reply decoder shares: token counts, protocol errors, size limits, reply forms.

The size limits bound the memory one reply may take while it is decoded. A reply that passes
one is refused with a :class:`~sluice._errors.ProtocolError` that names the limit and the
setting that raises it, marked not to be retried (``should_retry=False``): a server that sends
a line of 32 MiB will send it again, and every attempt may be billed.
"""

from __future__ import annotations

import orjson

from .._config import MAX_EVENT_BYTES, MAX_LINE_BYTES  # the defaults live with ReplyLimits
from .._errors import ProtocolError

__all__ = [
    "FOREIGN",
    "MAX_EVENT_BYTES",
    "MAX_LINE_BYTES",
    "STREAM",
    "WHOLE",
    "count",
    "foreign_reply",
    "malformed",
    "reply_form",
    "too_large",
]


def count(value: object) -> int:
    """A token count as a provider reports it: a positive int, anything else is 0."""
    return value if type(value) is int and value > 0 else 0


def malformed(what: str, payload: bytes | object) -> ProtocolError:
    """The error for a payload that breaks the protocol, quoting a short excerpt of it."""
    from .http_errors import excerpt  # loaded with every decoder; kept out of ``import sluice``

    body = payload if isinstance(payload, bytes) else orjson.dumps(payload)
    return ProtocolError(f"{what}: {excerpt(body)}")


def too_large(what: str, limit: int, setting: str) -> ProtocolError:
    """The error for a reply that passed a size limit: terminal, naming the limit's setting."""
    return ProtocolError(
        f"{what} is larger than the {_size(limit)} limit (reply_limits.{setting})",
        should_retry=False,
    )


def _size(limit: int) -> str:
    if limit >= 1 << 20 and limit % (1 << 20) == 0:
        return f"{limit >> 20} MiB"
    if limit >= 1 << 10 and limit % (1 << 10) == 0:
        return f"{limit >> 10} KiB"
    return f"{limit} bytes"


STREAM = "stream"
WHOLE = "whole"
FOREIGN = "foreign"

_STREAM_TYPES = frozenset(
    {
        "text/event-stream",
        "application/x-ndjson",
        "application/ndjson",
        "application/jsonl",
        "application/x-jsonlines",
        "application/stream+json",
    }
)
_WHOLE_TYPES = frozenset({"application/json", "text/json", "application/x-json"})
_UNKNOWN_TYPES = frozenset({"", "text/plain", "application/octet-stream"})


def reply_form(content_type: str | None) -> str | None:
    """How a 2xx reply with this ``content-type`` is read, whatever the request asked for.

    :data:`STREAM` for an event stream (SSE or NDJSON), :data:`WHOLE` for one JSON document
    (``application/json`` or any ``+json`` type), :data:`FOREIGN` for anything that is no API
    reply (an HTML page, an image), and None when the type says nothing (absent,
    ``text/plain``, ``application/octet-stream``): read the reply as the request asked.
    """
    if content_type is None:
        return None
    if content_type.startswith("text/event-stream"):  # the hot path's answer, found first
        return STREAM
    media = content_type.partition(";")[0].strip().lower()
    if media in _STREAM_TYPES:
        return STREAM
    if media in _WHOLE_TYPES or media.endswith("+json"):
        return WHOLE
    if media in _UNKNOWN_TYPES:
        return None
    return FOREIGN


def foreign_reply(
    status: int, content_type: str, body: bytes, location: str | None = None
) -> ProtocolError:
    """The terminal error for a reply below 400 that is not the API's: what came, and a hint
    (for a 200, or a redirect, which sluice does not follow: ``location`` says where to).

    Not retried: a base URL that points at a web site answers the same way every time.
    """
    from .http_errors import excerpt

    media = content_type.partition(";")[0].strip().lower()[:60] or "no content type"
    hint = ""
    if status == 200:
        hint = " (is base_url right?)"
    elif 300 <= status < 400:
        target = f" to {location[:120]}" if location else ""
        hint = f" (a redirect{target}: is base_url right?)"
    snippet = excerpt(body, 120) if body else "an empty body"
    return ProtocolError(
        f"HTTP {status} with content type {media}, not a reply of the API{hint}: {snippet}",
        status=status,
        should_retry=False,
    )
