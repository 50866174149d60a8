"""Fault directives: what the simulator does to one chat request. Pure: no trio, no sockets.

A directive is written as text in three places: ``SimulatorConfig.script`` (one per request, in
arrival order), the ``x-sim-fault`` request header (wins over everything), and nowhere else;
random faults are drawn by :func:`choose_directive`. Syntax::

    ok                      answer normally
    429                     refuse; Retry-After from the config
    429:retry_after=2       refuse; Retry-After: 2
    500 | 503 | 529 | ...   fail with that status (any 400-599)
    disconnect              cut the reply after config.disconnect_after SSE events
    disconnect:3            cut the reply after 3 SSE events (never before the headers)
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, TypeAlias

import attrs

if TYPE_CHECKING:
    import random
    from collections.abc import Sequence

__all__ = ["Directive", "Disconnect", "Fail", "Normal", "choose_directive", "parse_directive"]


@attrs.frozen
class Normal:
    """Answer the request normally."""


@attrs.frozen
class Fail:
    """Answer with an error status and an OpenAI-style JSON error body."""

    status: int
    retry_after: float | None = None
    """Seconds for the ``Retry-After`` header; None means the config's default (429 only)."""


@attrs.frozen
class Disconnect:
    """Send the response headers and part of the body, then drop the connection."""

    after: int | None = None
    """SSE data events sent before the cut; None means ``SimulatorConfig.disconnect_after``."""


Directive: TypeAlias = Normal | Fail | Disconnect

_SYNTAX = "expected ok, 429[:retry_after=SECONDS], a status 400-599, or disconnect[:EVENTS]"


def parse_directive(text: str) -> Directive:
    """Parse one directive (case and surrounding spaces are ignored).

    Raises:
        ValueError: the text is not a directive; the message says what was expected.
    """
    head, _, rest = text.strip().lower().partition(":")
    head = head.strip()
    args = [a.strip() for a in rest.split(",")] if rest.strip() else []
    if head == "ok":
        if args:
            raise ValueError(f"bad directive {text!r}: 'ok' takes no arguments")
        return Normal()
    if head == "disconnect":
        return Disconnect(_disconnect_after(text, args))
    if head.isascii() and head.isdigit():
        status = int(head)
        if not 400 <= status <= 599:
            raise ValueError(f"bad directive {text!r}: status {status} is not in 400-599")
        return Fail(status, _retry_after(text, args))
    raise ValueError(f"bad directive {text!r}: {_SYNTAX}")


def _disconnect_after(text: str, args: list[str]) -> int | None:
    if not args:
        return None
    if len(args) > 1:
        raise ValueError(f"bad directive {text!r}: disconnect takes one number of events")
    value = args[0].removeprefix("after=").strip()
    if not (value.isascii() and value.isdigit()):
        raise ValueError(
            f"bad directive {text!r}: disconnect needs a whole number of events, got {value!r}"
        )
    return int(value)


def _retry_after(text: str, args: list[str]) -> float | None:
    retry_after = None
    for arg in args:
        key, eq, value = arg.partition("=")
        if key.strip() != "retry_after" or not eq:
            raise ValueError(
                f"bad directive {text!r}: unknown option {arg!r} (only retry_after=SECONDS)"
            )
        try:
            retry_after = float(value)
        except ValueError:
            retry_after = math.nan
        if not (math.isfinite(retry_after) and retry_after >= 0):
            raise ValueError(
                f"bad directive {text!r}: retry_after must be a number >= 0, got {value.strip()!r}"
            )
    return retry_after


def choose_directive(
    *,
    index: int,
    override: Directive | None,
    script: Sequence[Directive],
    rates: tuple[float, float, float],
    rng: random.Random,
) -> Directive:
    """Pick the directive for the chat request that arrived ``index``-th (from 0).

    Precedence: ``override`` (the request's header), then ``script[index]``, then one draw
    from ``rng`` against ``rates`` = (429, 500, disconnect) probabilities. The rng is drawn
    exactly once per request that reaches the rates and only when some rate is above zero,
    so the fault sequence depends only on the seed and on how many requests fell through.
    """
    if override is not None:
        return override
    if index < len(script):
        return script[index]
    rate_429, rate_500, rate_disconnect = rates
    if not (rate_429 or rate_500 or rate_disconnect):
        return Normal()
    draw = rng.random()
    if draw < rate_429:
        return Fail(429)
    if draw < rate_429 + rate_500:
        return Fail(500)
    if draw < rate_429 + rate_500 + rate_disconnect:
        return Disconnect()
    return Normal()
