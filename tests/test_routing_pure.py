"""The model-group router's decisions, synchronously and exactly (no tasks, no clock)."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from sluice import ChatRequest, Message, ModelGroup, RateLimitConfig, WindowLimit
from sluice._routing import MAX_AFFINITIES, GroupRouter, affinity_key, request_capacity

A, B, C = "a:m", "b:m", "c:m"


def router(strategy: str, *, rates=(1.0, 1.0, 1.0), seed: int = 0, **group: object) -> GroupRouter:
    g = ModelGroup(deployments=[A, B, C], strategy=strategy, **group)  # type: ignore[arg-type]
    return GroupRouter(g, [(r, 60.0, None) for r in rates], random.Random(seed))


def test_capacity_comes_from_the_tightest_request_window_else_the_weight():
    assert request_capacity(RateLimitConfig(requests_per_minute=120), 1.0) == (2.0, 60.0, 120)
    both = RateLimitConfig(
        requests_per_minute=600, windows=(WindowLimit(dimension="requests", limit=5, per=1),)
    )
    assert request_capacity(both, 1.0) == (5.0, 1.0, 5)
    tokens_only = RateLimitConfig(tokens_per_minute=1000)
    assert request_capacity(tokens_only, 3.0) == (3.0, 60.0, None)


def test_least_busy_keeps_in_flight_proportional_to_capacity():
    r = router("least-busy", rates=(1.0, 2.0, 5.0))
    for _ in range(80):
        i = r.choose(0.0)
        assert i is not None
        r.started(i, 0.0)
    assert r.in_flight == [10, 20, 50]


def test_least_busy_spreads_ties_evenly():
    r = router("least-busy", seed=3)
    counts = Counter(r.choose(0.0) for _ in range(3000))
    assert all(900 < counts[i] < 1100 for i in range(3))


def test_weighted_follows_the_weights():
    g = ModelGroup(
        deployments=[{"model": A, "weight": 1}, {"model": B, "weight": 3}], strategy="weighted"
    )
    r = GroupRouter(g, [(1.0, 60.0, None)] * 2, random.Random(1))
    counts = Counter(r.choose(0.0) for _ in range(4000))
    assert counts[1] / 4000 == pytest.approx(0.75, abs=0.03)


def test_lowest_latency_tries_each_once_then_prefers_the_fastest_and_explores():
    r = router("lowest-latency", exploration=0.1, seed=7)
    first = set()
    for _ in range(3):
        i = r.choose(0.0)
        assert i is not None
        first.add(i)
        r.started(i, 0.0)
        r.ended(i, {0: 0.05, 1: 0.2, 2: 0.8}[i])
    assert first == {0, 1, 2}  # untried deployments come first
    counts = Counter(r.choose(0.0) for _ in range(5000))
    assert counts[0] / 5000 == pytest.approx(0.9, abs=0.02)
    assert counts[1] > 0 and counts[2] > 0  # exploration keeps sampling the others


def test_lowest_latency_moves_when_the_fastest_slows_down():
    r = router("lowest-latency", exploration=0.0, latency_halflife=5)
    for i, ttft in enumerate((0.05, 0.2, 0.8)):
        r.started(i, 0.0)
        r.ended(i, ttft)
    assert r.choose(0.0) == 0
    for _ in range(20):  # deployment 0 now answers in a second
        r.started(0, 0.0)
        r.ended(0, 1.0)
    assert r.choose(0.0) == 1


def test_most_headroom_picks_the_largest_share_left_of_the_window():
    g = ModelGroup(deployments=[A, B], strategy="most-headroom")
    r = GroupRouter(g, [(1.0, 60.0, 60), (2.0, 60.0, 120)], random.Random(0))
    picks: Counter[int] = Counter()
    for t in range(90):
        i = r.choose(float(t) / 10)
        assert i is not None
        picks[i] += 1
        r.started(i, float(t) / 10)
        r.ended(i, None)
    assert picks == {0: 30, 1: 60}  # both a quarter used: shares stay equal
    # Sends older than the window stop counting.
    assert r.choose(100.0) in (0, 1)
    assert r._used(0, 100.0) == 0 and r._used(1, 100.0) == 0


def test_the_send_log_never_holds_more_than_the_window_limit():
    g = ModelGroup(deployments=[A], strategy="most-headroom")
    r = GroupRouter(g, [(1.0, 60.0, 60)], random.Random(0))
    for t in range(100_000):
        r.started(0, t * 0.001)
        r.ended(0, None)
    assert len(r._sent[0]) == 60


def test_cooling_excluded_and_blocked_deployments_are_passed_over():
    r = router("least-busy")
    r.cool(0, 10.0)
    assert {r.choose(5.0) for _ in range(50)} == {1, 2}
    assert r.choose(5.0, exclude={1}) == 2
    assert r.choose(5.0, exclude={1}, blocked=lambda i: i == 2) is None
    assert r.choose(10.0, exclude={1}, blocked=lambda i: i == 2) == 0  # the cooldown ended


def test_affinity_keeps_a_key_on_its_deployment_while_usable():
    r = router("least-busy", affinity="key")
    first = r.choose(0.0, affinity="conversation-1")
    assert first is not None
    for _ in range(10):
        r.started(first, 0.0)  # busier than the others: affinity still wins
    assert r.choose(0.0, affinity="conversation-1") == first
    r.cool(first, 5.0)
    moved = r.choose(1.0, affinity="conversation-1")
    assert moved not in (None, first)
    assert r.choose(6.0, affinity="conversation-1") == moved  # it stays where it moved


def test_the_affinity_map_is_bounded():
    r = router("weighted", affinity="key")
    for k in range(MAX_AFFINITIES + 50):
        r.choose(0.0, affinity=f"k{k}")
    assert len(r._affinity) == MAX_AFFINITIES
    assert "k0" not in r._affinity and f"k{MAX_AFFINITIES + 49}" in r._affinity


def test_affinity_keys_from_the_prompt_prefix_or_the_request():
    system = Message.system("You are a careful assistant. " * 60)
    one = ChatRequest(model="fast:x", messages=[system, Message.user("first question")])
    two = ChatRequest(model="fast:x", messages=[system, Message.user("another one")])
    other = ChatRequest(model="fast:x", messages=[Message.user("short")])
    assert affinity_key(one, "prefix") == affinity_key(two, "prefix")
    assert affinity_key(one, "prefix") != affinity_key(other, "prefix")
    keyed = ChatRequest(model="fast:x", messages="hi", affinity_key="user-42")
    assert affinity_key(keyed, "key") == "user-42"
    assert affinity_key(keyed, "none") is None


class _Marks:
    """A shared store's marks, as routing sees them (the Redis store's view, in memory)."""

    def __init__(self) -> None:
        self.avoiding: dict[str, float] = {}

    def cooling(self, key: str, now: float) -> float:
        return 0.0

    def avoid(self, name: str, seconds: float, now: float) -> None:
        self.avoiding[name] = max(self.avoiding.get(name, 0.0), now + seconds)

    def avoided(self, name: str, now: float) -> float:
        return max(0.0, self.avoiding.get(name, 0.0) - now)


def test_a_hedge_timeout_marks_its_deployment_slow_for_slow_for_and_tells_the_store():
    from sluice import CallTimeout
    from sluice._routing import Routing

    group = ModelGroup(deployments=[A, B, C], slow_for=30.0)
    routing = Routing({"g": group}, random.Random(0))
    routing.add("g", [RateLimitConfig()] * 3)
    marks = routing.shared = _Marks()
    request = ChatRequest(model="g", messages="hi")
    order = routing.order("g", request, 10.0)
    first = order[0]
    hedged = CallTimeout("no reply within the hedge time", timeout_kind="hedge")
    routing.moved("g", first, order[1], 12.0, hedged)
    router = routing.routers["g"]
    assert router.slow_until[router.index(first)] == 42.0
    assert marks.avoiding == {f"slow:{first}": 42.0}
    for now in (12.0, 30.0, 41.9):  # passed over while marked, last in every order
        assert routing.order("g", request, now)[-1] == first
    assert first in {routing.order("g", request, 42.0)[0] for _ in range(30)}
    # Other timeouts mark nothing: they are the first-token deadline, not the hedge.
    routing.moved("g", order[1], order[2], 50.0, CallTimeout("late", timeout_kind="first_token"))
    assert router.slow_until[router.index(order[1])] == -float("inf")
    stats = routing.statistics(12.0, lambda p, m: "closed")["g"]
    assert [s.slow_left for s in stats] == [30.0 if s.model == first else 0.0 for s in stats]
