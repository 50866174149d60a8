"""The Supervisor's step, pure and synchronous: what a call does after each thing its loop sees
(about to try, a breaker's refusal, an attempt's outcome), over every branch, with exact delays.

A table of states and what was seen against the decision, then a property over random
sequences: whatever happens, the step never spends a retry the budget lacks, never moves on
without a next model, and never pauses a waiting call past its wait deadline.
"""

from __future__ import annotations

import functools
import math
import random
import subprocess
import sys
from typing import TYPE_CHECKING, Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sluice
import sluice._call_setbacks as setbacks
import sluice._call_step as steps
from sluice import ChatRequest, RetryConfig
from sluice._call_setbacks import (
    LOST_ATTEMPTS_MAX,
    Correct,
    Failure,
    GiveUp,
    Lost,
    Misfired,
    MoveOn,
    Pause,
    Refused,
    Resubmit,
    Retry,
    WaitedOut,
)
from sluice._call_step import (
    GO,
    GO_SPENDING,
    LEAVE,
    LEFT,
    READY,
    Go,
    Tries,
    Won,
    first_tries,
    step,
)
from sluice._errors import ToolCallError
from sluice._messages import ChatResult, Message, Tool
from sluice._retry_policy import CallState, call_state
from sluice._tools import ToolCapabilities, ToolOptions, prepare

if TYPE_CHECKING:
    from sluice._call_step import Decision, Seen

POLICY = RetryConfig(base_delay=0.5, max_delay=8.0, jitter=0.0, max_attempts=4, wait_poll=1.0)
BOOM = sluice.ServerError("boom", status=500)
BUSY = sluice.Overloaded("overloaded", status=529)
BAD = sluice.BadRequest("no", status=400)
LONG = sluice.ContextTooLong("context too long", status=400)
OPEN = sluice.CircuitOpen("sim:m failed repeatedly", attempt=2)
CRASHED = sluice.ConnectionFailed("the attempt was lost when its actor crashed")
MAX_WAIT = sluice.CallTimeout("waited longer than its max_wait", timeout_kind="total")
RESULT = ChatResult(
    call_id="c", provider="sim", model="m", message=Message.assistant("4"), finish_reason="stop"
)
TOOL = Tool(
    name="add",
    parameters={"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
)
PREPARED = prepare(
    ChatRequest(model="sim:m", messages="hi", tools=[TOOL], tool_choice="required"),
    ToolCapabilities(),
    ToolOptions(max_corrections=2),
)
MISCALL = ToolCallError("no tool call", reason="no_tool_call", generated="text")

ON_LAST = first_tries(waits=False, fails_over=False, falls_back=False)
"""A fail_fast call on the last (or only) model of its chain."""
WAITING = first_tries(waits=True, fails_over=False, falls_back=False)
WITH_FALLBACK = first_tries(waits=False, fails_over=False, falls_back=True)
IN_GROUP = first_tries(waits=False, fails_over=True, falls_back=True)


def state_of(priority="interactive", attempts=1, deadline=math.inf, **request: Any):
    """``state(waits)`` as the Supervisor gives it: the call's state, with ``waits`` turned off
    for a model that does not wait (one followed by another)."""
    r = ChatRequest(model="sim:m", messages="hi", priority=priority, **request)

    def state(waits: bool) -> CallState:
        s = call_state(r, POLICY, attempts, 0.0, deadline)
        return s if waits or not s.waits else attrs.evolve(s, waits=False)

    return state


FAST = state_of()
BATCH = state_of("batch", max_wait=100.0)
ROOM = lambda now: 0.0  # noqa: E731 (the retry budget has room)
SPENT = lambda now: 4.0  # noqa: E731 (a retry may be spent again in 4 s)


def decide(tries: Tries, seen: Seen, now=10.0, state=FAST, free_in=ROOM, rng=None) -> Decision:
    return step(tries, seen, now, state, free_in, POLICY, rng or random.Random(0))


# ---- before an attempt --------------------------------------------------------------------


def test_ready_goes_and_spends_a_retry_only_when_one_is_owed():
    assert decide(ON_LAST, READY) is GO
    owed = attrs.evolve(ON_LAST, retrying=BOOM)
    assert decide(owed, READY) is GO_SPENDING
    assert isinstance(GO, Go) and not GO.spend_retry and GO_SPENDING.spend_retry


def test_ready_without_budget_fails_fast_or_waits_for_it():
    owed = attrs.evolve(ON_LAST, retrying=BOOM)
    assert_give_up(decide(owed, READY, free_in=SPENT), BOOM)
    waiting = attrs.evolve(WAITING, retrying=BOOM)
    d = decide(waiting, READY, state=BATCH, free_in=SPENT)
    assert isinstance(d, Pause) and d.delay == 4.0 and d.tries is waiting  # still owed
    near = decide(waiting, READY, now=98.0, state=BATCH, free_in=SPENT)
    assert isinstance(near, Pause) and near.delay == 2.0  # looks again at its deadline


def test_a_waiting_call_ends_with_its_last_error_when_its_wait_ran_out():
    worn = attrs.evolve(WAITING, last_error=BUSY)
    assert decide(worn, READY, now=99.0, state=BATCH) is GO
    assert_give_up(decide(worn, READY, now=100.0, state=BATCH), BUSY)
    assert decide(attrs.evolve(ON_LAST, last_error=BUSY), READY, now=1e9) is GO  # fail_fast


def test_a_refusing_breaker_fails_fast_counting_the_attempt_or_pauses_a_waiting_call():
    d = decide(ON_LAST, Refused(OPEN, 7.0))
    assert isinstance(d, GiveUp) and d.refused and d.error.attempt == 3
    moved = decide(WITH_FALLBACK, Refused(OPEN, 7.0))  # CircuitOpen is in fallback_on
    assert isinstance(moved, MoveOn) and moved.refused and not moved.failover
    owed = attrs.evolve(WAITING, retrying=BOOM)
    paused = decide(owed, Refused(OPEN, 7.0), state=BATCH)
    assert isinstance(paused, Pause) and paused.delay == 7.0
    assert paused.tries.last_error is OPEN and paused.tries.retrying is None  # it was spent


def test_a_breaker_testing_a_probe_is_polled_with_jitter():
    rng = random.Random(5)
    draw = random.Random(5).random()
    d = decide(WAITING, Refused(OPEN, 0.0), state=BATCH, rng=rng)
    assert isinstance(d, Pause) and d.delay == POLICY.wait_poll * (0.5 + draw)


# ---- after an attempt ---------------------------------------------------------------------


def test_a_result_finishes_and_a_consumer_that_left_leaves():
    won = Won(RESULT)
    assert decide(ON_LAST, won) is won  # finish with it
    assert decide(ON_LAST, LEFT) is LEAVE


def test_a_failure_retries_after_the_backoff_paid_now():
    d = decide(ON_LAST, Failure(BOOM, 0))
    assert isinstance(d, Retry) and (d.delay, d.error, d.reset, d.spend_retry) == (
        0.5,
        BOOM,
        False,
        True,
    )
    assert d.tries.last_error is BOOM and d.tries.retrying is None
    reset = decide(ON_LAST, Failure(BOOM, 3))
    assert isinstance(reset, Retry) and reset.reset
    later = decide(ON_LAST, Failure(BOOM, 0), state=state_of(attempts=3))
    assert isinstance(later, Retry) and later.delay == 2.0


def test_a_failure_without_budget_fails_fast_or_retries_later_and_pays_then():
    assert_give_up(decide(ON_LAST, Failure(BOOM, 0), free_in=SPENT), BOOM)
    d = decide(WAITING, Failure(BOOM, 0), state=BATCH, free_in=SPENT)
    assert isinstance(d, Retry) and d.delay == 4.0 and not d.spend_retry
    assert d.tries.retrying is BOOM and d.tries.last_error is BOOM
    slow = decide(WAITING, Failure(BOOM, 0), state=state_of("batch", attempts=9), free_in=SPENT)
    assert isinstance(slow, Retry) and slow.delay == 8.0  # the backoff is the longer wait


def test_the_retry_policy_ends_the_model():
    assert_give_up(decide(ON_LAST, Failure(BAD, 0)), BAD)
    assert_give_up(decide(ON_LAST, Failure(BOOM, 0), state=state_of(attempts=4)), BOOM)
    assert_give_up(decide(ON_LAST, Failure(BOOM, 2), state=state_of(on_partial="fail")), BOOM)


@pytest.mark.parametrize(
    ("tries", "error", "delivered", "expected"),
    [
        # another deployment follows: any retryable failure moves the call at once
        (IN_GROUP, BOOM, 0, ("MoveOn", True, False)),
        (IN_GROUP, BOOM, 2, ("MoveOn", True, True)),
        (IN_GROUP, LONG, 0, ("MoveOn", True, False)),  # in fallback_on, not retryable
        (IN_GROUP, BAD, 0, ("GiveUp",)),
        # a fallback model follows: only what fallback_on names moves on
        (WITH_FALLBACK, BUSY, 0, ("Retry",)),  # retried first, moved on when it gives up
        (WITH_FALLBACK, LONG, 1, ("MoveOn", False, True)),
        (WITH_FALLBACK, BAD, 0, ("GiveUp",)),
        (ON_LAST, LONG, 0, ("GiveUp",)),
    ],
)
def test_fail_over_fall_back_or_fail(tries, error, delivered, expected):
    d = decide(tries, Failure(error, delivered))
    assert type(d).__name__ == expected[0]
    if isinstance(d, MoveOn):
        assert (d.failover, d.reset, d.refused, d.error) == (*expected[1:], False, error)
    if isinstance(d, GiveUp):
        assert d.error is error and not d.refused


def test_an_overload_moves_on_once_its_retries_are_spent():
    d = decide(WITH_FALLBACK, Failure(BUSY, 0), state=state_of(attempts=4))
    assert isinstance(d, MoveOn) and d.error is BUSY and not d.failover


def test_a_tool_call_error_is_corrected_at_once_while_the_options_allow():
    d = decide(ON_LAST, Misfired(MISCALL, PREPARED, 0))
    assert isinstance(d, Correct) and d.error is MISCALL and not d.reset
    assert d.tries.corrections.count == 1 and d.tries.corrections.messages
    again = decide(d.tries, Misfired(MISCALL, PREPARED, 2))
    assert isinstance(again, Correct) and again.reset and again.tries.corrections.count == 2
    assert_give_up(decide(again.tries, Misfired(MISCALL, PREPARED, 0)), MISCALL)  # max 2


def test_a_tool_call_error_is_not_corrected_late_after_output_or_when_cut_off():
    assert_give_up(
        decide(ON_LAST, Misfired(MISCALL, PREPARED, 0), state=state_of(deadline=5.0)), MISCALL
    )
    strict = state_of(on_partial="fail")
    assert_give_up(decide(ON_LAST, Misfired(MISCALL, PREPARED, 1), state=strict), MISCALL)
    assert isinstance(decide(ON_LAST, Misfired(MISCALL, PREPARED, 0), state=strict), Correct)
    cut = ToolCallError("cut off", reason="truncated", correctable=False)
    assert_give_up(decide(ON_LAST, Misfired(cut, PREPARED, 0)), cut)


def test_a_lost_attempt_is_resubmitted_a_bounded_number_of_times():
    tries = attrs.evolve(ON_LAST, retrying=BOOM)
    for lost in range(1, LOST_ATTEMPTS_MAX + 1):
        d = decide(tries, Lost(CRASHED, lost % 2))
        assert isinstance(d, Resubmit) and d.error is CRASHED and d.reset == bool(lost % 2)
        tries = d.tries
        assert tries.lost == lost and tries.retrying is None
    assert_give_up(decide(tries, Lost(CRASHED, 0)), CRASHED)
    moved = decide(attrs.evolve(IN_GROUP, lost=LOST_ATTEMPTS_MAX), Lost(CRASHED, 4))
    assert isinstance(moved, MoveOn) and moved.reset and moved.failover


def test_a_call_that_waited_out_its_max_wait_ends_with_its_last_error_if_it_had_one():
    assert_give_up(decide(WAITING, WaitedOut(MAX_WAIT), state=BATCH), MAX_WAIT)
    worn = attrs.evolve(WAITING, last_error=BUSY)
    assert_give_up(decide(worn, WaitedOut(MAX_WAIT), state=BATCH), BUSY)


def assert_give_up(d: Decision, error: sluice.CallError) -> None:
    assert isinstance(d, GiveUp) and d.error is error and not d.refused, d


# ---- a property over random runs -----------------------------------------------------------

ERRORS = [BOOM, BUSY, BAD, LONG, CRASHED, sluice.RateLimited("slow", status=429, retry_after=3.0)]


def _free_in(free: float, now: float) -> float:
    return free


def outcome_strategy() -> st.SearchStrategy[Seen]:
    """What an attempt (or the breaker before it) may come back with."""
    error = st.sampled_from(ERRORS)
    delivered = st.integers(0, 3)
    return st.one_of(
        st.builds(Failure, error, delivered),
        st.builds(Failure, st.just(BOOM), delivered),
        st.just(LEFT),
        st.builds(Won, st.just(RESULT)),
        st.builds(Lost, st.just(CRASHED), delivered),
        st.builds(Misfired, st.just(MISCALL), st.just(PREPARED), delivered),
        st.builds(WaitedOut, st.just(MAX_WAIT)),
        st.builds(Refused, st.just(OPEN), st.sampled_from([0.0, 3.0, 30.0])),
    )


@settings(max_examples=300)
@given(
    waits=st.booleans(),
    fails_over=st.booleans(),
    falls_back=st.booleans(),
    outcomes=st.lists(outcome_strategy(), max_size=12),
    frees=st.lists(st.sampled_from([0.0, 4.0]), min_size=30, max_size=30),
    start=st.sampled_from([0.0, 12.0, 15.0, 17.0, 18.5, 19.5, 20.0]),
    seed=st.integers(0, 2**16),
)
def test_whatever_happens_the_step_stays_within_its_bounds(
    waits, fails_over, falls_back, outcomes, frees, start, seed
):
    """The Supervisor's loop, its attempts replaced by drawn outcomes: after every decision
    that keeps the call on its model it is READY again, and after ``Go`` an outcome comes."""
    tries = first_tries(waits, fails_over and falls_back, falls_back)
    assert (tries.waits, tries.fails_over, tries.falls_back, tries.lost) == (
        waits,
        fails_over and falls_back,
        falls_back,
        0,
    )
    rng, now, attempts = random.Random(seed), start, 1
    outcomes, frees = list(outcomes), iter(frees)
    seen: Seen = READY
    while outcomes or seen is not READY:
        free = next(frees, 0.0)
        state = state_of("batch" if waits else "interactive", attempts, max_wait=20.0)
        d = step(tries, seen, now, state, functools.partial(_free_in, free), POLICY, rng)
        if isinstance(d, Go):
            assert d.spend_retry == (tries.retrying is not None)
            assert not d.spend_retry or free == 0.0  # never a retry the budget lacks
            attempts += 1
            seen = outcomes.pop(0)
            continue
        if isinstance(d, Retry):
            assert d.spend_retry == (free == 0.0)
            assert (d.tries.retrying is None) == d.spend_retry
        if isinstance(d, Pause | Retry):
            if tries.waits:
                assert now + d.delay <= state(True).wait_until  # it fails on time
            now += d.delay
        if isinstance(d, MoveOn):
            assert tries.falls_back and d.failover == tries.fails_over
        if isinstance(d, Correct | Resubmit) or (isinstance(d, Pause) and seen is not READY):
            assert d.tries.retrying is None  # what an attempt or a refusal paid for is paid
        if not isinstance(d, Pause | Retry | Correct | Resubmit):
            return  # the call is done with the model
        tries, seen = d.tries, READY


def test_the_setbacks_load_with_the_first_one_and_are_served_by_the_step_module() -> None:
    """A call that goes and wins never loads ``sluice._call_setbacks``: the step decides it
    alone. The first setback loads it, and its classes are also ``sluice._call_step``'s
    attributes (the Supervisor matches on them there)."""
    code = (
        "import sys\n"
        "from sluice import RetryConfig\n"
        "from sluice._call_step import READY, Go, Won, first_tries, step\n"
        "policy = RetryConfig()\n"
        "tries = first_tries(False, False, False)\n"
        "def no(_: object) -> object:\n"
        "    raise AssertionError('a success asks no state')\n"
        "assert isinstance(step(tries, READY, 0.0, no, no, policy, None), Go)\n"
        "won = Won(None)\n"
        "assert step(tries, won, 0.0, no, no, policy, None) is won\n"
        "print('sluice._call_setbacks' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True)
    assert done.stdout.split() == [b"False"]
    assert steps.Retry is setbacks.Retry and steps.LOST_ATTEMPTS_MAX == setbacks.LOST_ATTEMPTS_MAX
    assert isinstance(decide(first_tries(False, False, False), Failure(BAD, 0)), steps.GiveUp)
    with pytest.raises(AttributeError):
        _ = steps.NoSuchName
