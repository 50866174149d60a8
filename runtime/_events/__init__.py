"""Events a call's stream yields, in order.

``Queued``, ``Admitted``, then for each attempt ``FirstToken`` and the deltas (``TextDelta``,
``ReasoningDelta``, ``ReasoningSignature``, ``ToolCallDelta``, ``UsageReported``); a retry
emits ``Retrying`` and a move to a fallback model ``FallingBack`` (each preceded by
``StreamReset`` when deltas of the failed attempt were already delivered, so the consumer can
discard them); then exactly one of ``Completed`` or ``Failed``.

Deltas decoded from one network read travel together as one batch; the stream hands them to
the consumer one by one. A call answered from the response cache yields only its deltas and
``Completed`` (nothing was queued, admitted or sent).

A plain call, whose consumer reads only its end, makes ``FirstToken``, ``TextDelta``,
``UsageReported`` and ``Completed``, defined here. The other events and the unions of every
kind (``DeltaEvent``, ``CallEvent``) are defined in :mod:`sluice._events.rare`, which loads
when one of them is first asked for here (PEP 562) and leaves them here then, so code that
names them pays a plain lookup after: each attrs class costs the import a compiled
``__init__``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs

from .._messages import ChatResult, Message, ReasoningPart, Usage
from .._record import Value

if TYPE_CHECKING:
    from .rare import Admitted as Admitted
    from .rare import CallEvent as CallEvent
    from .rare import DeltaEvent as DeltaEvent
    from .rare import Embedded as Embedded
    from .rare import Failed as Failed
    from .rare import FallingBack as FallingBack
    from .rare import Queued as Queued
    from .rare import ReasoningDelta as ReasoningDelta
    from .rare import ReasoningSignature as ReasoningSignature
    from .rare import Retrying as Retrying
    from .rare import StreamReset as StreamReset
    from .rare import ToolCallDelta as ToolCallDelta

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


@attrs.frozen(eq=False, repr=False)
class UsageReported(Value):
    """The provider reported the attempt's token usage."""

    call_id: str
    usage: Usage


@attrs.frozen(eq=False, repr=False)
class Completed(Value):
    call_id: str
    result: ChatResult


def signature_events(call_id: str, message: Message) -> list[ReasoningSignature]:
    """The :class:`ReasoningSignature` events of a reply that came whole: one per signed
    reasoning part, in order (a part without text is a redacted block). Every whole reply
    is asked; the class loads with the first that has one."""
    signed = [
        (part.signature, not part.text)
        for part in message.content
        if type(part) is ReasoningPart and part.signature
    ]
    if not signed:
        return []
    from .rare import ReasoningSignature

    return [ReasoningSignature(call_id, sign, redacted=redacted) for sign, redacted in signed]


_RARE = frozenset(
    (
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
    )
)


def __getattr__(name: str) -> Any:
    # The rarer events and the unions load when one is first asked for (sluice._events.rare),
    # and are kept here then: code that names them on a stream's path pays a plain lookup.
    if name in _RARE:
        from . import rare

        found = {rare_name: getattr(rare, rare_name) for rare_name in _RARE}
        globals().update(found)
        return found[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
