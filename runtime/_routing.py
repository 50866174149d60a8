"""Choosing a deployment of a model group for each attempt. Pure: no tasks, no clock reads.

A :class:`GroupRouter` holds what one model group's routing needs to remember (calls in flight
per deployment, a moving average of time to first token, recent sends, cooldowns, slow marks,
affinities)
and answers :meth:`GroupRouter.choose`. Its owner (the Supervisor task) tells it when attempts
start and end and passes the clock in, so every decision is tested synchronously and exactly.

Every log here is bounded: the send log of a deployment holds at most its window's limit of
entries (older ones are dropped as new ones arrive), the affinity map at most
:data:`MAX_AFFINITIES` keys.
"""

from __future__ import annotations

import hashlib
import math
from collections import OrderedDict, deque
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import random
    from collections.abc import Callable, Collection, Mapping, Sequence

    from ._config import ModelGroup, RateLimitConfig
    from ._errors import CallError
    from ._messages import ChatRequest
    from ._routing_stats import DeploymentStatistics

__all__ = [
    "MAX_AFFINITIES",
    "PREFIX_CHARS",
    "DeploymentStatistics",
    "GroupRouter",
    "Routing",
    "SharedMarks",
    "affinity_key",
    "breaker_mark",
    "request_capacity",
    "slow_mark",
]

MAX_AFFINITIES = 10_000
"""Affinity keys remembered per group, least recently used dropped first."""
PREFIX_CHARS = 1024
"""``affinity="prefix"``: calls whose prompts agree on this many first characters go together."""


def __getattr__(name: str) -> Any:
    # The statistics' snapshot loads with the first question (sluice._routing_stats).
    if name == "DeploymentStatistics":
        from ._routing_stats import DeploymentStatistics

        return DeploymentStatistics
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class SharedMarks(Protocol):
    """What several processes' routing share through a shared quota store (the Redis one),
    each answered from the store's local view: no round trip per call."""

    def cooling(self, key: str, now: float) -> float:
        """Seconds left of quota key ``key``'s cooldown (any process's 429)."""
        ...

    def avoid(self, name: str, seconds: float, now: float) -> None:
        """Have every process's routing pass ``name`` over for ``seconds`` (more than 0)."""
        ...

    def avoided(self, name: str, now: float) -> float:
        """Seconds ``name`` is still passed over."""
        ...


def slow_mark(model: str) -> str:
    """The shared name of deployment ``model`` (``provider:model``) marked slow."""
    return "slow:" + model


def breaker_mark(key: str) -> str:
    """The shared name of the breaker ``key`` (``provider:model`` or ``provider``) opened."""
    return "breaker:" + key


def request_capacity(limits: RateLimitConfig, weight: float) -> tuple[float, float, int | None]:
    """A deployment's capacity for routing: ``(requests per second, window seconds, window
    limit)`` from its tightest request window (the per-minute shorthand or a ``requests``
    window), else ``weight`` requests per second and no window."""
    best: tuple[float, float, int | None] = (weight, 60.0, None)
    for window in limits.window_limits():
        if window.dimension != "requests":
            continue
        rate = window.limit / window.per
        if best[2] is None or rate < best[0]:
            best = (rate, window.per, window.limit)
    return best


def affinity_key(request: ChatRequest, mode: str) -> str | None:
    """The key that keeps ``request`` with the calls it shares a deployment with, or None."""
    if mode == "key":
        return request.affinity_key
    if mode != "prefix":
        return None
    text = []
    size = 0
    for message in request.messages:
        piece = message.text
        text.append(piece)
        size += len(piece)
        if size >= PREFIX_CHARS:
            break
    joined = "\x00".join(text)[:PREFIX_CHARS]
    return hashlib.blake2b(joined.encode(), digest_size=12).hexdigest()


class GroupRouter:
    """The routing state of one model group (see the module docstring)."""

    __slots__ = (
        "_affinity",
        "_alpha",
        "_rate",
        "_rng",
        "_sent",
        "_window",
        "_window_limit",
        "cool_until",
        "group",
        "in_flight",
        "models",
        "picks",
        "slow_until",
        "ttft",
    )

    def __init__(
        self,
        group: ModelGroup,
        capacities: Sequence[tuple[float, float, int | None]],
        rng: random.Random,
    ) -> None:
        """``capacities`` has one :func:`request_capacity` per deployment, in order."""
        n = len(group.deployments)
        assert len(capacities) == n
        self.group = group
        self.models: tuple[str, ...] = tuple(d.model for d in group.deployments)
        self.in_flight = [0] * n
        self.picks = [0] * n
        self.ttft: list[float | None] = [None] * n
        self.cool_until = [-math.inf] * n
        self.slow_until = [-math.inf] * n
        self._rate = [c[0] for c in capacities]
        self._window = [c[1] for c in capacities]
        self._window_limit = [c[2] for c in capacities]
        self._sent: list[deque[float]] = [deque(maxlen=c[2] or 1) for c in capacities]
        self._alpha = 1.0 - 0.5 ** (1.0 / group.latency_halflife)
        self._rng = rng
        self._affinity: OrderedDict[str, int] = OrderedDict()

    def index(self, model: str) -> int:
        return self.models.index(model)

    def usable(self, now: float, blocked: Callable[[int], bool] | None = None) -> list[int]:
        """The deployments not cooling down, not marked slow and not ``blocked``, in the
        group's order."""
        cool, slow = self.cool_until, self.slow_until
        return [
            i
            for i in range(len(self.models))
            if now >= cool[i] and now >= slow[i] and not (blocked is not None and blocked(i))
        ]

    def choose(
        self,
        now: float,
        *,
        blocked: Callable[[int], bool] | None = None,
        exclude: Collection[int] = (),
        affinity: str | None = None,
        candidates: list[int] | None = None,
    ) -> int | None:
        """The deployment for the next attempt, or None when none is usable.

        Usable: not in ``exclude`` (the deployments this call already failed on), not cooling
        down after a 429, not marked slow (it missed the hedge time), and not ``blocked`` (its
        circuit breaker is open, or another process's 429 cools it down). With an
        ``affinity`` key, the deployment that key went to last, while it stays usable.
        """
        if candidates is None:
            candidates = [i for i in self.usable(now, blocked) if i not in exclude]
        if not candidates:
            return None
        if affinity is not None:
            known = self._affinity.get(affinity)
            if known is not None and known in candidates:
                self._affinity.move_to_end(affinity)
                return known
        chosen = self._pick(candidates, now)
        if affinity is not None:
            self._affinity[affinity] = chosen
            self._affinity.move_to_end(affinity)
            if len(self._affinity) > MAX_AFFINITIES:
                self._affinity.popitem(last=False)
        return chosen

    def _pick(self, candidates: list[int], now: float) -> int:
        if len(candidates) == 1:
            return candidates[0]
        strategy = self.group.strategy
        if strategy == "weighted":
            weights = [self.group.deployments[i].weight for i in candidates]
            return self._rng.choices(candidates, weights)[0]
        if strategy == "lowest-latency":
            return self._fastest(candidates)
        if strategy == "most-headroom":
            return self._roomiest(candidates, now)
        return self._least_busy(candidates)

    def _least_busy(self, candidates: list[int]) -> int:
        # Fewest in flight per unit of capacity counting the call being placed, so that a
        # saturated group keeps each deployment's queue proportional to what it can serve.
        best = candidates[0]
        best_score = (self.in_flight[best] + 1) / self._rate[best]
        ties = 1
        for i in candidates[1:]:
            score = (self.in_flight[i] + 1) / self._rate[i]
            if score < best_score:
                best, best_score, ties = i, score, 1
            elif score == best_score:
                ties += 1
                if self._rng.random() * ties < 1.0:  # uniform among equals
                    best = i
        return best

    def _fastest(self, candidates: list[int]) -> int:
        untried = [i for i in candidates if self.ttft[i] is None]
        if untried:
            return untried[self._rng.randrange(len(untried))]
        best = min(candidates, key=lambda i: self.ttft[i] or 0.0)
        if self._rng.random() < self.group.exploration:
            others = [i for i in candidates if i != best]
            return others[self._rng.randrange(len(others))]
        return best

    def _roomiest(self, candidates: list[int], now: float) -> int:
        def headroom(i: int) -> float:
            limit = self._window_limit[i]
            if limit is None:
                return 1.0 - self.in_flight[i] / (self._rate[i] * 60.0 + 1.0)
            return 1.0 - self._used(i, now) / limit

        return max(candidates, key=headroom)

    def _used(self, i: int, now: float) -> int:
        sent = self._sent[i]
        start = now - self._window[i]
        while sent and sent[0] <= start:
            sent.popleft()
        return len(sent)

    def started(self, i: int, now: float) -> None:
        """An attempt went to deployment ``i`` (call once per attempt, before it is admitted)."""
        self.in_flight[i] += 1
        self.picks[i] += 1
        if self._window_limit[i] is not None:
            self._sent[i].append(now)

    def ended(self, i: int, ttft: float | None) -> None:
        """The attempt on ``i`` ended; ``ttft`` is its time to first token, if it got one."""
        self.in_flight[i] -= 1
        if ttft is not None:
            old = self.ttft[i]
            self.ttft[i] = ttft if old is None else old + self._alpha * (ttft - old)

    def cool(self, i: int, until: float) -> None:
        """Deployment ``i`` answered 429: pass it over until ``until`` (trio time)."""
        if until > self.cool_until[i]:
            self.cool_until[i] = until

    def slow(self, i: int, until: float) -> None:
        """Deployment ``i`` missed the hedge time: pass it over until ``until`` (trio time)."""
        if until > self.slow_until[i]:
            self.slow_until[i] = until


class Routing:
    """The routers of one runtime's model groups, and the calls each has placed.

    The runtime asks :meth:`order` when it submits a call to a group (which counts the call on
    its first deployment); the Supervisor reports :meth:`moved` when a call fails over to another
    deployment and :meth:`finished` when it ends, so the counts of calls in flight stay exact
    on every exit path.
    """

    __slots__ = ("_cooldowns", "_rng", "groups", "routers", "shared")

    def __init__(self, groups: Mapping[str, ModelGroup], rng: random.Random) -> None:
        self.groups = groups
        self.routers: dict[str, GroupRouter] = {}
        self._cooldowns: dict[str, list[float]] = {}
        self._rng = rng
        self.shared: SharedMarks | None = None
        """A shared quota store: slow marks go to every process's routing through it (the
        runtime also reads its cooldowns and other processes' marks when it places a call)."""

    def add(self, name: str, limits: Sequence[RateLimitConfig]) -> GroupRouter:
        """The router of group ``name``, made from its deployments' rate limits (in order)."""
        group = self.groups[name]
        capacities = [
            request_capacity(limit, d.weight)
            for limit, d in zip(limits, group.deployments, strict=True)
        ]
        router = self.routers[name] = GroupRouter(group, capacities, self._rng)
        self._cooldowns[name] = [limit.default_cooldown for limit in limits]
        return router

    def order(
        self,
        name: str,
        request: ChatRequest,
        now: float,
        blocked: Callable[[int], bool] | None = None,
    ) -> tuple[str, ...]:
        """Every deployment of group ``name``, in the order the call should try them: the
        strategy's choice first, then the other usable ones in the group's order after it (each
        failover goes to the next, so failovers spread), then those unusable now (cooling down,
        marked slow, ``blocked``) so that a call that may wait still has somewhere to go. The
        first is counted as in flight. One strategy decision per call: this is on every call's
        path."""
        router = self.routers[name]
        key = (
            affinity_key(request, router.group.affinity)
            if router.group.affinity != "none"
            else None
        )
        usable = router.usable(now, blocked)
        chosen = router.choose(now, affinity=key, candidates=usable)
        n = len(router.models)
        if chosen is None:  # none usable: the first one's breaker or cooldown decides
            chosen = 0
        # The other usable ones from the choice on, so failovers spread; then the unusable.
        rest = [(chosen + k) % n for k in range(1, n)]
        order = [chosen, *(i for i in rest if i in usable), *(i for i in rest if i not in usable)]
        router.started(chosen, now)
        models = router.models
        return tuple(models[i] for i in order)

    def moved(self, name: str, left: str, to: str, now: float, error: CallError | None) -> None:
        """A call left deployment ``left`` (after ``error``) for ``to``."""
        self._ended(name, left, None, error, now)
        router = self.routers[name]
        router.started(router.index(to), now)

    def finished(
        self, name: str, model: str, ttft: float | None, error: CallError | None, now: float
    ) -> None:
        """A call of group ``name`` ended on ``model``; ``ttft`` if it got a first token."""
        self._ended(name, model, ttft, error, now)

    def statistics(
        self, now: float, breaker: Callable[[str, str], str]
    ) -> dict[str, tuple[DeploymentStatistics, ...]]:
        """Every used group's deployments; ``breaker(provider, model)`` gives breaker states."""
        from ._routing_stats import DeploymentStatistics  # loaded by the first question

        out: dict[str, tuple[DeploymentStatistics, ...]] = {}
        for name, router in self.routers.items():
            rows = []
            for i, model in enumerate(router.models):
                provider, _, bare = model.partition(":")
                rows.append(
                    DeploymentStatistics(
                        model=model,
                        in_flight=router.in_flight[i],
                        calls=router.picks[i],
                        ttft=router.ttft[i],
                        cooling_left=max(0.0, router.cool_until[i] - now),
                        slow_left=max(0.0, router.slow_until[i] - now),
                        breaker=breaker(provider, bare),
                    )
                )
            out[name] = tuple(rows)
        return out

    def _ended(
        self, name: str, model: str, ttft: float | None, error: CallError | None, now: float
    ) -> None:
        router = self.routers[name]
        i = router.index(model)
        router.ended(i, ttft)
        if error is None:
            return
        from ._errors import CallTimeout, RateLimited  # loaded by a failure

        if isinstance(error, RateLimited):
            wait = error.retry_after
            router.cool(i, now + (wait if wait is not None else self._cooldowns[name][i]))
        elif isinstance(error, CallTimeout) and error.timeout_kind == "hedge":
            router.slow(i, now + router.group.slow_for)
            if self.shared is not None:
                self.shared.avoid(slow_mark(model), router.group.slow_for, now)
