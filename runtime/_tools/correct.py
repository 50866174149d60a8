"""Self-correcting retries: the messages that tell a model what was wrong with its last reply.

After a :class:`~sluice._errors.ToolCallError`, the Supervisor may retry the call with a
correction appended to the prepared request's messages: the bad reply (as assistant text, never
as tool calls, which would need tool results after them) and a user message naming the problem
and the available tools. An empty reply gets a user message asking again instead, because some
providers reject an empty assistant message.

Every message added here is a :class:`TemporaryMessage`. Corrections accumulate over the retries
of one call (the third attempt sees both earlier corrections) and never reach the caller: the
caller's request is not changed, and :func:`strip_temporary` removes them from any history that
was built from an attempt's request.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from .._messages import ChatRequest, TemporaryMessage, is_temporary, strip_temporary
from .._record import Value

if TYPE_CHECKING:

    from .._errors import ToolCallError
    from .preparation import Prepared

__all__ = [
    "Corrections",
    "TemporaryMessage",
    "correction_messages",
    "is_temporary",
    "strip_temporary",
]

EMPTY_REPLY_NUDGE = "Your previous reply was empty. Please answer my last message again, in full."


def correction_messages(error: ToolCallError, prepared: Prepared) -> tuple[TemporaryMessage, ...]:
    """The messages to append so the next attempt can fix what ``error`` describes.

    An empty reply gets one user message asking again. Any other error gets the bad reply as an
    assistant text message (left out when there was no text) and a user message naming the
    problem, the form a forced reply must take, and the request's tools in declaration order
    (all of them, whether or not they were sent as tool definitions).
    """
    if error.reason == "empty_reply":
        return (TemporaryMessage("user", EMPTY_REPLY_NUDGE),)
    lines = [f"Your previous reply could not be used. {error.feedback or error.message}"]
    plan = prepared.plan
    if plan is not None and error.reason != "tool_choice_none":
        from .preparation import reply_shape  # a forced plan means preparation ran already

        shape = reply_shape(plan)
        if shape not in lines[0]:
            lines.append(f"Reply with JSON only, in this form: {shape}")
    if error.reason != "tool_choice_none":
        names = prepared.tool_names
        lines.append(
            f"Available tools: {', '.join(names)}." if names else "No tools are available."
        )
    added: list[TemporaryMessage] = []
    if error.generated.strip():
        added.append(TemporaryMessage("assistant", error.generated))
    added.append(TemporaryMessage("user", "\n".join(lines)))
    return tuple(added)


@attrs.frozen(eq=False, repr=False)
class Corrections(Value):
    """The corrections made so far in one call. A value: :meth:`add` returns a new one."""

    messages: tuple[TemporaryMessage, ...] = ()
    """Every temporary message added so far, oldest first."""
    count: int = 0
    """Corrections made so far."""

    def allows(self, error: ToolCallError, prepared: Prepared) -> bool:
        """Whether another correction retry may follow ``error``."""
        return error.correctable and self.count < prepared.options.max_corrections

    def add(self, error: ToolCallError, prepared: Prepared) -> Corrections:
        """These corrections plus the one for ``error``."""
        return Corrections((*self.messages, *correction_messages(error, prepared)), self.count + 1)

    def apply(self, prepared: Prepared) -> ChatRequest:
        """The request for the next attempt: the prepared one with the corrections appended."""
        if not self.messages:
            return prepared.request
        return attrs.evolve(prepared.request, messages=(*prepared.request.messages, *self.messages))


NO_CORRECTIONS = Corrections()
"""Where every call starts: nothing corrected yet."""
