"""The RateLimiter's admission decisions (:mod:`sluice._limits.admission`), synchronously and
exactly: the clock is a number passed in, the store's answer a value, the rng seeded."""

from __future__ import annotations

import math
import random
from collections import deque

import pytest

from sluice._config import RateLimitConfig
from sluice._errors import (
    BudgetExceeded,
    InternalError,
    RateLimited,
    StoreUnavailable,
    TooLargeForQuota,
)
from sluice._limits import admission
from sluice._limits.admission import Admit, QuotaKey, Refuse, StoreDown, Wait
from sluice._limits.cost import Cost
from sluice._limits.store import BudgetRefused, Reservation, TooLarge
from sluice._mail import Acquire, Admission, Expired, Refusal
from sluice._reply import Reply

ONE = Cost(1, 0, 0)


def ask(
    at: float = 0.0, *, fail_on_cooldown: bool = False, wait_for_store: float | None = None
) -> Acquire:
    reply_to = Reply[Admission | Refusal | Expired]()
    return Acquire(
        "k",
        RateLimitConfig(),
        ONE,
        "interactive",
        at,
        reply_to,
        fail_on_cooldown=fail_on_cooldown,
        wait_for_store=wait_for_store,
    )


def key(limits: RateLimitConfig | None = None, *waiters: Acquire) -> QuotaKey[Acquire]:
    made: QuotaKey[Acquire] = admission.new_key("k", limits or RateLimitConfig())
    for waiter in waiters:
        made.waiters.push(waiter)
    return made


def reservation() -> Reservation:
    return Reservation("k", ONE, ())


# -- exhaustion and cooldowns ---------------------------------------------------------------


def test_a_quota_429_exhausts_the_key_until_it_resets_then_is_forgotten():
    k = key(RateLimitConfig(max_cooldown=60.0))
    assert admission.exhausts(k, 30.0, True, now=10.0)
    error = admission.exhaustion(k, 39.9)
    assert isinstance(error, RateLimited)
    assert error.retry_after == 30.0 and error.quota == "quota"
    assert "the account's quota is exhausted; calls under 'k' fail until it resets" in str(error)
    assert admission.exhaustion(k, 40.0) is None
    assert k.exhausted_error is None


def test_a_wait_beyond_max_cooldown_exhausts_for_max_cooldown_only():
    k = key(RateLimitConfig(max_cooldown=60.0))
    assert admission.exhausts(k, 500.0, False, now=0.0)
    assert k.exhausted_until == 60.0
    assert "asks for a 500 s wait, beyond max_cooldown (60 s)" in str(k.exhausted_error)


def test_a_wait_within_max_cooldown_pauses_instead():
    k = key(RateLimitConfig(max_cooldown=60.0))
    assert not admission.exhausts(k, 60.0, False, now=0.0)
    assert k.exhausted_error is None and admission.exhaustion(k, 0.0) is None


def test_a_pause_is_noted_and_only_those_that_will_not_wait_it_out_leave():
    patient, impatient = ask(0.0), ask(0.0, fail_on_cooldown=True)
    k = key(None, patient, impatient)
    assert not admission.note_cooldown(k, 0.0, now=5.0)
    assert admission.note_cooldown(k, 2.5, now=5.0)
    assert k.cooldown_end == 7.5
    assert admission.note_cooldown(k, 1.0, now=5.0)  # a shorter answer never shortens it
    assert k.cooldown_end == 7.5
    refused, error = admission.leave_cooling(k, now=6.0)
    assert refused == [impatient]
    assert error.retry_after == 1.5 and error.status == 429
    assert "it asked for a pause that ends in 1.5 s" in str(error)
    assert k.waiters.live() == [patient]


def test_a_cooldown_arms_one_spread_of_at_most_the_pause():
    k = key(RateLimitConfig(cooldown_jitter=0.5, max_pending=8, adaptive=True))
    assert k.adaptive is not None
    admission.cooled(k, 0.2, admitted_at=0.0, now=1.0)
    assert (k.cooldown_end, k.spread_armed, k.cooldown_wait) == (1.2, True, 0.2)
    assert k.adaptive.limit == 1.0 and k.adaptive.threshold == 4.0  # halved, then from one
    for i in range(3):
        k.waiters.push(ask(float(i)))
    admission.arm_spread(k, now=1.3, rng=random.Random(7))
    draws = random.Random(7)
    assert list(k.spread or ()) == sorted(1.2 + draws.uniform(0.0, 0.2) for _ in range(3))
    assert not k.spread_armed
    # A 429 while the spread is under way does not start it again.
    admission.cooled(k, 5.0, admitted_at=1.25, now=1.25)
    assert not k.spread_armed and k.cooldown_end == 6.25


def test_no_spread_without_jitter():
    k = key(RateLimitConfig(cooldown_jitter=0.0), ask())
    admission.cooled(k, 3.0, admitted_at=0.0, now=0.0)
    admission.arm_spread(k, now=3.0, rng=random.Random(0))
    assert k.spread is None and not k.spread_armed


# -- what holds the head waiter back ---------------------------------------------------------


def test_the_head_waits_for_its_turn_in_the_spread_then_for_free_slots():
    k = key(RateLimitConfig(max_pending=2, max_open_streams=3), ask())
    assert admission.blocked(k, 0.0) is None
    k.spread = deque([4.0, 4.5])
    assert admission.blocked(k, 3.0) == 4.0
    assert admission.blocked(k, 4.0) is None
    k.pending = 2
    assert admission.blocked(k, 4.0) == math.inf
    k.pending, k.open_streams = 1, 3
    assert admission.blocked(k, 4.0) == math.inf
    k.open_streams = 2
    assert admission.blocked(k, 4.0) is None


def test_an_adaptive_limit_replaces_max_pending():
    k = key(RateLimitConfig(max_pending=4, adaptive=True), ask())
    assert k.adaptive is not None
    k.adaptive.on_congestion(0.0, 1.0)  # halved to 2
    k.pending = 2
    assert admission.blocked(k, 1.0) == math.inf
    k.pending = 1
    assert admission.blocked(k, 1.0) is None


# -- the store's answer ----------------------------------------------------------------------


def test_a_reservation_admits_the_head_and_uses_its_spread_turn():
    first, second = ask(0.0), ask(1.0)
    k = key(None, first, second)
    k.spread = deque([2.0, 2.1])
    reserved = reservation()
    decision = admission.decide(k, reserved, now=2.0)
    assert isinstance(decision, Admit)
    assert decision.waiter is first and decision.reservation is reserved
    assert k.waiters.live() == [second] and list(k.spread) == [2.1]


def test_a_wait_keeps_everyone_queued_until_the_windows_have_room():
    k = key(None, ask())
    assert admission.decide(k, 1.25, now=3.0) == Wait(4.25)
    assert len(k.waiters) == 1


@pytest.mark.parametrize(
    ("answer", "error_type", "message"),
    [
        (
            TooLarge("total_tokens", 5000, 4000, 60.0),
            TooLargeForQuota,
            "the call needs 5000 total tokens but the quota allows only 4000 per 60 s",
        ),
        (
            BudgetRefused("tag:team", "usd", 1_500_000),
            BudgetExceeded,
            "the shared tag:team budget has $1.500000 left, less than this call may cost",
        ),
        (
            BudgetRefused("job:j", "tokens", -3),
            BudgetExceeded,
            "the shared job:j budget has 0 tokens left",
        ),
    ],
)
def test_an_answer_that_can_never_fit_refuses_the_head_alone(answer, error_type, message):
    head, behind = ask(0.0), ask(1.0)
    k = key(None, head, behind)
    decision = admission.decide(k, answer, now=0.0)
    assert isinstance(decision, Refuse) and decision.waiter is head
    assert isinstance(decision.error, error_type) and message in str(decision.error)
    assert k.waiters.live() == [behind]


def test_a_store_bug_refuses_the_head_with_that_error():
    bug = InternalError("the script answered nonsense")
    k = key(None, ask())
    decision = admission.decide(k, bug, now=0.0)
    assert isinstance(decision, Refuse) and decision.error is bug
    assert not k.waiters


def test_a_store_outage_refuses_who_will_not_wait_and_backs_off_for_the_rest():
    down = StoreUnavailable("redis does not answer")
    at_once, soon, patient = ask(0.0), ask(0.0, wait_for_store=10.7), ask(0.0, wait_for_store=60.0)
    k = key(None, at_once, soon, patient)
    first = admission.decide(k, down, now=10.0)
    # Asked again after STORE_RETRY_FIRST (0.25 s): a wait ending within the grace is over.
    assert first == StoreDown((at_once, soon), down, 10.25)
    assert k.store_down_since == 10.0 and k.waiters.live() == [patient]
    # Four seconds into the outage the next look is two seconds on (half of it).
    assert admission.decide(k, down, now=14.0) == StoreDown((), down, 16.0)
    # The store answers again: the outage is over for this key.
    assert admission.decide(k, 0.5, now=16.0) == Wait(16.5)
    assert k.store_down_since is None


def test_an_outage_with_nobody_left_waiting_schedules_no_look():
    down = StoreUnavailable("redis does not answer")
    lone = ask(0.0)
    k = key(None, lone)
    assert admission.decide(k, down, now=0.0) == StoreDown((lone,), down, math.inf)
    assert not k.waiters


# -- keys at rest ----------------------------------------------------------------------------


def test_a_key_is_at_rest_only_when_it_holds_nothing_a_fresh_one_would_not():
    k = key()
    assert admission.at_rest(k, 0.0)
    admission.cooled(k, 2.0, admitted_at=0.0, now=0.0)
    assert not admission.at_rest(k, 1.0)
    # After the pause, a spread still to start would place admissions up to 0.5 s later.
    assert not admission.at_rest(k, 2.4)
    assert admission.at_rest(k, 2.5)
    k.pending = 1
    assert not admission.at_rest(k, 3.0)


def test_new_limits_keep_what_the_key_holds():
    k = key(RateLimitConfig(max_pending=4, adaptive=True))
    assert k.adaptive is not None
    k.adaptive.on_congestion(0.0, 1.0)
    k.pending, k.cooldown_end = 1, 9.0
    admission.relimit(k, RateLimitConfig(max_pending=4, adaptive=True, requests_per_minute=5))
    assert k.adaptive.current == 2  # the learned limit stays with the same cap
    assert (k.pending, k.cooldown_end) == (1, 9.0)
    assert [(s.dimension, s.limit) for s in k.specs] == [("requests", 5)]
    admission.relimit(k, RateLimitConfig(max_pending=8, adaptive=True))
    assert k.adaptive.current == 8  # a new cap starts afresh
