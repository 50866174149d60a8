"""The Supervisor's decisions, pure and synchronous: what a call does after a failed attempt,
and whether it waits or fails when a breaker or the retry budget blocks it."""

from __future__ import annotations

import math
import random

import sluice
from sluice import ChatRequest, RetryConfig
from sluice._retry_policy import Fail, Retry, Wait, after_failure, call_state, when_blocked

POLICY = RetryConfig(base_delay=0.5, max_delay=8.0, jitter=0.0, max_attempts=4)
RNG = random.Random(0)
BOOM = sluice.ServerError("boom", status=500)


def state(priority="interactive", attempts=1, **request):
    r = ChatRequest(model="sim:sim-small", messages="hi", priority=priority, **request)
    return call_state(r, POLICY, attempts, submitted_at=0.0, deadline=math.inf)


def test_failure_mode_defaults_follow_the_priority():
    assert not state().waits
    assert state("batch").waits and state("background").waits
    assert state("batch", failure_mode="fail_fast").waits is False
    assert state(failure_mode="wait").waits


def test_retry_backs_off_then_stops_at_the_attempt_limit():
    assert after_failure(state(attempts=1), BOOM, 0, 0.0, POLICY, RNG) == Retry(0.5)
    assert after_failure(state(attempts=3), BOOM, 0, 0.0, POLICY, RNG) == Retry(2.0)
    assert after_failure(state(attempts=4), BOOM, 0, 0.0, POLICY, RNG) == Fail(BOOM)


def test_a_waiting_call_has_no_attempt_limit_unless_configured():
    # Changed deliberately (issue 28): a waiting call used to inherit max_attempts when
    # wait_max_attempts was unset, so an outage longer than a few backoffs failed it.
    r = ChatRequest(model="sim:sim-small", messages="hi", priority="batch")
    assert call_state(r, RetryConfig(max_attempts=2), 1, 0.0, math.inf).max_attempts is None
    capped = RetryConfig(max_attempts=2, wait_max_attempts=10, jitter=0.0)
    assert call_state(r, capped, 1, 0.0, math.inf).max_attempts == 10
    interactive = ChatRequest(model="sim:sim-small", messages="hi")
    assert call_state(interactive, capped, 1, 0.0, math.inf).max_attempts == 2


def test_a_waiting_call_retries_at_the_capped_backoff_until_its_wait_deadline():
    s = state("batch", attempts=10_000, max_wait=600.0)
    assert s.max_attempts is None
    for error in (
        BOOM,
        sluice.ServerError("<html>502 Bad Gateway</html>", status=502),
        sluice.Overloaded("overloaded", status=529),
        sluice.RateLimited("slow down", status=429),
        sluice.ConnectionFailed("connection reset by peer"),
        sluice.StreamBroken("the stream ended mid-reply"),
        sluice.CallTimeout("no first token", timeout_kind="first_token"),
    ):
        assert after_failure(s, error, 0, 0.0, POLICY, RNG) == Retry(8.0), error
        assert after_failure(s, error, 2, 591.0, POLICY, RNG) == Retry(8.0)
        assert after_failure(s, error, 0, 592.0, POLICY, RNG) == Fail(error)  # 600 reached
    not_found = sluice.NotFound("no such model", status=404)
    assert after_failure(s, not_found, 0, 0.0, POLICY, RNG) == Fail(not_found)
    too_long = sluice.ContextTooLong("context too long", status=400)
    assert after_failure(s, too_long, 0, 0.0, POLICY, RNG) == Fail(too_long)
    capped = RetryConfig(jitter=0.0, wait_max_attempts=3)
    r = ChatRequest(model="sim:sim-small", messages="hi", priority="batch")
    assert after_failure(call_state(r, capped, 3, 0.0, math.inf), BOOM, 0, 0.0, capped, RNG) == (
        Fail(BOOM)
    )


def test_interactive_calls_keep_their_attempt_limit():
    assert after_failure(state(attempts=3), BOOM, 0, 0.0, POLICY, RNG) == Retry(2.0)
    assert after_failure(state(attempts=4), BOOM, 0, 0.0, POLICY, RNG) == Fail(BOOM)
    s = state(failure_mode="fail_fast", priority="batch", attempts=4)
    assert after_failure(s, BOOM, 0, 0.0, POLICY, RNG) == Fail(BOOM)


def test_fatal_errors_partial_output_and_total_timeouts_stop():
    bad = sluice.BadRequest("no", status=400)
    assert after_failure(state(), bad, 0, 0.0, POLICY, RNG) == Fail(bad)
    strict = state(on_partial="fail")
    assert after_failure(strict, BOOM, 3, 0.0, POLICY, RNG) == Fail(BOOM)
    total = sluice.CallTimeout("late", timeout_kind="total")
    assert after_failure(state(), total, 0, 0.0, POLICY, RNG) == Fail(total)


def test_a_long_provider_wait_fails_fast_calls_but_not_waiting_ones():
    limited = sluice.RateLimited("slow", status=429, retry_after=300.0)
    assert after_failure(state(), limited, 0, 0.0, POLICY, RNG) == Fail(limited)
    assert after_failure(state("batch"), limited, 0, 0.0, POLICY, RNG) == Retry(300.0)


def test_a_backoff_past_max_wait_fails_with_the_last_error():
    s = state("batch", max_wait=10.0)
    assert s.wait_until == 10.0
    assert after_failure(s, BOOM, 0, 9.0, POLICY, RNG) == Retry(0.5)
    assert after_failure(s, BOOM, 0, 9.6, POLICY, RNG) == Fail(BOOM)


def test_a_proxys_call_gives_back_every_failure_its_client_can_see_at_once():
    """``retry_visible=False`` (the gateway's calls): a 429, a 5xx, an overload, a timeout after
    the reply began go back at once, Retry-After included, whatever the attempt limit."""
    proxy = state(retry_visible=False)
    limited = sluice.RateLimited("slow down", status=429, retry_after=7.0)
    unavailable = sluice.ServerError("busy", status=503, retry_after=3.0)
    for error in (
        limited,
        unavailable,
        BOOM,
        sluice.Overloaded("overloaded", status=529),
        sluice.CallTimeout("slow", timeout_kind="first_token"),
        sluice.StreamBroken("cut"),
    ):
        assert after_failure(proxy, error, 0, 0.0, POLICY, RNG) == Fail(error)
    assert after_failure(state(), limited, 0, 0.0, POLICY, RNG) == Retry(7.0)  # the default


def test_a_proxys_call_retries_only_unseen_transport_failures_within_its_window():
    proxy = state(retry_visible=False)
    assert proxy.hidden_until == POLICY.hidden_retry_window == 1.0
    refused = sluice.ConnectionFailed("connection refused")
    connect = sluice.CallTimeout("no connection", timeout_kind="connect")
    assert after_failure(proxy, refused, 0, 0.0, POLICY, RNG) == Retry(0.5)
    assert after_failure(proxy, connect, 0, 0.0, POLICY, RNG) == Retry(0.5)
    # The next backoff (1 s) would end past the window: the failure goes back.
    later = state(retry_visible=False, attempts=2)
    assert after_failure(later, refused, 0, 0.3, POLICY, RNG) == Fail(refused)
    assert after_failure(proxy, refused, 0, 0.5, POLICY, RNG) == Fail(refused)
    # Output already delivered: the client saw it, nothing is hidden any more.
    assert after_failure(proxy, refused, 2, 0.0, POLICY, RNG) == Fail(refused)


def test_blocked_calls_fail_fast_or_wait_until_their_deadline():
    opened = sluice.CircuitOpen("open; last failure: HTTP 502: <html>", retry_after=7.0)
    assert when_blocked(state(), opened, 7.0, 0.0) == Fail(opened)
    assert when_blocked(state("batch"), opened, 7.0, 0.0) == Wait(7.0)
    s = state("batch", max_wait=5.0)
    assert when_blocked(s, opened, 7.0, 0.0) == Wait(5.0)  # looks again at its deadline
    assert when_blocked(s, opened, 7.0, 5.0) == Fail(opened)
    assert when_blocked(state("batch"), opened, math.inf, 0.0) == Fail(opened)


def test_the_backoff_of_any_attempt_is_capped_without_overflow():
    from sluice._backoff import retry_delay

    assert retry_delay(1, POLICY, RNG) == 0.5
    assert retry_delay(5, POLICY, RNG) == 8.0
    assert retry_delay(5_000, POLICY, RNG) == 8.0  # 2.0**4999 would overflow a float
