"""Fault directives: what the simulator does to one generation request. Pure: no trio, no sockets.

Directives are written as text in ``SimulatorConfig.script`` (one per chat or messages request,
in arrival order), in ``SimulatorConfig.fault_rates`` (drawn at random), and in the
``x-sim-fault`` request header (which wins over the script and the random rates);
:func:`choose_directive` applies that precedence. Case and spaces around parts are ignored.
Syntax (``N`` counts SSE events, ``S`` is seconds)::

    ok                          answer normally
    429                         refuse; Retry-After from config.retry_after
    429:retry_after=S           refuse; Retry-After: S (rounded up to whole seconds)
    500 | 503 | 529 | ...       fail with that status (any 400-599; retry_after=S allowed too),
                                with the error body of the route's protocol
    429_date[:retry_after=S]    refuse with Retry-After as an HTTP date (app wall clock + S)
    disconnect[:N]              send the head, then cut after N events (config.disconnect_after)
    reset                       close the connection without sending any response
    stall:S                     send nothing at all, not even the head, for S more seconds
    stall_after:N:S             send the head and N events, then nothing for S seconds, then
                                the rest (a JSON body: half of it, then the other half)
    trickle[:BYTES[:S]]         send the body BYTES bytes at a time, S seconds apart
                                (defaults: 16 bytes, 0.05 s)
    malformed[:N]               after N events (default 1) send one event whose data is not
                                JSON, then the rest; a JSON body is cut as by truncated_json
    truncated_json              end the body cleanly halfway: a correct Content-Length (or
                                chunked terminator) around invalid JSON
    empty                       a 200 with an empty body; a stream with no content events,
                                only its opening and finish
    broken_json[:KIND]          break the JSON text of the reply (structured output, OpenAI
                                tool-call arguments) in one of the ways of
                                :data:`~sluice.simulator._broken.KINDS`; without KIND one is
                                drawn from the fault dice

"Connection refused" is not a directive: no request ever reaches a server that refuses it.
Point the client at a port nothing listens on instead (bind ``127.0.0.1:0``, read the port,
close the socket), or give httpx a transport whose handler raises ``httpx.ConnectError``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, TypeAlias

import attrs

from ._broken import KINDS

if TYPE_CHECKING:
    import random
    from collections.abc import Sequence

__all__ = [
    "BrokenJson",
    "Directive",
    "Disconnect",
    "Empty",
    "Fail",
    "Malformed",
    "Normal",
    "Reset",
    "Stall",
    "Trickle",
    "Truncated",
    "choose_directive",
    "parse_directive",
]

TRICKLE_BYTES = 16
"""Bytes per piece of a ``trickle`` without arguments."""
TRICKLE_INTERVAL = 0.05
"""Seconds between the pieces of a ``trickle`` without arguments."""


@attrs.frozen
class Normal:
    """Answer the request normally."""


@attrs.frozen
class Fail:
    """Answer with an error status and the route's JSON error body."""

    status: int
    retry_after: float | None = None
    """Seconds for the ``Retry-After`` header; None means the config's default (429 only)."""
    http_date: bool = False
    """Send ``Retry-After`` as an HTTP date (counted from the app's wall clock), without
    ``retry-after-ms``."""


@attrs.frozen
class Disconnect:
    """Send the response headers and part of the body, then drop the connection."""

    after: int | None = None
    """SSE events sent before the cut; None means ``SimulatorConfig.disconnect_after``."""


@attrs.frozen
class Reset:
    """Close the connection without sending any response."""


@attrs.frozen
class Stall:
    """Go silent for ``seconds``: before the response head, or after ``after`` events."""

    seconds: float
    after: int | None = None
    """Events sent before the silence; None means before anything, head included."""


@attrs.frozen
class Trickle:
    """Send the body ``size`` bytes at a time, ``interval`` seconds apart."""

    size: int = TRICKLE_BYTES
    interval: float = TRICKLE_INTERVAL


@attrs.frozen
class Malformed:
    """Insert one event whose data is not JSON after ``after`` events."""

    after: int = 1


@attrs.frozen
class Truncated:
    """End the body cleanly in the middle of its JSON."""


@attrs.frozen
class Empty:
    """Answer 200 with no content."""


@attrs.frozen
class BrokenJson:
    """Break the JSON text of the reply in the way ``kind`` names."""

    kind: str | None = None
    """One of :data:`~sluice.simulator._broken.KINDS`; None draws one from the fault dice."""


Directive: TypeAlias = (
    Normal
    | Fail
    | Disconnect
    | Reset
    | Stall
    | Trickle
    | Malformed
    | Truncated
    | Empty
    | BrokenJson
)

_SYNTAX = (
    "expected ok, 429[:retry_after=SECONDS], a status 400-599, 429_date, disconnect[:EVENTS], "
    "reset, stall:SECONDS, stall_after:EVENTS:SECONDS, trickle[:BYTES[:SECONDS]], "
    "malformed[:EVENTS], truncated_json, empty or broken_json[:KIND]"
)
_PLAIN: dict[str, Directive] = {
    "ok": Normal(),
    "reset": Reset(),
    "truncated_json": Truncated(),
    "empty": Empty(),
}


def parse_directive(text: str) -> Directive:
    """Parse one directive.

    Raises:
        ValueError: the text is not a directive; the message says what was expected.
    """
    head, *args = (part.strip() for part in text.strip().lower().split(":"))
    plain = _PLAIN.get(head)
    if plain is not None:
        if args:
            raise ValueError(f"bad directive {text!r}: {head!r} takes no arguments")
        return plain
    match head:
        case "disconnect":
            _arity(text, args, 0, 1)
            return Disconnect(_count(text, args[0].removeprefix("after=")) if args else None)
        case "stall":
            _arity(text, args, 1, 1, "stall needs the seconds: stall:SECONDS")
            return Stall(_seconds(text, args[0]))
        case "stall_after":
            _arity(text, args, 2, 2, "stall_after needs events and seconds: stall_after:N:S")
            return Stall(_seconds(text, args[1]), _count(text, args[0]))
        case "trickle":
            _arity(text, args, 0, 2)
            size = _count(text, args[0], "bytes") if args else TRICKLE_BYTES
            if size < 1:
                raise ValueError(f"bad directive {text!r}: trickle needs at least 1 byte a piece")
            interval = _seconds(text, args[1]) if len(args) > 1 else TRICKLE_INTERVAL
            return Trickle(size, interval)
        case "malformed":
            _arity(text, args, 0, 1)
            return Malformed(_count(text, args[0])) if args else Malformed()
        case "broken_json":
            _arity(text, args, 0, 1)
            if args and args[0] not in KINDS:
                raise ValueError(
                    f"bad directive {text!r}: unknown kind {args[0]!r}; "
                    f"expected one of {', '.join(KINDS)}"
                )
            return BrokenJson(args[0] if args else None)
        case "429_date":
            return Fail(429, _retry_after(text, args), http_date=True)
    if head.isascii() and head.isdigit():
        status = int(head)
        if not 400 <= status <= 599:
            raise ValueError(f"bad directive {text!r}: status {status} is not in 400-599")
        return Fail(status, _retry_after(text, args))
    raise ValueError(f"bad directive {text!r}: {_SYNTAX}")


def _arity(text: str, args: list[str], least: int, most: int, hint: str = "") -> None:
    if least <= len(args) <= most:
        return
    if not hint:
        hint = f"takes at most {most} argument{'s' if most != 1 else ''}"
    raise ValueError(f"bad directive {text!r}: {hint}")


def _count(text: str, value: str, what: str = "events") -> int:
    if not (value.isascii() and value.isdigit()):
        raise ValueError(
            f"bad directive {text!r}: expected a whole number of {what}, got {value!r}"
        )
    return int(value)


def _seconds(text: str, value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds >= 0):
        raise ValueError(f"bad directive {text!r}: seconds must be a number >= 0, got {value!r}")
    return seconds


def _retry_after(text: str, args: list[str]) -> float | None:
    retry_after = None
    for arg in (a.strip() for part in args for a in part.split(",")):
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
    rates: Sequence[tuple[Directive, float]],
    rng: random.Random,
) -> Directive:
    """Pick the directive for the generation request that arrived ``index``-th (from 0).

    Precedence: ``override`` (the request's header), then ``script[index]``, then one draw
    from ``rng`` against ``rates``, ``(directive, probability)`` pairs whose probabilities sum
    to at most 1 (the rest is :class:`Normal`). The rng is drawn exactly once per request that
    reaches the rates and only when ``rates`` is not empty, so the fault sequence depends only
    on the seed and on how many requests fell through.
    """
    if override is not None:
        return override
    if index < len(script):
        return script[index]
    if not rates:
        return Normal()
    draw = rng.random()
    for directive, rate in rates:
        if draw < rate:
            return directive
        draw -= rate
    return Normal()
