"""Restarting crashed actors, within limits.

An actor "crashes" when a bug escapes it (an ``Exception``; cancellation is not a crash). Its
restarter logs the traceback and starts it again on the same mailbox, so senders never notice
more than a pause, at most ``max_restarts`` times within ``within`` seconds; one crash more and
the runtime stops with :class:`ActorCrashed`, because a bug that fires that often will not go
away by itself. Whatever the crashed instance held is released by the actor's own cleanup
(its waiters' and attempts' reply channels close), and the Supervisor resubmits those calls.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import TYPE_CHECKING, Any

import trio

from sluice._errors import ActorCrashed

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

__all__ = ["run_restarting"]

log = logging.getLogger("sluice.actors")


class _Status:
    """Passes ``started()`` through to the first run only."""

    def __init__(self, outer: trio.TaskStatus[None]) -> None:
        self.outer = outer
        self.done = False

    def started(self, value: Any = None) -> None:
        if not self.done:
            self.done = True
            self.outer.started()


async def run_restarting(
    name: str,
    actor: Callable[..., Awaitable[None]],
    inbox: trio.MemoryReceiveChannel[Any],
    *args: Any,
    max_restarts: int = 5,
    within: float = 10.0,
    on_restart: Callable[[str], None] | None = None,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run ``actor(inbox, *args, task_status=...)``, restarting it after a crash.

    Returns when the actor returns. ``task_status.started()`` is passed on from the first run;
    ``on_restart(name)`` is told of each restart (metrics).
    The inbox outlives restarts and is closed when this returns or raises, so a sender (even a
    shielded one) never waits on an actor that is gone.

    Raises:
        ActorCrashed: more than ``max_restarts`` crashes within ``within`` seconds.
    """
    with inbox:
        await _restarting(
            name, actor, inbox, args, max_restarts, within, on_restart, task_status
        )


async def _restarting(
    name: str,
    actor: Callable[..., Awaitable[None]],
    inbox: trio.MemoryReceiveChannel[Any],
    args: tuple[Any, ...],
    max_restarts: int,
    within: float,
    on_restart: Callable[[str], None] | None,
    task_status: trio.TaskStatus[None],
) -> None:
    status = _Status(task_status)
    crashes: deque[float] = deque()
    while True:
        try:
            await actor(inbox, *args, task_status=status)
            return
        except Exception as exc:
            if not status.done:
                raise  # it never started: there is nothing to restart
            now = trio.current_time()
            crashes.append(now)
            while crashes and crashes[0] <= now - within:
                crashes.popleft()
            if len(crashes) > max_restarts:
                raise ActorCrashed(
                    f"the {name} actor crashed {len(crashes)} times within {within:g} s;"
                    f" the last error was {type(exc).__name__}: {exc}"
                ) from exc
            log.exception("the %s actor crashed; restarting it", name)
            if on_restart is not None:
                on_restart(name)
