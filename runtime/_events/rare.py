"""The events a plain call never makes: waiting for admission and being admitted (only a
consumer that reads the stream is told), reasoning and tool-call deltas, what a retry or a move
to a fallback tells the consumer, the end of an embedding call, and a failure; and the unions
of every kind.

They are :mod:`sluice._events`' events (that module serves every name here, PEP 562), kept
apart so that a program which only makes plain calls does not build their classes: each attrs
class costs the import a compiled ``__init__``. Code on every call's path looks them up only
where one may be made or met, and this module loads with the first.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeAlias

import attrs

from .._errors import CallError
from .._record import Value
from . import Completed, FirstToken, TextDelta, UsageReported

if TYPE_CHECKING:
    # Only a type here (the embeddings' model sits a layer above the events').
    from .._embeddings import EmbedResult  # noqa: TC004

__all__ = [
    "Admitted",
    "CallEvent",
    "DeltaEvent",
    "Embedded",
    "Failed",
    "FallingBack",
    "Queued",
    "ReasoningDelta",
    "ReasoningSignature",
    "Retrying",
    "StreamReset",
    "ToolCallDelta",
]


@attrs.frozen(eq=False, repr=False)
class Queued(Value):
    """The call waits for admission."""

    call_id: str
    attempt: int
    at: float


@attrs.frozen(eq=False, repr=False)
class Admitted(Value):
    """The RateLimiter let this attempt through; ``waited`` is its time in the queue."""

    call_id: str
    attempt: int
    at: float
    waited: float


@attrs.frozen(eq=False, slots=True, repr=False)
class ReasoningDelta(Value):
    call_id: str
    text: str


@attrs.frozen(eq=False, slots=True, repr=False)
class ReasoningSignature(Value):
    """The provider signed the reasoning block streamed so far (Anthropic's ``signature_delta``),
    or, with ``redacted``, sent a whole reasoning block as opaque data. A client that sends
    the reasoning back on a later turn must send this with it."""

    call_id: str
    signature: str
    redacted: bool = False


@attrs.frozen(eq=False, slots=True, repr=False)
class ToolCallDelta(Value):
    """A fragment of tool call ``index``: ``id`` and ``name`` arrive once, arguments in pieces."""

    call_id: str
    index: int
    id: str | None
    name: str | None
    arguments: str
    partial_arguments: Mapping[str, Any] | None = None
    """The arguments streamed so far, parsed (what is still open closed; numbers and literals
    that may still grow left out), for a call whose request has tools; None when nothing
    parses yet or the arguments are not an object. Shared with later deltas of the same call:
    read it, do not change it."""


@attrs.frozen(eq=False, repr=False)
class StreamReset(Value):
    """Discard every delta received so far: attempt ``attempt`` failed after output began."""

    call_id: str
    attempt: int
    reason: str


@attrs.frozen(eq=False, repr=False)
class Retrying(Value):
    """Attempt ``attempt`` failed with ``error``; the next begins after ``delay`` seconds."""

    call_id: str
    attempt: int
    delay: float
    error: CallError


@attrs.frozen(eq=False, repr=False)
class FallingBack(Value):
    """The call moves from ``from_model`` to its next fallback ``to_model`` after ``error``."""

    call_id: str
    from_model: str
    to_model: str
    error: CallError


@attrs.frozen(eq=False, repr=False)
class Embedded(Value):
    """The end of an embedding call (in place of ``Completed``): only ``Runtime.embed`` reads
    an embedding call's events, so a chat stream never holds one."""

    call_id: str
    result: EmbedResult


@attrs.frozen(eq=False, repr=False)
class Failed(Value):
    call_id: str
    error: CallError


DeltaEvent: TypeAlias = (
    TextDelta | ReasoningDelta | ReasoningSignature | ToolCallDelta | UsageReported
)
CallEvent: TypeAlias = (
    Queued
    | Admitted
    | FirstToken
    | DeltaEvent
    | StreamReset
    | Retrying
    | FallingBack
    | Completed
    | Embedded
    | Failed
)
