"""HTTP error replies to :class:`~sluice._errors.CallError` classes, for every protocol codec.

Pure functions: the caller passes the status, the provider's message and error type, and the
wall-clock time for reading a ``Retry-After`` date in a reply without a ``Date`` header.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING

import orjson

from .._errors import (
    AuthenticationFailed,
    BadRequest,
    CallError,
    ContentFiltered,
    ContextTooLong,
    NotFound,
    Overloaded,
    ProtocolError,
    RateLimited,
    ServerError,
)
from .._limits.headers import http_date, reset_wait, retry_info_wait, wait_until

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["error_for_status", "excerpt", "parse_retry_after", "provider_wait"]

# HTTP's whitespace only: ``\s`` would admit characters (U+001F...) that float() refuses.
_SECONDS = re.compile(r"[ \t]*\d+(?:\.\d*)?[ \t]*")

# Wording providers use when the prompt does not fit: OpenAI and vLLM ("maximum context
# length", code context_length_exceeded), Anthropic ("prompt is too long"), Gemini ("exceeds
# the maximum number of tokens"), Bedrock ("input is too long").
_CONTEXT_TOO_LONG = re.compile(
    r"context_length_exceeded|context[ _]length|context window|maximum context"
    r"|prompt is too long|input is too long|exceeds the maximum number of tokens",
    re.IGNORECASE,
)
_CONTENT_POLICY = re.compile(r"content_filter|content_policy|moderation", re.IGNORECASE)


def parse_retry_after(headers: Mapping[str, str], wall_now: float) -> float | None:
    """Seconds the provider asked us to wait, or None when it did not say (or said nonsense).

    Reads ``retry-after-ms`` (milliseconds) first, then ``retry-after`` as seconds or as an
    HTTP date, which counts from the reply's ``Date`` header, or without one from ``wall_now``
    (seconds since the epoch) up to a cap (:func:`~sluice._limits.headers.wait_until`); a date
    in the past means 0. Negative, infinite or unparseable values count as absent.

    Args:
        headers: the reply headers, names in lower case.
        wall_now: the current wall-clock time, only used for a date in a reply without
            ``Date``.
    """
    millis = _seconds(headers.get("retry-after-ms"))
    if millis is not None:
        return millis / 1000.0
    value = headers.get("retry-after")
    if value is None:
        return None
    seconds = _seconds(value)
    if seconds is not None:
        return seconds
    when = http_date(value)
    return None if when is None else wait_until(when, headers, wall_now)


def provider_wait(headers: Mapping[str, str], body: bytes, wall_now: float) -> float | None:
    """How long an error reply asks us to wait, from every place providers say it.

    In order: ``retry-after-ms``, ``Retry-After`` (seconds or an HTTP date), the
    ``x-ratelimit-reset-*`` / ``anthropic-ratelimit-*-reset`` headers of the exhausted limit, a
    Google ``RetryInfo`` detail in the body; None when none of them says.
    """
    wait = parse_retry_after(headers, wall_now)
    if wait is None:
        wait = reset_wait(headers, wall_now)
    if wait is None and b"RetryInfo" in body:
        try:
            reply = orjson.loads(body)
        except orjson.JSONDecodeError:
            reply = None
        if isinstance(reply, list) and reply:
            reply = reply[0]  # Gemini sometimes wraps the error in a one-element list
        wait = retry_info_wait(reply)
    return wait


def _seconds(value: str | None) -> float | None:
    if value is None or not _SECONDS.fullmatch(value):
        return None
    seconds = float(value)
    return seconds if math.isfinite(seconds) else None


def error_for_status(
    status: int | None,
    message: str,
    *,
    error_type: str | None = None,
    request_id: str | None = None,
    retry_after: float | None = None,
) -> CallError:
    """The most specific :class:`CallError` for an error reply.

    The rules, first match wins:

    * an ``error_type`` that mentions ``overloaded``: :class:`Overloaded`;
    * 429: :class:`RateLimited` with ``retry_after``, and ``quota="quota"`` when the type is
      ``insufficient_quota`` (the account is out of credit; waiting will not help); 529:
      :class:`Overloaded`;
    * 408, 409 and 5xx: :class:`ServerError`;
    * other 4xx: a content-policy ``error_type`` gives :class:`ContentFiltered`; 401 and 403
      :class:`AuthenticationFailed`; 404 :class:`NotFound`; a type or message saying the
      prompt exceeds the context window :class:`ContextTooLong`; the rest :class:`BadRequest`;
    * no status (an error inside a stream): decided by the same type and message tests, then
      by words in the type (``rate_limit`` or ``insufficient_quota``, ``auth``,
      ``permission``, ``not_found``, ``invalid_request``); anything else is a
      :class:`ServerError`;
    * a status below 400: :class:`ProtocolError`, as the reply was not a valid answer.

    Args:
        status: the HTTP status, or None for an error reported inside a stream.
        message: the provider's own message, kept verbatim.
        error_type: the provider's error code or type, if any.
        request_id: the provider's request id, if any.
        retry_after: seconds to wait, from :func:`parse_retry_after`, kept on the error
            (a 503's or 529's goes back to a gateway client as its ``Retry-After``).
    """
    kind = error_type or ""
    lowered = kind.lower()
    exhausted = "insufficient_quota" in lowered
    if "overloaded" in lowered:
        cls: type[CallError] = Overloaded
    elif status == 429 or (status is None and ("rate_limit" in lowered or exhausted)):
        return RateLimited(
            message,
            status=status,
            error_type=error_type,
            request_id=request_id,
            retry_after=retry_after,
            quota="quota" if exhausted else "rate",
        )
    elif status == 529:
        cls = Overloaded
    elif status is not None and (status >= 500 or status in (408, 409)):
        cls = ServerError
    elif status is not None and status < 400:
        cls = ProtocolError
    else:
        cls = _client_error(status, message, kind)
    return cls(
        message,
        status=status,
        error_type=error_type,
        request_id=request_id,
        retry_after=retry_after,
    )


def _client_error(status: int | None, message: str, kind: str) -> type[CallError]:
    """The class for a 4xx reply, or for a stream error that carried no status."""
    if _CONTENT_POLICY.search(kind):
        return ContentFiltered
    if status in (401, 403):
        return AuthenticationFailed
    if status == 404:
        return NotFound
    if _CONTEXT_TOO_LONG.search(kind) or _CONTEXT_TOO_LONG.search(message):
        return ContextTooLong
    if status is not None:
        return BadRequest
    lowered = kind.lower()
    if "auth" in lowered or "permission" in lowered:
        return AuthenticationFailed
    if "not_found" in lowered:
        return NotFound
    if "invalid_request" in lowered:
        return BadRequest
    return ServerError


def excerpt(body: bytes, limit: int = 200) -> str:
    """A short, single-line, printable excerpt of a body for an error message."""
    text = " ".join(body[: limit * 4].decode("utf-8", "replace").split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
