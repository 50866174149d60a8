"""Reading what providers say about their limits: wait times and the limits themselves.

Pure functions over response headers (names in lower case) and error bodies. Two header
families are understood: OpenAI's ``x-ratelimit-{limit,remaining,reset}-{requests,tokens}``
(also sent by many compatible servers; resets are durations like ``6ms`` or ``1m30s``) and
Anthropic's ``anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,remaining,
reset}`` (resets are RFC 3339 times).

A time a provider writes (an RFC 3339 reset, a ``Retry-After`` date) is on the provider's clock,
so it is measured against the reply's own ``Date`` header when there is one (:func:`wait_until`),
never against ours alone: a client clock an hour slow must not turn a 5 s wait into an hour.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Literal, TypeAlias

import attrs

from .._record import Value

__all__ = [
    "UNDATED_WAIT_CAP",
    "Dimension",
    "Learned",
    "http_date",
    "learned_limits",
    "parse_duration",
    "reset_wait",
    "retry_info_wait",
    "wait_until",
]

Dimension: TypeAlias = Literal["requests", "input_tokens", "output_tokens", "total_tokens"]

_DURATION = re.compile(r"(\d+(?:\.\d*)?)(ms|h|m|s)")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str | None) -> float | None:
    """Seconds in a duration like ``6ms``, ``20s``, ``1m30s``, ``1h2m3.5s`` or a bare number.

    None for anything else (empty, negative, garbage).
    """
    if text is None:
        return None
    text = text.strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        pass
    else:
        return value if math.isfinite(value) and value >= 0 else None
    position, total = 0, 0.0
    for match in _DURATION.finditer(text):
        if match.start() != position:
            return None
        total += float(match.group(1)) * _UNIT[match.group(2)]
        position = match.end()
    return total if position == len(text) and position > 0 else None


UNDATED_WAIT_CAP = 60.0
"""The longest wait read from a provider's date when the reply carries no ``Date`` to measure
it against. Measured on our clock alone, a date tells the wait only as well as our clock
agrees with the provider's; a skewed clock must not turn a short pause into a long one (or an
exhausted quota): providers' per-minute windows reset within a minute, and a longer wait that
was real shows again in the next reply."""


@functools.lru_cache(maxsize=16)
def http_date(text: str | None) -> float | None:
    """Seconds since the epoch of an HTTP date (``Sun, 06 Nov 1994 08:49:37 GMT``, or the
    obsolete forms), as ``Date`` and a date-form ``Retry-After`` carry; None when ``text`` is
    not one. A date without a zone counts as GMT, as HTTP dates always are. Cached: a reply's
    ``Date`` is read once per reset header, and the same value comes for a whole second."""
    if not text:
        return None
    from email.utils import parsedate_to_datetime  # the email package: not on import

    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


def wait_until(until: float, headers: Mapping[str, str], wall_now: float) -> float:
    """Seconds from the reply to ``until``, a time the provider wrote (seconds since the epoch).

    With a valid ``Date`` header, ``until - Date``: both times come from the provider's clock,
    so the wait is exact whatever ours says (``Date`` is when the reply was made; the time it
    took to reach us is not subtracted, which only errs on the side of waiting). Without one,
    ``until - wall_now``, capped at :data:`UNDATED_WAIT_CAP`. Never negative: a time already
    past means no wait.
    """
    served = http_date(headers.get("date"))
    if served is not None:
        return max(0.0, until - served)
    return min(UNDATED_WAIT_CAP, max(0.0, until - wall_now))


def _rfc3339_wait(text: str | None, headers: Mapping[str, str], wall_now: float) -> float | None:
    if not text:
        return None
    try:
        when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        return None
    return wait_until(when.timestamp(), headers, wall_now)


@attrs.frozen(eq=False, repr=False)
class Learned(Value):
    """One dimension of a limit, as a provider reported it."""

    dimension: Dimension
    limit: int | None
    remaining: int | None
    reset: float | None
    """Seconds until ``remaining`` is back to ``limit`` (None: not said)."""


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        value = int(text.strip())
    except ValueError:
        return None
    return value if value >= 0 else None


def _header_names(
    form: str, dimensions: tuple[tuple[str, Dimension], ...]
) -> tuple[tuple[str, str, str, Dimension], ...]:
    """Per dimension, the names of its limit, remaining and reset headers (``form`` takes the
    dimension's name, then ``limit``, ``remaining`` or ``reset``): spelled out once, as every
    reply's headers are read for them."""
    return tuple(
        (
            form.format(name, "limit"),
            form.format(name, "remaining"),
            form.format(name, "reset"),
            dimension,
        )
        for name, dimension in dimensions
    )


_OPENAI = _header_names(
    "x-ratelimit-{1}-{0}", (("requests", "requests"), ("tokens", "total_tokens"))
)
_ANTHROPIC = _header_names(
    "anthropic-ratelimit-{0}-{1}",
    (
        ("requests", "requests"),
        ("tokens", "total_tokens"),
        ("input-tokens", "input_tokens"),
        ("output-tokens", "output_tokens"),
    ),
)


def learned_limits(headers: Mapping[str, str], wall_now: float) -> list[Learned]:
    """Every limit the headers report; empty when they report none.

    ``wall_now`` (seconds since the epoch) measures an RFC 3339 reset only when the reply has
    no ``Date`` (see :func:`wait_until`)."""
    found: list[Learned] = []
    get = headers.get
    for limit_name, remaining_name, reset_name, dimension in _OPENAI:
        limit = _int(get(limit_name))
        remaining = _int(get(remaining_name))
        reset = parse_duration(get(reset_name))
        if limit is None and remaining is None and reset is None:
            continue
        found.append(Learned(dimension, limit, remaining, reset))
    for limit_name, remaining_name, reset_name, dimension in _ANTHROPIC:
        limit = _int(get(limit_name))
        remaining = _int(get(remaining_name))
        reset = _rfc3339_wait(get(reset_name), headers, wall_now)
        if limit is None and remaining is None and reset is None:
            continue
        found.append(Learned(dimension, limit, remaining, reset))
    return found


def reset_wait(headers: Mapping[str, str], wall_now: float) -> float | None:
    """How long a 429 says to wait through its reset headers, when it has no Retry-After.

    Takes the reset of each exhausted dimension (remaining 0), or, when none is reported as
    exhausted, the longest reset given.
    """
    learned = learned_limits(headers, wall_now)
    exhausted = [x.reset for x in learned if x.remaining == 0 and x.reset is not None]
    if exhausted:
        return max(exhausted)
    resets = [x.reset for x in learned if x.reset is not None]
    return max(resets) if resets else None


def retry_info_wait(body: Any) -> float | None:
    """The ``retryDelay`` of a Google ``RetryInfo`` detail in an error body, in seconds."""
    error = body.get("error") if isinstance(body, Mapping) else None
    details = error.get("details") if isinstance(error, Mapping) else None
    if not isinstance(details, list):
        return None
    for detail in details:
        if (
            isinstance(detail, Mapping)
            and str(detail.get("@type", "")).endswith("google.rpc.RetryInfo")
            and isinstance(detail.get("retryDelay"), str)
        ):
            return parse_duration(detail["retryDelay"])
    return None
