"""A circuit breaker per backend: stop sending to a backend that keeps failing.

Closed: calls flow. It opens when, over the last ``window`` seconds, at least ``min_failures``
attempts failed and failures make up at least ``failure_rate`` of the attempts STARTED in that
window. Counting against attempts started (not outcomes seen) matters under concurrency: fast
failures arrive before slow successes, so a streak of outcomes says little about the backend.
Open: calls fail fast, fall back or wait for ``open_for`` seconds. Half-open: one probe attempt
goes through; its success closes the breaker, its failure opens it again.

Admission is a :class:`Ticket` that always settles: :meth:`CircuitBreaker.admit` hands one out,
and leaving its ``with`` block without a verdict (a 429, a bad request, an empty reply, an
admission timeout, the consumer leaving, a cancellation, a crash) settles it as "no verdict",
which frees the probe slot. So no exit path can leave the breaker half-open with a probe that
never ends, refusing every call until the process restarts.

Only failures that say something about the backend count (server errors, overloads, timeouts,
broken connections); a bad request or a 429 does not (the caller decides which verdict to give).

Memory is bounded by ``window`` times the attempt rate: both logs are trimmed as they are
appended to, so each append does amortized constant work whatever happened before.

One breaker per model means one per name a caller chooses: :class:`Breakers` holds them and
forgets the idle ones (closed, no failure in the window, no ticket out) once there are many, so
a caller naming thousands of models cannot grow the map without bound (see :meth:`Breakers.get`).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Literal

from ._fifo import Fifo

if TYPE_CHECKING:
    from types import TracebackType

__all__ = ["IDLE_KEPT", "NO_TICKET", "Breakers", "CircuitBreaker", "Ticket"]

State = Literal["closed", "open", "half_open"]

_CAUSES_KEPT = 3
_CAUSE_CHARS = 300


class Ticket:
    """One admitted attempt; settle it once with :meth:`succeeded`, :meth:`failed` or by leaving
    its ``with`` block (no verdict). Settling twice is a no-op, so exits may overlap safely."""

    __slots__ = ("_breaker", "_epoch", "probe", "settled")

    def __init__(self, breaker: CircuitBreaker | None, epoch: int, probe: bool) -> None:
        self._breaker = breaker
        self._epoch = epoch
        self.probe = probe
        self.settled = breaker is None

    def succeeded(self, now: float) -> None:
        breaker = self._breaker
        if not self.settled and breaker is not None:
            self.settled = True
            breaker._settle(self, True, now, None)

    def failed(self, now: float, cause: str) -> None:
        """The backend failed this attempt; ``cause`` says how (kept for error messages)."""
        breaker = self._breaker
        if not self.settled and breaker is not None:
            self.settled = True
            breaker._settle(self, False, now, cause)

    def release(self) -> None:
        """The attempt ended without a verdict on the backend: only frees the probe slot."""
        breaker = self._breaker
        if not self.settled and breaker is not None:
            self.settled = True
            breaker._settle(self, None, 0.0, None)

    def __enter__(self) -> Ticket:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


class CircuitBreaker:
    __slots__ = (
        "_causes",
        "_epoch",
        "_failures",
        "_opened_at",
        "_out",
        "_probing",
        "_started",
        "failure_rate",
        "min_failures",
        "open_for",
        "window",
    )

    def __init__(
        self,
        *,
        min_failures: int = 5,
        failure_rate: float = 0.5,
        window: float = 30.0,
        open_for: float = 10.0,
    ) -> None:
        self.min_failures = min_failures
        self.failure_rate = failure_rate
        self.window = window
        self.open_for = open_for
        # Small while closed and idle (one breaker per model a caller names): lists, and the
        # causes only once a failure has one.
        self._started: Fifo[float] = Fifo()
        self._failures: Fifo[float] = Fifo()
        self._causes: deque[str] | None = None
        self._opened_at = -math.inf
        self._probing = False
        self._out = 0
        """Tickets handed out and not yet settled (the probe's included)."""
        self._epoch = 0
        """Changes whenever the breaker opens or closes, so that verdicts of attempts admitted
        in an earlier state are ignored."""

    def state(self, now: float) -> State:
        if self._opened_at == -math.inf:
            return "closed"
        if now < self._opened_at + self.open_for:  # the same sum as retry_in: no rounding gap
            return "open"
        return "half_open"

    def admit(self, now: float) -> Ticket | None:
        """A ticket for an attempt starting now, or None when the breaker refuses it. In the
        half-open state only the first asker (the probe) gets one until the probe settles."""
        state = self.state(now)
        if state == "closed":
            started = self._started
            started.append(now)
            horizon = now - self.window
            while started.at(0) <= horizon:
                started.popleft()
            self._out += 1
            return Ticket(self, self._epoch, probe=False)
        if state == "open" or self._probing:
            return None
        self._probing = True
        self._out += 1
        return Ticket(self, self._epoch, probe=True)

    def retry_in(self, now: float) -> float:
        """Seconds until the breaker lets a probe through (0 when it is not open)."""
        if self.state(now) != "open":
            return 0.0
        return self._opened_at + self.open_for - now

    def probing(self) -> bool:
        """Whether a probe is out now (then others wait for its verdict)."""
        return self._probing

    def causes(self) -> tuple[str, ...]:
        """The last failures recorded (oldest first): what opened or keeps it open."""
        return tuple(self._causes) if self._causes is not None else ()

    def idle(self, now: float) -> bool:
        """Whether forgetting this breaker changes no decision that matters: it is closed, no
        failure is left in its window and no ticket (probe or not) is out.

        A breaker made afresh in its place starts closed with empty logs. What is lost is the
        count of attempts started in the window, which only ever weighs against failures; a
        fresh breaker still needs ``min_failures`` failures to open. A breaker that is open or
        half-open, or has a failure in its window, or has a ticket out (whose verdict must
        reach it) is never idle.
        """
        if self._out or self._opened_at != -math.inf:
            return False
        failures = self._failures
        return not failures or failures.last() <= now - self.window

    def sizes(self) -> tuple[int, int]:
        """Lengths of the internal logs (attempts started, failures): for memory tests."""
        return len(self._started), len(self._failures)

    def _settle(self, ticket: Ticket, ok: bool | None, now: float, cause: str | None) -> None:
        self._out -= 1
        if ticket.probe:
            self._probing = False
            if ok is None:
                return  # no verdict: the next asker probes
            if ok:
                self._close()
            else:
                self._remember(cause)
                self._open(now)
            return
        if ok is None or ok or ticket._epoch != self._epoch or self._opened_at != -math.inf:
            return  # no verdict, a success, or an attempt admitted before the breaker opened
        self._remember(cause)
        failures = self._failures
        failures.append(now)
        horizon = now - self.window
        while failures.at(0) <= horizon:
            failures.popleft()
        started = self._started
        while started and started.at(0) <= horizon:
            started.popleft()
        count = len(failures)
        if count >= self.min_failures and count >= self.failure_rate * len(started):
            self._open(now)

    def _remember(self, cause: str | None) -> None:
        if cause:
            if self._causes is None:
                self._causes = deque(maxlen=_CAUSES_KEPT)
            self._causes.append(cause[:_CAUSE_CHARS])

    def _open(self, now: float) -> None:
        self._opened_at = now
        self._epoch += 1

    def _close(self) -> None:
        self._opened_at = -math.inf
        self._epoch += 1
        self._started.clear()
        self._failures.clear()
        self._causes = None


NO_TICKET = Ticket(None, 0, probe=False)
"""The ticket of an attempt to a backend without a breaker: already settled, so a no-op."""

IDLE_KEPT = 256
"""Breakers a :class:`Breakers` holds before it first looks for idle ones to forget."""


class Breakers(Mapping[str, CircuitBreaker]):
    """Breakers by key (``provider:model`` or ``provider``), idle ones forgotten when many.

    Bound: the map never holds more than ``max(kept, 2 * busy)`` breakers, where ``busy`` is
    the number that were not :meth:`CircuitBreaker.idle` at the last sweep. A sweep runs when a
    new breaker would pass that size: it drops every idle breaker and sets the next size to
    sweep at, so its cost is amortized constant per breaker made. While fewer than ``kept``
    keys are in use nothing is ever dropped, so a service with a fixed set of models keeps
    every breaker's full history.

    A caller holding a breaker must hold one of its tickets (or look it up again after any
    wait): a breaker with no ticket out may be dropped, and what is recorded on a dropped
    breaker is lost.
    """

    __slots__ = ("_by_key", "_sweep_at", "kept")

    def __init__(self, kept: int = IDLE_KEPT) -> None:
        if kept < 1:
            raise ValueError("kept must be at least 1")
        self.kept = kept
        self._by_key: dict[str, CircuitBreaker] = {}
        self._sweep_at = kept

    def find(self, key: str) -> CircuitBreaker | None:
        """The breaker for ``key``, or None when there is none (never made, or forgotten)."""
        return self._by_key.get(key)

    def add(self, key: str, breaker: CircuitBreaker, now: float) -> CircuitBreaker:
        """Hold ``breaker`` for ``key`` (which has none), after a sweep of the idle ones when
        the map is at its size to sweep at; returns ``breaker``."""
        by_key = self._by_key
        if len(by_key) >= self._sweep_at:
            self.sweep(now)
        by_key[key] = breaker
        return breaker

    def get_or_make(
        self, key: str, make: Callable[[], CircuitBreaker], now: float
    ) -> CircuitBreaker:
        """The breaker for ``key``, made with ``make()`` (and added) if there is none."""
        found = self._by_key.get(key)
        return found if found is not None else self.add(key, make(), now)

    def sweep(self, now: float) -> int:
        """Forget every idle breaker; return how many were forgotten."""
        by_key = self._by_key
        idle = [key for key, breaker in by_key.items() if breaker.idle(now)]
        for key in idle:
            del by_key[key]
        self._sweep_at = max(self.kept, 2 * len(by_key))
        return len(idle)

    def __getitem__(self, key: str) -> CircuitBreaker:
        return self._by_key[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_key)

    def __len__(self) -> int:
        return len(self._by_key)
