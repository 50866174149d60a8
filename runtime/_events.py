"""Events a call's stream yields, in order.

``Queued``, ``Admitted``, then for each attempt ``FirstToken`` and the deltas (``TextDelta``,
``ReasoningDelta``, ``ReasoningSignature``, ``ToolCallDelta``, ``UsageReported``); a retry
emits ``Retrying`` and a move to a fallback model ``FallingBack`` (each preceded by
``StreamReset`` when deltas of the failed attempt were already delivered, so the consumer can
discard them); then exactly one of ``Completed`` or ``Failed``.

Deltas decoded from one network read travel together as one batch; the stream hands them to
the consumer one by one. A call answered from the response cache yields only its deltas and
``Completed`` (nothing was queued, admitted or sent).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeAlias

import attrs

from ._errors import CallError
from ._messages import ChatResult, Message, ReasoningPart, Usage
from ._record import Value

if TYPE_CHECKING:
    # Only a type here (the embeddings' model sits a layer above the events').
    from ._embeddings import EmbedResult  # noqa: TC004

__all__ = [
    "Admitted",
    "CallEvent",
    "Completed",
    "DeltaEvent",
    "Embedded",
    "Failed",
    "FallingBack",
    "FirstToken",
    "Queued",
    "ReasoningDelta",
    "ReasoningSignature",
    "Retrying",
    "StreamReset",
    "TextDelta",
    "ToolCallDelta",
    "UsageReported",
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


@attrs.frozen(eq=False, repr=False)
class FirstToken(Value):
    """The attempt's first chunk arrived; ``ttft`` is measured from submit."""

    call_id: str
    attempt: int
    at: float
    ttft: float


@attrs.frozen(eq=False, slots=True, repr=False)
class TextDelta(Value):
    call_id: str
    text: str
    logprobs: Mapping[str, Any] | None = None
    """The log probabilities of this piece's tokens as the provider sent them with it (OpenAI's
    per-chunk ``logprobs`` object); None when the request did not ask for them."""


_new_object = object.__new__
_set_call_id = TextDelta.__dict__["call_id"].__set__
_set_text = TextDelta.__dict__["text"].__set__
_set_logprobs = TextDelta.__dict__["logprobs"].__set__


def text_delta(call_id: str, text: str, logprobs: Mapping[str, Any] | None = None) -> TextDelta:
    """``TextDelta(call_id, text, logprobs)``, made for a decoder's hot path: one per chunk of
    every streamed reply. The class is frozen, so its ``__init__`` sets each field through
    ``object.__setattr__``; this writes the slots directly, which costs a fraction of that.
    Equal to the class's own construction (``tests/test_events_fast.py`` pins it, fields
    included, so a field added to the class fails there until it is added here)."""
    event = _new_object(TextDelta)
    _set_call_id(event, call_id)
    _set_text(event, text)
    _set_logprobs(event, logprobs)
    return event


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
class UsageReported(Value):
    """The provider reported the attempt's token usage."""

    call_id: str
    usage: Usage


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
class Completed(Value):
    call_id: str
    result: ChatResult


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


def signature_events(call_id: str, message: Message) -> list[ReasoningSignature]:
    """The :class:`ReasoningSignature` events of a reply that came whole: one per signed
    reasoning part, in order (a part without text is a redacted block)."""
    return [
        ReasoningSignature(call_id, part.signature, redacted=not part.text)
        for part in message.content
        if type(part) is ReasoningPart and part.signature
    ]
