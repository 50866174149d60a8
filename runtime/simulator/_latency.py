"""The simulator's latency model: drawn times to first token and between tokens, and a
capacity that makes requests queue. Pure: no trio, no clock of its own.

With the config's latency fields at their defaults none of this runs and the simulator keeps
its fixed pacing. Otherwise each generation request draws its timing once, when it arrives:

* time to first token from a gamma distribution with mean ``ttft`` and standard deviation
  ``ttft_jitter`` (gamma because it is positive, skewed to the right like real TTFTs, and
  its mean and deviation are exactly the configured ones);
* for every gap between chunks, one time per token from a gamma distribution with mean
  ``1 / tokens_per_second`` and deviation ``itl_jitter``, times the tokens in the later
  chunk (a last, shorter chunk comes sooner);
* with a ``capacity``, the request holds one of ``capacity`` generation slots for its whole
  generation (TTFT plus every gap); a request that finds every slot taken waits for the
  earliest one to free up, first come first served. The server then completes at most
  ``capacity / mean generation time`` requests per second: its saturation rate.
"""

from __future__ import annotations

import heapq
import math
import random

import attrs

from ._text import derive_seed

__all__ = ["Generation", "GenerationSlots", "draw_generation", "gamma_draw", "request_rng"]


def request_rng(latency_seed: int, digest: bytes, occurrence: int = 0) -> random.Random:
    """The generator of one request's latency draws: seeded by the simulator's
    ``latency_seed``, the digest of the request's content and how many requests with the same
    content came before it (0 for the first), so the draws do not depend on other traffic."""
    return random.Random(derive_seed(latency_seed, digest, occurrence))


def gamma_draw(rng: random.Random, mean: float, std: float) -> float:
    """A draw with the given mean and standard deviation from a gamma distribution.

    ``std == 0`` (or ``mean == 0``) returns ``mean`` itself without touching ``rng``.
    """
    if not std or not mean:
        return mean
    shape = (mean / std) ** 2
    return rng.gammavariate(shape, std * std / mean)


@attrs.frozen
class Generation:
    """One request's drawn timing, in seconds on the server's clock."""

    start: float
    """When its generation begins: arrival, or later when it queued for a slot."""
    ttft: float
    """From ``start`` to the first chunk."""
    gaps: tuple[float, ...]
    """Between consecutive chunks (one fewer than the chunks)."""

    @property
    def first_chunk_at(self) -> float:
        return self.start + self.ttft

    def chunk_times(self) -> list[float]:
        """Absolute due time of every chunk, the first one included."""
        times = [self.first_chunk_at]
        for gap in self.gaps:
            times.append(times[-1] + gap)
        return times

    @property
    def end(self) -> float:
        return self.first_chunk_at + math.fsum(self.gaps)


class GenerationSlots:
    """``capacity`` generation slots as the times each frees up (a min-heap).

    :meth:`book` is first come first served because callers book in arrival order and a
    booking never moves an earlier one.
    """

    __slots__ = ("_free_at",)

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        self._free_at = [-math.inf] * capacity

    def book(self, now: float, duration: float) -> float:
        """Take the earliest free slot for ``duration`` seconds; return when it starts."""
        start = max(now, self._free_at[0])
        heapq.heapreplace(self._free_at, start + duration)
        return start


def draw_generation(
    rng: random.Random,
    *,
    now: float,
    chunks: int,
    tokens: int,
    tokens_per_chunk: int,
    ttft: float,
    ttft_jitter: float,
    token_interval: float,
    itl_jitter: float,
    slots: GenerationSlots | None,
) -> Generation:
    """The timing of one request of ``chunks`` chunks carrying ``tokens`` tokens (each
    ``tokens_per_chunk`` but the last), arriving at ``now``.

        ``token_interval`` is the mean time per token (0 sends every chunk at once, and then
        ``itl_jitter`` does not apply).
    """
    first = gamma_draw(rng, ttft, ttft_jitter)
    if token_interval:
        sizes = [tokens_per_chunk] * max(chunks - 1, 0)
        if sizes:
            sizes[-1] = max(1, min(tokens_per_chunk, tokens - tokens_per_chunk * (chunks - 1)))
        gaps = tuple(size * gamma_draw(rng, token_interval, itl_jitter) for size in sizes)
    else:
        gaps = (0.0,) * max(chunks - 1, 0)
    duration = first + math.fsum(gaps)
    start = now if slots is None else slots.book(now, duration)
    return Generation(start=start, ttft=first, gaps=gaps)
