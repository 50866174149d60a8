"""The batch cursor that the trio, asyncio and blocking streams share (``sluice._cursor``):
events in order across batches, ``result``/``error`` from the last event, and exactly one of
them for a call whose events end without ``Completed`` or ``Failed``."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from sluice import CallError, ChatResult, Message, RuntimeClosed, Timings, Usage
from sluice._cursor import AsyncEventCursor, BlockingEventCursor
from sluice._events import Completed, Failed, TextDelta

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sluice._errors import SluiceError
    from sluice._events import CallEvent

RESULT = ChatResult(
    call_id="c1",
    provider="sim",
    model="echo",
    message=Message.assistant("ab"),
    finish_reason="stop",
    usage=Usage(3, 2),
    attempts=1,
    timings=Timings(queued=0.0, time_to_first_token=0.1, total=0.2),
    request_id="r1",
    models_tried=("sim:echo",),
)
DELTAS: list[CallEvent] = [TextDelta("c1", "a"), TextDelta("c1", "b")]


class Listed(BlockingEventCursor):
    """A blocking cursor over given batches; ``closing`` is what its producer saw."""

    def __init__(
        self, batches: list[Sequence[CallEvent]], closing: SluiceError | None = None
    ) -> None:
        super().__init__("c1")
        self.batches = list(batches)
        self.closing = closing
        self.fetched = 0

    def _next_batch(self) -> Sequence[CallEvent] | None:
        batch = self.batches.pop(0) if self.batches else None
        self.fetched += batch is not None
        return self._arrived(batch, self.closing)


class AsyncListed(AsyncEventCursor):
    def __init__(self, batches: list[Sequence[CallEvent]]) -> None:
        super().__init__("c1")
        self.batches = list(batches)

    async def _next_batch(self) -> Sequence[CallEvent] | None:
        return self._arrived(self.batches.pop(0) if self.batches else None)


def test_events_come_in_order_across_batches_and_completed_sets_the_result():
    done = Completed("c1", RESULT)
    cursor = Listed([DELTAS[:1], [DELTAS[1], done]])
    assert list(cursor) == [*DELTAS, done]
    assert (cursor.result, cursor.error) == (RESULT, None)
    assert cursor.wait() is RESULT


def test_failed_sets_the_error_and_wait_raises_it():
    error = CallError("upstream said no", call_id="c1")
    cursor = Listed([DELTAS, [Failed("c1", error)]])
    with pytest.raises(CallError) as raised:
        cursor.wait()
    assert raised.value is error
    assert (cursor.result, cursor.error, cursor.fetched) == (None, error, 2)


def test_events_that_end_without_an_outcome_report_the_producers_error_or_runtime_closed():
    seen = CallError("the stream broke", call_id="c1")
    with pytest.raises(CallError) as raised:
        Listed([DELTAS], closing=seen).wait()
    assert raised.value is seen
    cursor = Listed([DELTAS])
    assert list(cursor) == DELTAS
    assert isinstance(cursor.error, RuntimeClosed)
    assert "call c1 ended without a result" in str(cursor.error)
    assert list(cursor) == []  # ended stays ended, the error stays the first one
    assert isinstance(cursor.error, RuntimeClosed) and cursor.result is None


async def test_the_async_cursor_reads_the_same():
    done = Completed("c1", RESULT)
    cursor = AsyncListed([DELTAS[:1], [DELTAS[1], done]])
    assert [event async for event in cursor] == [*DELTAS, done]
    assert cursor.result is RESULT
    skipped = AsyncListed([DELTAS, [done]])
    assert await skipped.wait() is RESULT
    with pytest.raises(RuntimeClosed):
        await AsyncListed([DELTAS]).wait()
