"""The errors with fields of their own that a call which succeeds never raises: a 429
(:class:`RateLimited`), a stream cut short (:class:`StreamBroken`), a deadline passed
(:class:`CallTimeout`) and a reply that broke the request's tool contract
(:class:`ToolCallError`).

They are :mod:`sluice._errors`' classes, drawn in its tree and served at that address (PEP 562),
kept apart so that a program which only makes calls does not build them: each attrs class
costs the import a compiled ``__init__``, and a subclass that adds no field costs next to
nothing, so only these four are here. Code on every call's path looks them up only once a
failure is in hand (an ``except`` clause names its class only when an exception reaches it).
"""

from __future__ import annotations

from typing import Literal

import attrs

from . import FatalError, RetryableError

__all__ = ["CallTimeout", "RateLimited", "StreamBroken", "ToolCallError"]


@attrs.define(eq=False, repr=False)
class RateLimited(RetryableError):
    """The provider answered 429 (``retry_after``: the wait it asked for, when it said)."""

    quota: Literal["rate", "quota"] = "rate"
    """``rate``: a limit per window, worth waiting for. ``quota``: the account's quota is
    exhausted (``insufficient_quota``, a daily cap, or a wait beyond the maximum), so the
    call fails fast instead of waiting."""

    @property
    def retryable(self) -> bool:
        if self.should_retry is not None:
            return self.should_retry
        return self.quota == "rate"


@attrs.define(eq=False, repr=False)
class StreamBroken(RetryableError):
    """The reply stream ended before it was complete."""

    events_delivered: int = 0


@attrs.define(eq=False, repr=False)
class CallTimeout(RetryableError):
    """A deadline passed."""

    timeout_kind: Literal["connect", "first_token", "idle", "total", "hedge"] = "total"
    """Which one: ``hedge`` is a model group's hedge time, after which a call that has another
    deployment to go to leaves one that has not answered (see ``ModelGroup.hedge``)."""


@attrs.define(eq=False, repr=False)
class ToolCallError(FatalError):
    """The reply broke the tool-call contract of the request, or held nothing at all.

    Sending the same request again cannot help, so transport retries never repeat it; the
    Supervisor may instead retry with a correction (:mod:`sluice._tools.correct`) while
    ``correctable`` is true. ``message`` is for the developer and names a fix where one exists;
    ``feedback`` is the text a correction shows the model.
    """

    reason: str = "invalid_call"
    """What went wrong: ``empty_reply``, ``unparseable``, ``invalid_call``, ``malformed_arguments``,
    ``missing_arguments``, ``unknown_tool``, ``tool_choice_none``, ``wrong_tool``,
    ``no_tool_call``, ``too_many_calls`` or ``truncated``."""
    tool_name: str | None = None
    """The tool the offending call named, when there was one."""
    generated: str = ""
    """What the model produced (its text, or the offending calls as JSON); may be empty."""
    feedback: str = ""
    """The problem in words for the model, without the developer's fix."""
    available_tools: tuple[str, ...] = ()
    """The request's tool names, in declaration order."""
    correctable: bool = True
    """False when a correction cannot help (the reply was cut off by ``max_tokens``)."""
