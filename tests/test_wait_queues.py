"""The wait queues of one quota key: priorities with ageing, and withdrawals in O(1).

A model (plain deques, removal by scanning: the obvious implementation) is run side by side
with :class:`WaitQueues` over random pushes, admissions and withdrawals; both must agree on
every answer.
"""

from __future__ import annotations

from collections import deque

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice._limits.queue import PRIORITIES, Priority, WaitQueues

AGING = 10.0


@attrs.define(eq=False)
class Waiter:
    priority: Priority
    enqueued_at: float


class Model:
    """What WaitQueues must answer, written the obvious way."""

    def __init__(self, aging: float) -> None:
        self.aging = aging
        self.queues: dict[Priority, deque[Waiter]] = {p: deque() for p in PRIORITIES}

    def peek(self, now: float) -> Waiter | None:
        best, best_score = None, 0.0
        for rank, name in enumerate(PRIORITIES):
            if self.queues[name]:
                head = self.queues[name][0]
                score = rank * self.aging - (now - head.enqueued_at)
                if best is None or score < best_score:
                    best, best_score = head, score
        return best

    def remove(self, waiter: Waiter) -> bool:
        queue = self.queues[waiter.priority]
        if not any(w is waiter for w in queue):
            return False
        self.queues[waiter.priority] = deque(w for w in queue if w is not waiter)
        return True


steps = st.lists(
    st.tuples(
        st.sampled_from(["push", "push", "admit", "withdraw", "withdraw_gone"]),
        st.sampled_from(PRIORITIES),
        st.floats(0.0, 30.0),
        st.integers(0, 10_000),
    ),
    max_size=300,
)


@settings(max_examples=300, deadline=None)
@given(steps)
def test_wait_queues_answer_as_the_model_does(ops):
    queues: WaitQueues[Waiter] = WaitQueues(AGING)
    model = Model(AGING)
    now = 0.0
    queued: list[Waiter] = []
    gone: list[Waiter] = []
    for op, priority, step, pick in ops:
        now += step
        if op == "push":
            waiter = Waiter(priority, now)
            queues.push(waiter)
            model.queues[priority].append(waiter)
            queued.append(waiter)
        elif op == "admit":
            head = queues.peek(now)
            assert head is model.peek(now)
            if head is not None:
                queues.pop(head)
                model.queues[head.priority].popleft()
                queued.remove(head)
                gone.append(head)
        elif op == "withdraw" and queued:
            waiter = queued.pop(pick % len(queued))
            assert queues.remove(waiter) is model.remove(waiter) is True
            gone.append(waiter)
        elif op == "withdraw_gone" and gone:
            waiter = gone[pick % len(gone)]  # admitted or withdrawn already
            assert queues.remove(waiter) is model.remove(waiter) is False
        assert queues.depth() == {p: len(q) for p, q in model.queues.items()}
        assert len(queues) == len(queued)
        assert bool(queues) == bool(queued)
        assert queues.peek(now) is model.peek(now)
        assert queues.peek(now + 1000.0) is model.peek(now + 1000.0)


class Counted:
    """A waiter that counts every comparison and hash made with it (the work of finding it)."""

    touched = 0

    def __init__(self, priority: Priority, enqueued_at: float) -> None:
        self.priority = priority
        self.enqueued_at = enqueued_at

    def __eq__(self, other: object) -> bool:
        Counted.touched += 1
        if Counted.touched > 1_000_000:
            raise AssertionError("withdrawals scan the queue: quadratic in the waiters")
        return self is other

    def __hash__(self) -> int:
        Counted.touched += 1
        return id(self)


def test_fifty_thousand_withdrawals_cost_constant_work_each():
    n = 50_000
    queues: WaitQueues[Counted] = WaitQueues(AGING)
    waiters = [Counted(PRIORITIES[i % 3], float(i)) for i in range(n)]
    for waiter in waiters:
        queues.push(waiter)
    Counted.touched = 0
    # The worst order for a scan: the newest first (the whole queue is passed each time),
    # while the head stays (the key is full), then every other one from the front.
    for waiter in reversed(waiters[n // 2 :]):
        assert queues.remove(waiter)
    for waiter in waiters[1 : n // 2 : 2]:
        assert queues.remove(waiter)
    assert Counted.touched <= 4 * n
    left = waiters[0 : n // 2 : 2]
    assert len(queues) == len(left)
    assert sum(queues.depth().values()) == len(left)
    admitted = []
    while (head := queues.peek(1e9)) is not None:
        queues.pop(head)
        admitted.append(head)
    assert sorted(admitted, key=id) == sorted(left, key=id)
    assert not queues


def test_drop_removes_the_waiters_a_predicate_picks_and_keeps_the_order_of_the_rest():
    queues: WaitQueues[Waiter] = WaitQueues(AGING)
    waiters = [Waiter(PRIORITIES[i % 2], float(i)) for i in range(8)]
    for waiter in waiters:
        queues.push(waiter)
    assert queues.remove(waiters[2])  # a withdrawn one is not dropped twice
    dropped = queues.drop(lambda w: w.enqueued_at in (0.0, 2.0, 3.0, 5.0))
    assert dropped == [waiters[0], waiters[3], waiters[5]]
    assert len(queues) == 4
    assert queues.depth() == {"interactive": 2, "batch": 2, "background": 0}
    order = []
    while (head := queues.peek(100.0)) is not None:
        queues.pop(head)
        order.append(head.enqueued_at)
    assert order == [4.0, 6.0, 1.0, 7.0]
