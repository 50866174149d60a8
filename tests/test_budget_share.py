"""The pure rules of shared budgets through store faults (:mod:`sluice._limits.budget_share`).

Each :class:`BudgetShares` stands for one process. No clock is involved: the rules depend on
what the store last reported and what the process spent, never on how long an outage lasts.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from sluice._limits.budget_share import BudgetShares
from sluice._limits.store import BudgetAsk
from sluice._limits.store_epoch import history_lost

MAX = 10_000
GLOBAL = (("global", MAX, None),)


def ask(hold: str, micros: int, tokens: int = 0) -> BudgetAsk:
    return BudgetAsk(hold, micros, tokens, GLOBAL)


def test_a_process_spends_its_share_of_what_the_store_last_said_was_left():
    shares = BudgetShares(0.25)
    shares.go_local({"global": (4_000, 0, 0, 0)})  # 6,000 left: a share of 1,500
    assert [shares.fits_local(ask("x", 1_500)), shares.fits_local(ask("x", 1_501))] == [True, False]
    for n in range(3):
        assert shares.fits_local(ask(f"h{n}", 500))
        shares.admitted(ask(f"h{n}", 500), local=True)
    assert not shares.fits_local(ask("h3", 1))
    assert shares.settled("h0", 300, 0) is True  # 200 of its reservation comes back
    assert shares.fits_local(ask("h3", 200))
    assert not shares.fits_local(ask("h3", 201))


def test_what_others_hold_in_flight_is_not_left():
    shares = BudgetShares(0.5)
    shares.go_local({"global": (4_000, 0, 2_000, 0)})
    assert shares.fits_local(ask("a", 2_000))
    assert not shares.fits_local(ask("a", 2_001))


def test_an_account_the_store_never_reported_gets_a_share_of_its_whole_limit():
    shares = BudgetShares(0.25)
    shares.go_local({})
    assert shares.fits_local(ask("a", 2_500))
    assert not shares.fits_local(ask("a", 2_501))


def test_token_budgets_bind_on_tokens_only():
    shares = BudgetShares(0.25)
    accounts = (("tag:t", None, 1_000),)
    shares.go_local({"tag:t": (999_999, 200, 0, 0)})  # micros do not matter: no dollar limit
    assert shares.fits_local(BudgetAsk("a", 10**9, 200, accounts))
    assert not shares.fits_local(BudgetAsk("a", 0, 201, accounts))


def test_outage_spend_is_booked_once_and_counts_against_the_next_outage_until_it_arrived():
    shares = BudgetShares(0.25)
    shares.go_local({"global": (4_000, 0, 0, 0)})
    shares.admitted(ask("a", 1_000), local=True)
    shares.admitted(ask("b", 400), local=True)
    shares.settled("a", 700, 0)
    shares.back()
    assert shares.take_booking() == [("global", 700, 0)]
    assert shares.take_booking() == []  # taken once: a second round trip sends nothing new
    shares.settled("b", None, 0)  # no usage: charged its whole reservation
    # The store flaps before the booking is known to have arrived: the 700 sent, the 400
    # not sent yet, are both this process's spend the store may not know of.
    shares.go_local({"global": (4_000, 0, 0, 0)})
    left = MAX - 4_000 - 700 - 400
    assert shares.fits_local(ask("c", left // 4))
    assert not shares.fits_local(ask("c", left // 4 + 1))
    shares.back()
    assert shares.take_booking() == [("global", 400, 0)]
    shares.booked()
    assert shares.take_booking() == []


def test_attempts_admitted_by_the_store_are_booked_by_it_not_here():
    shares = BudgetShares(0.25)
    shares.admitted(ask("a", 1_000), local=False)
    assert shares.settled("a", 600, 0) is False
    assert shares.settled("a", 600, 0) is None  # settled once
    assert shares.take_booking() == []


def test_a_contribution_after_lost_history_counts_everything_once():
    shares = BudgetShares(0.25)
    shares.admitted(ask("a", 1_000), local=False)
    shares.settled("a", 600, 0)
    shares.go_local({"global": (5_000, 0, 1_000, 0)})
    shares.admitted(ask("b", 500), local=True)
    shares.admitted(ask("c", 300), local=True)
    shares.settled("b", 200, 0)
    shares.back()
    first = shares.contribution(1, {"global": (5_000, 0, 1_000, 0)})
    # floor: spent + reserved as last reported; own: 600 + 200 spent, 300 in flight.
    assert first == [("global", 6_000, 0, 1_100, 0)]
    assert shares.take_booking() == []  # the contribution carries the outage's spend
    shares.settled("c", 100, 0)  # counted at its worst case already: not booked again
    assert shares.take_booking() == []
    assert shares.contribution(1, {"global": (0, 0, 0, 0)}) == first  # sent again: the same
    # A second loss: everything this process ever spent, nothing in flight.
    assert shares.contribution(2, {}) == [("global", 0, 0, 900, 0)]


@given(
    left=st.integers(0, MAX),
    asks=st.lists(st.tuples(st.integers(0, 2), st.integers(1, 3_000)), max_size=60),
)
def test_n_processes_with_shares_summing_to_one_never_pass_what_was_left(left, asks):
    processes = [BudgetShares(1 / 3) for _ in range(3)]
    for shares in processes:
        shares.go_local({"global": (MAX - left, 0, 0, 0)})
    spent = 0
    for n, (who, micros) in enumerate(asks):
        if processes[who].fits_local(ask(f"h{n}", micros)):
            processes[who].admitted(ask(f"h{n}", micros), local=True)
            spent += micros
    assert spent <= left


def test_a_first_contact_is_no_lost_history():
    assert not history_lost("", "abc")
    assert not history_lost("abc", "abc")
    assert history_lost("abc", "def")


def test_own_spend_includes_what_the_process_ledger_held_from_before():
    shares = BudgetShares(0.25)
    job = (("job:j", MAX, None),)
    # The ledger held 3,000 for the job from an earlier run; this run spent 500 since.
    shares.admitted(BudgetAsk("a", 1_000, 0, job, ((3_000, 0),)), local=False)
    shares.settled("a", 500, 0)
    shares.admitted(BudgetAsk("b", 1_000, 0, job, ((3_500, 0),)), local=False)
    assert shares.contribution(1, {}) == [("job:j", 0, 0, 3_000 + 500 + 1_000, 0)]
