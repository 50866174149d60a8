"""The circuit breaker and the retry budget, pure: tickets settle on every exit, the breaker
always recovers, and both logs stay within window x rate."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sluice
from sluice._breaker import NO_TICKET, Breakers, CircuitBreaker, Ticket
from sluice._retry_budget import RetryBudget
from sluice._retry_policy import blames_backend, describe


def opened(now: float = 0.0) -> CircuitBreaker:
    """A breaker that opened at ``now`` after five server errors."""
    breaker = CircuitBreaker(min_failures=5, failure_rate=0.5, window=30.0, open_for=10.0)
    for _ in range(5):
        ticket = breaker.admit(now)
        assert ticket is not None
        ticket.failed(now, "HTTP 502: <html><head><title>502 Bad Gateway")
    assert breaker.state(now) == "open"
    return breaker


def test_opens_on_failures_refuses_then_lets_one_probe_through():
    breaker = opened()
    assert breaker.admit(5.0) is None
    assert breaker.retry_in(5.0) == 5.0
    probe = breaker.admit(10.0)
    assert probe is not None and probe.probe
    assert breaker.admit(10.0) is None  # one probe at a time
    probe.succeeded(11.0)
    assert breaker.state(11.0) == "closed"
    assert breaker.admit(11.0) is not None


def test_a_failed_probe_opens_it_again():
    breaker = opened()
    probe = breaker.admit(10.0)
    assert probe is not None
    probe.failed(12.0, "HTTP 500: boom")
    assert breaker.state(12.0) == "open" and breaker.retry_in(12.0) == 10.0
    assert breaker.causes()[-1] == "HTTP 500: boom"


@pytest.mark.parametrize(
    "exit_path",
    ["429", "bad_request", "empty_reply", "admission_timeout", "consumer_gone", "cancelled"],
)
def test_a_probe_without_a_verdict_frees_the_slot_for_the_next_call(exit_path):
    breaker = opened()
    probe = breaker.admit(10.0)
    assert probe is not None
    if exit_path == "cancelled":
        with pytest.raises(KeyboardInterrupt), probe:
            raise KeyboardInterrupt  # any exception leaving the block
    else:
        # 429, 400 and empty replies say nothing about health; the other paths never got one
        with probe:
            pass
    assert breaker.state(10.5) == "half_open"
    again = breaker.admit(10.5)
    assert again is not None and again.probe  # the next call probes
    again.succeeded(11.0)
    assert breaker.state(11.0) == "closed"


def test_settling_twice_counts_once():
    breaker = CircuitBreaker(min_failures=2, window=30.0, open_for=10.0)
    ticket = breaker.admit(0.0)
    assert ticket is not None
    with ticket:
        ticket.failed(0.0, "HTTP 500")
        ticket.failed(0.0, "HTTP 500")
    assert breaker.state(0.0) == "closed"  # one failure, not two


def test_verdicts_of_attempts_admitted_before_it_opened_are_ignored():
    breaker = CircuitBreaker(min_failures=1, window=30.0, open_for=10.0)
    early = breaker.admit(0.0)
    first = breaker.admit(0.0)
    assert early is not None and first is not None
    first.failed(1.0, "HTTP 500")
    assert breaker.state(1.0) == "open"
    probe = breaker.admit(11.0)
    assert probe is not None
    early.failed(11.5, "HTTP 500")  # from before it opened: ignored
    probe.succeeded(12.0)
    assert breaker.state(12.0) == "closed"


def test_no_ticket_is_a_settled_noop():
    with NO_TICKET:
        NO_TICKET.failed(0.0, "x")
        NO_TICKET.succeeded(0.0)
    assert NO_TICKET.settled


def test_causes_name_status_type_and_the_start_of_the_body():
    html = "<html><head><title>502 Bad Gateway</title></head>" + "x" * 500
    error = sluice.ServerError(html, status=502)
    assert describe(error) == f"HTTP 502: {html[:200]}"
    refused = sluice.ConnectionFailed("connection refused")
    assert describe(refused) == "ConnectionFailed: connection refused"
    limited = sluice.RateLimited("slow down", status=429, error_type="rate_limit_exceeded")
    assert describe(limited) == "HTTP 429 rate_limit_exceeded: slow down"


# Every way an attempt can end, as the Supervisor settles its ticket (see _CallRun._go):
# a verdict for outcomes that say something about the backend, none for the others.
OUTCOMES = {
    "success": None,
    "5xx": sluice.ServerError("boom", status=500),
    "529": sluice.Overloaded("busy", status=529),
    "timeout": sluice.CallTimeout("slow", timeout_kind="first_token"),
    "broken": sluice.StreamBroken("cut"),
    "429": sluice.RateLimited("slow down", status=429),
    "4xx": sluice.BadRequest("bad", status=400),
    "empty": sluice.EmptyResponse("nothing"),
    "consumer_gone": None,
    "cancelled": None,
    "provider_crash": None,
    "admission_timeout": None,
}


def settle(ticket, outcome: str, now: float) -> None:
    """Settle ``ticket`` the way the Supervisor does for ``outcome``."""
    if outcome == "cancelled":
        try:
            with ticket:
                raise KeyboardInterrupt
        except KeyboardInterrupt:
            return
    with ticket:
        error = OUTCOMES[outcome]
        if outcome == "success":
            ticket.succeeded(now)
        elif error is not None and blames_backend(error):
            ticket.failed(now, describe(error))


step = st.tuples(
    st.sampled_from(["admit", "settle"]),
    st.sampled_from(sorted(OUTCOMES)),
    st.floats(min_value=0.0, max_value=15.0),
    st.integers(min_value=0, max_value=50),
)


@settings(max_examples=300)
@given(st.lists(step, max_size=80), st.integers(min_value=1, max_value=5))
def test_the_breaker_can_always_admit_again(steps, min_failures):
    """Whatever the sequence of admissions and outcomes, once the attempts in flight have
    ended and ``open_for`` has passed, a call is admitted, and a successful one closes it."""
    breaker = CircuitBreaker(min_failures=min_failures, window=30.0, open_for=10.0)
    now = 0.0
    out = []
    for action, outcome, dt, pick in steps:
        now += dt
        if action == "admit":
            ticket = breaker.admit(now)
            if ticket is not None:
                out.append(ticket)
        elif out:
            settle(out.pop(pick % len(out)), outcome, now)
        # the probe slot is taken only while a probe is really out: nothing can strand it
        assert breaker.probing() == any(t.probe for t in out)
    for ticket in out:
        settle(ticket, "consumer_gone", now)
    now += breaker.open_for
    ticket = breaker.admit(now)
    assert ticket is not None
    ticket.succeeded(now)
    assert breaker.state(now) == "closed"


def test_logs_stay_within_window_times_rate_over_100000_calls():
    """100,000 successful calls at 125/s: both logs hold at most window x rate entries, with
    no read (statistics) ever trimming them (``sizes()`` only reads), and they do fill up to
    it (a log that kept nothing would pass the bound, too)."""
    breaker = CircuitBreaker(window=30.0)
    budget = RetryBudget(0.2, 1.0, interval=10.0)
    rate = 125.0
    started = firsts = 0
    for i in range(100_000):
        now = i / rate
        budget.first_attempt(now)
        ticket = breaker.admit(now)
        assert ticket is not None
        ticket.succeeded(now)
        started = max(started, breaker.sizes()[0])
        firsts = max(firsts, budget.sizes()[0])
    # (+1: the entry exactly one window old, which float rounding may keep)
    assert breaker.window * rate <= started <= breaker.window * rate + 1
    assert budget.interval * rate <= firsts <= budget.interval * rate + 1


def test_budget_frees_a_retry_when_the_oldest_leaves_the_interval():
    budget = RetryBudget(0.0, 0.2, interval=10.0)  # two retries per 10 s
    assert budget.try_retry(0.0) and budget.try_retry(1.0)
    assert not budget.try_retry(2.0)
    assert budget.free_in(2.0) == 8.0
    assert budget.try_retry(10.5)
    assert budget.free_in(10.5) == 0.5
    empty = RetryBudget(0.0, 0.0, interval=5.0)
    assert empty.free_in(0.0) == 5.0


# ---- idle breakers are forgotten, busy ones never ----------------------------------------


def fresh() -> CircuitBreaker:
    return CircuitBreaker(min_failures=5, failure_rate=0.5, window=30.0, open_for=10.0)


def test_a_closed_breaker_with_no_failure_in_its_window_and_no_ticket_out_is_idle():
    breaker = fresh()
    assert breaker.idle(0.0)
    ticket = breaker.admit(1.0)
    assert ticket is not None
    assert not breaker.idle(1.0)  # its verdict must reach this breaker
    ticket.succeeded(2.0)
    assert breaker.idle(2.0)
    ticket = breaker.admit(3.0)
    assert ticket is not None
    ticket.failed(4.0, "HTTP 500")
    assert not breaker.idle(4.0)
    assert not breaker.idle(33.999)  # the failure is in the window
    assert breaker.idle(34.0)  # it left it, as the breaker's own trimming counts


def test_an_open_or_half_open_breaker_or_one_with_a_probe_out_is_never_idle():
    breaker = opened()
    assert not breaker.idle(5.0)
    assert not breaker.idle(1000.0)  # half-open, however long ago it opened
    probe = breaker.admit(1000.0)
    assert probe is not None and probe.probe
    assert not breaker.idle(1000.0)
    probe.release()  # no verdict: still half-open
    assert not breaker.idle(2000.0)
    probe = breaker.admit(2000.0)
    assert probe is not None
    probe.succeeded(2001.0)
    assert breaker.idle(2001.0)  # closed again, its logs cleared


def test_a_ticket_released_without_a_verdict_still_counts_as_settled():
    breaker = fresh()
    tickets = [breaker.admit(0.0) for _ in range(3)]
    for t in tickets:
        assert t is not None
        with t:
            pass
    assert breaker.idle(0.0)


def make_breaker() -> CircuitBreaker:
    return fresh()


def test_breakers_forget_idle_ones_only_past_the_size_kept():
    book = Breakers(kept=4)
    made = [book.get_or_make(f"sim:m-{i}", make_breaker, 0.0) for i in range(4)]
    assert len(book) == 4
    assert book.get_or_make("sim:m-0", make_breaker, 0.0) is made[0]  # found, not made
    book.get_or_make("sim:m-4", make_breaker, 1.0)  # the fifth: a sweep first
    assert list(book) == ["sim:m-4"]


def test_breakers_keep_every_busy_breaker_and_stay_within_twice_the_busy_ones():
    book = Breakers(kept=4)
    busy = []
    for i in range(3):
        breaker = book.get_or_make(f"sim:busy-{i}", make_breaker, 0.0)
        ticket = breaker.admit(0.0)
        assert ticket is not None
        busy.append(ticket)
    failing = book.get_or_make("sim:failing", make_breaker, 0.0)
    ticket = failing.admit(0.0)
    assert ticket is not None
    ticket.failed(0.0, "HTTP 503")
    opened_breaker = opened()
    book._by_key["sim:open"] = opened_breaker  # an open breaker (made by hand, as a tenant)
    high = 0
    for i in range(100_000):  # a hundred thousand model names
        book.get_or_make(f"sim:m-{i}", make_breaker, 1.0 + i * 0.0001)
        high = max(high, len(book))
    # 5 busy breakers (3 with a ticket out, 1 with a failure in its window, 1 open): the map
    # never held more than max(kept, 2 * 5) breakers, and every busy one is the same object.
    assert high == 10
    for i, ticket in enumerate(busy):
        assert book[f"sim:busy-{i}"] is ticket._breaker
    assert book["sim:failing"] is failing
    assert book["sim:open"] is opened_breaker
    for ticket in busy:
        ticket.succeeded(20.0)
    book.sweep(40.0)  # the failure left its window at 30; the open breaker never goes
    assert set(book) == {"sim:open"}


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 30), st.sampled_from(["admit", "ok", "fail", "none"])),
        max_size=200,
    )
)
def test_breakers_never_forget_a_breaker_that_is_not_idle(steps):
    """Random traffic over 31 names, time moving on: whatever is swept was idle, and a
    breaker with a ticket out is always the one in the map."""
    book = Breakers(kept=2)
    out: list[tuple[str, Ticket]] = []
    now = 0.0
    for name, action in steps:
        now += 0.7
        key = f"sim:m-{name}"
        if action == "admit":
            ticket = book.get_or_make(key, make_breaker, now).admit(now)
            if ticket is not None:
                out.append((key, ticket))
        elif out:
            key, ticket = out.pop(0)
            if action == "ok":
                ticket.succeeded(now)
            elif action == "fail":
                ticket.failed(now, "HTTP 500")
            else:
                ticket.release()
        for key, ticket in out:
            assert book[key] is ticket._breaker
        before = dict(book)
        book.sweep(now)
        for key, breaker in before.items():
            if key not in book:
                assert breaker.idle(now)
