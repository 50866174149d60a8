"""Delivering a message that must arrive, as cheaply as the mailbox allows."""

from __future__ import annotations

from typing import Protocol, TypeVar

import trio

__all__ = ["MAILBOX_BUFFER", "tell"]

T = TypeVar("T")
T_contra = TypeVar("T_contra", contravariant=True)


class Sendable(Protocol[T_contra]):
    """What :func:`put` sends on: a memory channel's send end, or a call's one-shot end."""

    def send_nowait(self, value: T_contra, /) -> None: ...

    async def send(self, value: T_contra, /) -> None: ...


MAILBOX_BUFFER = 256
"""Room in the RateLimiter's, TokenLedger's, providers' and Supervisor's mailboxes.

Their traffic is mostly "tells" (a first chunk arrived, an attempt ended, usage) sent in bursts
by thousands of attempts. With room in the mailbox a tell lands without a task switch, and the
actor takes a burst in one run; requests that need an answer still wait for it, so
backpressure holds where it matters. A zero-buffer mailbox would cost a task switch per message,
several per call: a large share of the runtime's own CPU (benchmarks/README.md, "Numbers behind
choices in the code").
"""


async def tell(mailbox: trio.MemorySendChannel[T], msg: T) -> None:
    """Deliver ``msg``; shielded, so a cancelled sender still delivers what it owes.

    Returns quietly if the actor has stopped (there is nobody left to tell).
    """
    try:
        mailbox.send_nowait(msg)
        return
    except trio.WouldBlock:
        pass
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        return
    with trio.CancelScope(shield=True):
        try:
            await mailbox.send(msg)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass


async def put(channel: Sendable[T], msg: T) -> None:
    """``channel.send(msg)`` without its checkpoints when there is room: the caller's next
    await is checkpoint enough, and the receiver wakes once for a burst of messages.

    Raises what ``send`` raises (``BrokenResourceError`` when the receiver has gone).
    """
    try:
        channel.send_nowait(msg)
        return
    except trio.WouldBlock:
        pass  # waited for outside the handler, which would hold the exception meanwhile
    await channel.send(msg)


async def take(channel: trio.MemoryReceiveChannel[T]) -> T:
    """``channel.receive()`` without its checkpoints when a message is already waiting.

    An actor draining a burst then handles it in one run instead of one scheduler round trip
    per message (``receive`` yields twice even when it need not wait). The mailbox buffer
    bounds a burst, and the next empty mailbox is a checkpoint.

    Raises:
        trio.EndOfChannel: every sender has closed and nothing is left.
    """
    try:
        return channel.receive_nowait()
    except trio.WouldBlock:
        pass  # waited for outside the handler, which would hold the exception (and its
        # traceback) for as long as the wait lasts: for a call's whole stream
    return await channel.receive()
