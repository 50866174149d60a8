"""The doors of the Supervisor and of the ProviderActors: their mailboxes as their senders hold
them, with a shortcut for the one message their loops only pass on.

A Supervisor's mailbox loop does nothing with a submitted call but start its task in the
actor's nursery, and a ProviderActor's loop nothing with an attempt but start its task. A call
made alone would pay a trip of each loop through trio's scheduler for that. So while the actor
runs, its door starts the task in the actor's own nursery in the sender's step: the task is
the actor's all the same (its nursery owns it, a crash of the actor cancels it). The actor
opens its door when it starts and shuts it before its nursery closes; what comes while the
door is shut goes through the mailbox as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

from sluice._mail import ProviderMsg, StartAttempt, SupervisorMsg

if TYPE_CHECKING:
    from collections.abc import Callable

    from sluice._mail import Call

    from ._provider_context import ProviderState
    from ._supervisor_peers import CallCount

__all__ = ["DOOR_CALLS", "ProviderDoor", "SupervisorDoor"]


DOOR_CALLS = 32
"""Calls in flight from which submissions take the Supervisor's mailbox again. The door is for
calls made alone or a few at once, which would pay the loop's trip each; a burst of thousands
taking it would start every call's task at once, and every call would reach its attempt,
request body and connection in the same moment (a peak of memory the heap keeps). Through the
mailbox, whose bound makes the submitter wait, a burst starts as the Supervisor takes it, and
the loop's trip is shared by all the calls of its step."""


class SupervisorDoor:
    """How the runtime submits calls to the Supervisor.

    While the Supervisor runs and fewer than :data:`DOOR_CALLS` calls are in flight, a
    :class:`~sluice._mail.Submit` starts the call's task in the Supervisor's nursery at once.
    Otherwise (before the Supervisor runs, in a burst) a submission goes to the mailbox, and
    the Supervisor's loop starts it when it runs; once :meth:`close` was called it is refused
    as by a closed channel (``trio.ClosedResourceError``).
    """

    __slots__ = ("_closed", "_count", "_mailbox", "_start")

    def __init__(self, mailbox: trio.MemorySendChannel[SupervisorMsg]) -> None:
        self._mailbox = mailbox
        self._start: Callable[[Call], None] | None = None
        self._count: CallCount | None = None
        self._closed = False

    def send_nowait(self, msg: SupervisorMsg) -> None:
        """Start ``msg``'s call (see the class). Raises what the mailbox's ``send_nowait``
        raises when the call goes there."""
        start, count = self._start, self._count
        if start is None or count is None or count.value >= DOOR_CALLS:
            self._mailbox.send_nowait(msg)
        else:
            start(msg.call)

    async def send(self, msg: SupervisorMsg) -> None:
        """:meth:`send_nowait`, waiting for room when the call goes to a full mailbox."""
        try:
            self.send_nowait(msg)
            return
        except trio.WouldBlock:
            pass  # waited for outside the handler
        await self._mailbox.send(msg)

    def close(self) -> None:
        """No more calls: the mailbox closes, so the Supervisor returns once every call
        it has ended."""
        self._closed = True
        self._start = None
        self._mailbox.close()

    def open(self, start: Callable[[Call], None], count: CallCount) -> None:
        """The Supervisor runs: ``start`` starts a call's task in its nursery (unless the
        door was closed already), and ``count`` says how many calls it has in flight."""
        if not self._closed:
            self._start, self._count = start, count

    def shut(self) -> None:
        """The Supervisor stops: calls go to the mailbox again."""
        self._start = self._count = None


class ProviderDoor:
    """A ProviderActor's mailbox as the Supervisor holds it.

    While an instance of the actor runs (it sets ``state.start_attempt``) and nothing waits
    in its mailbox, a :class:`~sluice._mail.StartAttempt` starts the attempt's task in that
    instance's nursery at once (if the actor crashes, the attempt is cancelled with it and the
    Supervisor resubmits it, as for one it started itself). Anything else goes through the
    mailbox: a :class:`~sluice._mail_rare.ReloadProvider` (the actor applies it in its loop), and an
    attempt when no instance runs (before the start, between a crash and the restart) or when
    messages wait there (a reload: the attempt queues behind it, so it is sent with the new
    settings). Once :meth:`close` was called, messages are refused as by a closed channel
    (``trio.ClosedResourceError``).
    """

    __slots__ = ("_closed", "_mailbox", "_state")

    def __init__(self, mailbox: trio.MemorySendChannel[ProviderMsg], state: ProviderState) -> None:
        self._mailbox = mailbox
        self._state = state
        self._closed = False

    def send_nowait(self, msg: ProviderMsg) -> None:
        """Start or pass on ``msg`` (see the class). Raises what the mailbox's
        ``send_nowait`` raises when the message goes there."""
        mailbox = self._mailbox
        start = self._state.start_attempt
        if (
            start is None
            or self._closed
            or type(msg) is not StartAttempt
            or mailbox.statistics().current_buffer_used
        ):
            mailbox.send_nowait(msg)
            return
        start(msg)

    async def send(self, msg: ProviderMsg) -> None:
        """:meth:`send_nowait`, waiting for room when the message goes to a full mailbox."""
        try:
            self.send_nowait(msg)
        except trio.WouldBlock:
            pass  # waited for outside the handler
        else:
            return
        await self._mailbox.send(msg)

    def close(self) -> None:
        """No more attempts: the mailbox closes, so the actor returns once every attempt it
        runs has ended."""
        self._closed = True
        self._mailbox.close()
