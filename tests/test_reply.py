"""The one-shot Reply keeps the parts of a memory channel's contract the actors rely on."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from sluice._reply import Reply

from .helpers import virtual_deadline


@virtual_deadline(10)
async def test_an_answer_wakes_the_waiting_asker(autojump_clock) -> None:
    reply = Reply[int]()
    got: list[int] = []
    async with trio.open_nursery() as nursery:

        async def ask() -> None:
            got.append(await reply.receive())

        nursery.start_soon(ask)
        await trio.sleep(1)
        assert got == []
        reply.send_nowait(7)
    assert got == [7]


@virtual_deadline(10)
async def test_an_answer_already_there_is_taken_at_once(autojump_clock) -> None:
    reply = Reply[str]()
    reply.send_nowait("yes")
    with trio.testing.assert_no_checkpoints():
        assert await reply.receive() == "yes"
    with pytest.raises(trio.WouldBlock):
        reply.receive_nowait()  # taken: a second look finds nothing


@virtual_deadline(10)
async def test_closed_without_an_answer_ends_the_wait(autojump_clock) -> None:
    reply = Reply[int]()
    async with trio.open_nursery() as nursery:

        async def ask() -> None:
            with pytest.raises(trio.EndOfChannel):
                await reply.receive()

        nursery.start_soon(ask)
        await trio.sleep(1)
        with reply:  # the answerer's task ends without answering
            pass
    with pytest.raises(trio.ClosedResourceError):
        reply.send_nowait(1)
    with pytest.raises(trio.EndOfChannel):
        reply.receive_nowait()


async def test_an_answer_survives_the_close_that_follows_it() -> None:
    reply = Reply[int]()
    with reply:
        reply.send_nowait(3)
    assert reply.receive_nowait() == 3


async def test_one_answer_only_and_none_once_the_asker_left() -> None:
    reply = Reply[int]()
    reply.send_nowait(1)
    with pytest.raises(trio.WouldBlock):
        reply.send_nowait(2)
    left = Reply[int]()
    left.leave()
    with pytest.raises(trio.BrokenResourceError):
        left.send_nowait(1)  # the answerer learns nobody will read it (and refunds)


@virtual_deadline(10)
async def test_a_cancelled_asker_can_still_find_an_answer_sent_later(autojump_clock) -> None:
    """What the RateLimiter's handle relies on after a cancellation: it looks again, and
    settles an admission that arrived, before it leaves the reply."""
    reply = Reply[int]()
    with trio.move_on_after(1):
        await reply.receive()
    reply.send_nowait(5)
    assert reply.receive_nowait() == 5


@virtual_deadline(10)
async def test_a_second_waiter_is_refused(autojump_clock) -> None:
    reply = Reply[int]()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(reply.receive)
        await trio.sleep(1)
        with pytest.raises(trio.BusyResourceError):
            await reply.receive()
        reply.send_nowait(1)


@virtual_deadline(10)
async def test_cancel_stops_the_askers_wait_unless_the_answer_is_there(autojump_clock) -> None:
    from sluice._reply import WaitStopped

    reply: Reply[int] = Reply()
    stopped: list[float] = []
    async with trio.open_nursery() as nursery:

        async def ask() -> None:
            with pytest.raises(WaitStopped):
                await reply.receive()
            stopped.append(trio.current_time())

        nursery.start_soon(ask)
        await trio.sleep(3)
        reply.cancel()
    assert stopped == [3.0]
    reply.send_nowait(1)  # the answerer may still answer: the asker decides what to do
    assert await reply.receive() == 1  # an answer that is there wins over the stop
    ahead: Reply[int] = Reply()
    ahead.cancel()  # stopped before the wait: it never waits
    with trio.testing.assert_no_checkpoints(), pytest.raises(WaitStopped):
        await ahead.receive()
