"""The Supervisor's door (``sluice.actors._doors``): a call submitted while few are in flight
starts at once; a burst goes through the mailbox, whose bound paces it, so thousands of calls
submitted in one step do not all reach their attempts, bodies and connections in the same
moment (a peak of memory the heap keeps: ``benchmarks/open_streams.py`` shows it per open
stream)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
import trio

from sluice._mail import Submit
from sluice.actors._doors import DOOR_CALLS, SupervisorDoor
from sluice.actors._supervisor_peers import CallCount

if TYPE_CHECKING:
    from trio.testing import MockClock


class _Submitted:
    """A stand-in for a submitted call: the door hands ``msg.call`` on and reads nothing of it."""

    def __init__(self, n: int) -> None:
        self.n = n


def _submit(n: int) -> Submit:
    call: Any = _Submitted(n)
    return Submit(call)


def test_calls_start_at_once_until_the_burst_bound_then_queue_in_the_mailbox() -> None:
    send, receive = trio.open_memory_channel[Any](4)
    door = SupervisorDoor(send)
    count = CallCount()
    started: list[int] = []

    def start(call: Any) -> None:  # what run_supervisor's start does: start and count in
        started.append(call.n)
        count.value += 1

    door.send_nowait(_submit(0))  # before the Supervisor runs: the mailbox
    assert receive.receive_nowait().call.n == 0 and started == []
    door.open(start, count)
    for n in range(1, DOOR_CALLS + 3):
        door.send_nowait(_submit(n))
    assert started == list(range(1, DOOR_CALLS + 1))
    queued = [receive.receive_nowait().call.n for _ in range(2)]
    assert queued == [DOOR_CALLS + 1, DOOR_CALLS + 2]
    count.value -= 1  # a call ended: the next one starts at once again
    door.send_nowait(_submit(99))
    assert started[-1] == 99
    door.shut()  # the Supervisor stopped: the mailbox again
    door.send_nowait(_submit(100))
    assert receive.receive_nowait().call.n == 100 and started[-1] == 99
    door.close()
    with pytest.raises(trio.ClosedResourceError):
        door.send_nowait(_submit(101))


async def test_a_burst_waits_for_room_in_the_mailbox(autojump_clock: MockClock) -> None:
    send, receive = trio.open_memory_channel[Any](1)
    door = SupervisorDoor(send)
    count = CallCount()
    count.value = DOOR_CALLS  # a burst is in flight: everything takes the mailbox
    door.open(lambda call: None, count)
    with trio.fail_after(5):
        await door.send(_submit(1))  # room for one
        async with trio.open_nursery() as nursery:
            nursery.start_soon(door.send, _submit(2))  # waits for room
            await trio.sleep(1)
            assert receive.receive_nowait().call.n == 1
            await trio.sleep(1)
            assert receive.receive_nowait().call.n == 2
