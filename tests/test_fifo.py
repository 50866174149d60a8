"""The list queue that per-key windows and breakers keep their logs in: the same answers as a
deque over any run of operations, in a list never much longer than what it holds."""

from __future__ import annotations

from collections import deque

from hypothesis import given, settings
from hypothesis import strategies as st

from sluice._fifo import Fifo

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(0, 9)),
        st.tuples(st.just("popleft"), st.just(0)),
        st.tuples(st.just("insert"), st.integers(0, 40)),
        st.tuples(st.just("clear"), st.just(0)),
    ),
    max_size=300,
)


@settings(max_examples=200, deadline=None)
@given(OPS)
def test_a_fifo_answers_as_a_deque_within_twice_its_items(ops: list[tuple[str, int]]) -> None:
    fifo: Fifo[int] = Fifo()
    model: deque[int] = deque()
    for n, (op, arg) in enumerate(ops):
        if op == "append":
            fifo.append(n)
            model.append(n)
        elif op == "popleft" and model:
            assert fifo.popleft() == model.popleft()
        elif op == "insert":
            index = min(arg, len(model))
            fifo.insert(index, n)
            model.insert(index, n)
        elif op == "clear":
            fifo.clear()
            model.clear()
        assert len(fifo) == len(model) and bool(fifo) == bool(model)
        assert list(fifo) == list(model)
        if model:
            assert fifo.at(0) == model[0] and fifo.last() == model[-1]
            assert fifo.at(len(model) - 1) == model[-1]
        assert len(fifo.items) <= 2 * len(model) + 17  # the popped front is cut off


def test_a_fifo_that_keeps_one_item_stays_small() -> None:
    """The shape of a per-key window: one admission in, one out, for ever."""
    fifo: Fifo[int] = Fifo()
    for n in range(10_000):
        fifo.append(n)
        if n:
            assert fifo.popleft() == n - 1
        assert len(fifo.items) <= 18
