"""Handing a due load-test request to the runtime between any two task steps, not only when its
sender's turn comes.

trio runs the tasks that became runnable in passes: it looks at its timers and I/O only between
passes, and within a pass runs the tasks in an order of its own. A sender whose timer fires
while a pass of many streams' chunks is running waits for the rest of that pass, then for the
tasks before it in the next one: that wait, not the timer, is most of the send lag of a busy
load tester.

A :class:`Handover` is a trio instrument that looks, before every task step and right after
each I/O wait, at the earliest request due (one clock read and a compare), and when it is due
submits it to the runtime there and then, synchronously (``sluice._prepare.SubmitNow``): the call
is prepared and put into the Supervisor's mailbox, and ``sent`` is stamped at that moment (sent
is the hand-over to the runtime, as always). The sender task, woken by its own timer as
before, then only follows the call's stream. A submission that could wait (the provider's
actor not started yet, the response cache in use, the Supervisor's mailbox full, no free place
under ``max_in_flight``) is left to the sender, which submits it the ordinary way when it
runs: a hook cannot wait.

What a hook may do: trio calls it from its run loop, outside any task (``current_task()`` is
the task about to step, not ours), and removes an instrument whose hook raises. The
submission here never reaches a checkpoint (``Runtime.submits_at_once`` is asked first), so
it never parks a task; it runs in the sender task's own context (its context variables), and
whatever it raises is kept for the sender to raise in its own step.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import os
from typing import TYPE_CHECKING, Any

import trio

if TYPE_CHECKING:
    from collections.abc import Iterator
    from contextvars import Context

    from ..._mail import Call
    from ..._messages import ChatRequest
    from ..._runtime import Runtime
    from ..._streams import Followed
    from ...transport._phases import HttpPhases
    from .diagnose import Diagnosis

__all__ = ["ENV", "Handed", "Handover", "open_handover"]

ENV = "SLUICE_LOADTEST_HANDOVER"
"""``task`` turns the hand-over between steps off (each sender submits in its own step): for
comparing the two."""

_WAITING, _HANDED, _TAKEN = 0, 1, 2


class Handed:
    """One open-loop request waiting for its due time, and once due what its hand-over made:
    the submitted call or the error the submission raised."""

    __slots__ = (
        "at",
        "cap",
        "context",
        "due",
        "end",
        "error",
        "made",
        "phases",
        "request",
        "state",
    )

    def __init__(
        self,
        due: float,
        request: ChatRequest,
        phases: HttpPhases,
        cap: trio.Semaphore | None,
        context: Context,
        end: Followed,
    ) -> None:
        self.due = due
        self.request = request
        self.phases = phases
        self.cap = cap
        self.context = context
        self.end = end
        """Where the call's events go (``Runtime.submit_followed``)."""
        self.state = _WAITING
        self.at = 0.0
        """When it was handed over (trio time): its ``sent``."""
        self.made: Any = None
        self.error: BaseException | None = None

    def submitted(self) -> Call:
        """The handed-over call (its events go to ``end``; end it with
        ``Runtime.end_followed``); raises what the submission raised."""
        if self.error is not None:
            raise self.error
        made, self.made = self.made, None
        return made  # type: ignore[no-any-return]


class Handover(trio.abc.Instrument):
    """Submits each added request the moment it is due, between two task steps or right after
    an I/O wait (see the module docstring). ``sending``: once it is cancelled (a drain),
    nothing more is handed over."""

    def __init__(self, rt: Runtime, sending: trio.CancelScope) -> None:
        self._rt = rt
        self._sending = sending
        self._due: list[tuple[float, int, Handed]] = []
        self._order = itertools.count()
        self._now = trio.lowlevel.current_clock().current_time
        self.between_steps = 0
        """Requests this hook handed over (the rest were submitted by their senders)."""
        self.diagnosis: Diagnosis | None = None
        """Told each hand-over's lateness at its moment (``SLUICE_LOADTEST_DIAGNOSE``)."""

    def add(
        self,
        due: float,
        request: ChatRequest,
        phases: HttpPhases,
        cap: trio.Semaphore | None,
        end: Followed,
    ) -> Handed:
        """Hand ``request`` over at ``due`` (trio time), its events to go to ``end``; called
        by its sender task."""
        handed = Handed(due, request, phases, cap, trio.lowlevel.current_task().context, end)
        heapq.heappush(self._due, (due, next(self._order), handed))
        return handed

    def take(self, handed: Handed | None) -> Handed | None:
        """The sender of ``handed`` is past its due time (or stopped): ``handed`` if it was
        handed over, to be followed; else None, and the hook leaves it alone from now on
        (the sender submits it itself, or drops it). None for None (a request not added)."""
        if handed is None or handed.state == _HANDED:
            return handed
        handed.state = _TAKEN
        return None

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        due = self._due
        if due and due[0][0] <= self._now():
            self._hand_over()

    def after_io_wait(self, timeout: float) -> None:
        due = self._due
        if due and due[0][0] <= self._now():
            self._hand_over()

    def _hand_over(self) -> None:
        """Submit every request due by now. Never raises (trio would drop the instrument):
        a submission's error is kept for its sender."""
        due, now, rt = self._due, self._now(), self._rt
        while due and due[0][0] <= now:
            handed = heapq.heappop(due)[2]
            if handed.state != _WAITING:
                continue  # its sender took it back
            if self._sending.cancel_called:
                continue  # drained: it is not sent; its sender finds it not handed
            try:
                if not rt.submits_at_once(handed.request):
                    continue
                cap = handed.cap
                if cap is not None:
                    try:
                        cap.acquire_nowait()
                    except trio.WouldBlock:
                        continue  # its sender waits for a place: counted as lag
                handed.at = now
                handed.state = _HANDED
                self.between_steps += 1
                handed.made = handed.context.run(
                    rt.submit_followed_now, handed.request, handed.phases, handed.end
                )
                if self.diagnosis is not None:
                    self.diagnosis.arrival(handed.due, now, between_steps=True)
            except BaseException as exc:  # raised by the sender, in its own task
                handed.error = exc
            now = self._now()


@contextlib.contextmanager
def open_handover(
    rt: Runtime, sending: trio.CancelScope, diagnosis: Diagnosis | None = None
) -> Iterator[Handover | None]:
    """A :class:`Handover` installed for the block (None with ``SLUICE_LOADTEST_HANDOVER=task``),
    telling ``diagnosis`` of each request it hands over."""
    if os.environ.get(ENV) == "task":
        yield None
        return
    handover = Handover(rt, sending)
    handover.diagnosis = diagnosis
    trio.lowlevel.add_instrument(handover)
    try:
        yield handover
    finally:
        with contextlib.suppress(KeyError):
            trio.lowlevel.remove_instrument(handover)
