"""The pure parts of the Redis quota store: its view of the shared cooldowns
(:class:`SharedCooling`) and its run id and history write-back (:class:`RunHistory`), held to
exact values without a Redis."""

from __future__ import annotations

from sluice._limits.redis_cooling import SharedCooling
from sluice._limits.redis_history import RunHistory


def test_the_view_reads_the_servers_times_on_this_processs_clock():
    view = SharedCooling(interval=0.5, caller_clock=False)
    # The server's clock is 1000 s ahead: its "until 1030" is 30 s from now (trio time 5).
    view.learn(["ok", "1000.0", 1, "x", "1030.0", "slow:y:m", "1010.0"], now=5.0)
    assert view.left("x", 5.0) == 30.0
    assert view.avoided_for("slow:y:m", 5.0) == 10.0
    assert view.left("y", 5.0) == 0.0 and view.avoided_for("x", 5.0) == 0.0


def test_a_read_forgets_what_is_over_and_keeps_a_later_end_known_here():
    view = SharedCooling(interval=0.5, caller_clock=True)
    view.note("x", 0.0, 0.0, 50.0)  # an admission's answer: x cools down until 50
    view.note("old", 0.0, 0.0, 2.0)
    view.learn(["ok", "10.0", 1, "x", "20.0"], now=10.0)
    assert view.cooldowns == {"x": 50.0}
    assert not view.forget("x", 10.0) and view.forget("x", 50.0)
    assert view.cooldowns == {}


def test_asking_wants_a_read_at_most_once_an_interval():
    view = SharedCooling(interval=0.5, caller_clock=True)
    assert view.want(0.0) and not view.want(0.1)  # wanted once until read
    view.reading(0.1)
    assert not view.want(0.5)  # due at 0.6
    assert view.want(0.6)


def test_avoiding_keeps_the_latest_end():
    view = SharedCooling(interval=0.5, caller_clock=True)
    view.avoid("slow:x:m", 30.0, now=0.0)
    view.avoid("slow:x:m", 5.0, now=10.0)
    assert view.avoided_for("slow:x:m", 10.0) == 20.0


def test_a_lost_history_drops_earlier_refs_and_tells_the_store_what_this_process_admitted():
    run = RunHistory()
    run.run_id = "r1"
    before = run.ref("7")
    assert before == "0.7" and run.live(before) == "7"
    run.history = lambda now: [
        ("k", "requests", 60.0, [(now - 10.0, 1, before), (now - 5.0, 2, "")])
    ]
    run.lost("r2", "", now=100.0)
    assert (run.run_id, run.generation, run.lost_at, run.seed_due) == ("r2", 1, 100.0, True)
    assert run.live(before) is None  # its id means another entry in the new store
    windows, carried = run.seed(100.0)
    assert windows == [["k", "requests", "60.0", [[10.0, 1, "7"], [5.0, 2, ""]]]]
    assert carried == {before}
    run.seeded(carried)
    assert not run.seed_due and run.live(before) == "7"  # told again under its own id
    assert run.live(run.ref("8")) == "8"


def test_a_lost_budget_account_bumps_the_generation_but_tells_no_windows():
    run = RunHistory()
    run.lost("r1", "budget:g", now=3.0)
    assert (run.generation, run.lost_at, run.seed_due) == (1, None, False)
