"""A sweep over request rates that finds where the endpoint saturates.

Each point is a full open-loop run at one offered rate. A point is *saturated* when the
endpoint stops keeping up with it, judged from the run itself (:func:`~.saturation.judge`, pure):

* completions per second fall below ``min_ratio`` (95 %) of the requests the schedule
  actually sent per second of its window (the realized rate, so a Poisson draw that happened
  to send a few more or fewer does not decide). Completions are counted over the run's span
  less one typical request (the median end-to-end latency of the first third), since even a
  server that keeps up finishes the last request that long after the window; or
* latency grows during the run: the median end-to-end latency of the requests sent in the
  last third of the window is more than ``max_growth`` (1.5) times that of the middle third,
  the sign of a queue that only builds up (the first third is left out: a server that keeps
  up still fills its queue from empty there), or
* more than ``max_error_rate`` (5 %) of the requests fail.

With ``auto`` rates the sweep doubles the rate from ``start`` until a point saturates, then
bisects between the last good and the first saturated rate ``refine`` times. The saturation
rate reported is the highest rate that did not saturate.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from .arrivals import OpenLoop
from .run import LoadTest, RunResult, run_load
from .saturation import Verdict, judge

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from ..._runtime import Runtime
    from .endpoints import DirectTarget
    from .run import Interrupt, Progress

__all__ = [
    "SweepPlan",
    "SweepPoint",
    "SweepResult",
    "Verdict",
    "judge",
    "parse_sweep",
    "run_sweep",
]


@attrs.frozen
class SweepPlan:
    """Explicit ``rates``, or an automatic search from ``start`` (see the module docstring)."""

    rates: tuple[float, ...] = ()
    start: float = 1.0
    refine: int = 4
    max_points: int = 16

    @property
    def auto(self) -> bool:
        return not self.rates

    def describe(self) -> str:
        if self.auto:
            return f"auto from {self.start:g}/s, {self.refine} refinements"
        return ", ".join(f"{r:g}" for r in self.rates) + " /s"


def parse_sweep(text: str) -> SweepPlan:
    """``auto``, ``auto:START`` or a comma-separated list of rates.

    Raises:
        ValueError: another form, or a rate that is not above 0.
    """
    text = text.strip()
    forms = "--sweep takes 'auto', 'auto:START' or rates like 1,2,4,8 (all above 0)"
    try:
        if text == "auto" or text.startswith("auto:"):
            start = float(text[5:]) if text != "auto" else 1.0
            if not start > 0:
                raise ValueError
            return SweepPlan(start=start)
        rates = tuple(sorted(float(part) for part in text.split(",") if part.strip()))
    except ValueError:
        raise ValueError(f"{forms}, got {text!r}") from None
    if not rates or any(not r > 0 for r in rates):
        raise ValueError(f"{forms}, got {text!r}")
    return SweepPlan(rates=rates)


@attrs.frozen
class SweepPoint:
    rate: float
    verdict: Verdict
    run: RunResult = attrs.field(eq=False, repr=False)

    def summary(self) -> dict[str, Any]:
        agg = self.run.aggregates
        return {
            "rate": self.rate,
            "achieved_requests_per_s": self.verdict.achieved,
            "sent_requests_per_s": self.verdict.realized,
            "latency_growth": self.verdict.growth,
            "error_rate": self.verdict.error_rate,
            "saturated": self.verdict.saturated,
            "reason": self.verdict.reason,
            "ttft_p50_s": agg["ttft_s"]["p50"],
            "ttft_p99_s": agg["ttft_s"]["p99"],
            "itl_p50_s": agg["itl_s"]["p50"],
            "e2e_p50_s": agg["e2e_s"]["p50"],
            "e2e_p99_s": agg["e2e_s"]["p99"],
            "output_tokens_per_s": agg["throughput"]["output_tokens_per_s"],
            "client_lag_p99_s": agg["client_lag_s"]["p99"],
            "valid": agg["valid"],
        }


@attrs.frozen
class SweepResult:
    plan: SweepPlan
    points: tuple[SweepPoint, ...]
    """In the order they ran."""

    @property
    def saturation_rate(self) -> float | None:
        """The highest rate that did not saturate (None if even the lowest did)."""
        good = [p.rate for p in self.points if not p.verdict.saturated]
        return max(good) if good else None

    @property
    def best(self) -> SweepPoint:
        """The point at the saturation rate, else the lowest one."""
        rate = self.saturation_rate
        if rate is None:
            return min(self.points, key=lambda p: p.rate)
        return next(p for p in self.points if p.rate == rate)


async def run_sweep(
    rt: Runtime,
    template: LoadTest,
    plan: SweepPlan,
    *,
    burstiness: float = 1.0,
    on_point: Callable[[SweepPoint], None] | None = None,
    progress: Callable[[Progress], None] | None = None,
    interrupt: Interrupt | None = None,
    direct: DirectTarget | None = None,
    folder: Path | None = None,
) -> SweepResult:
    """Run the sweep; every point is ``template`` at its own rate (``template.duration`` is
    the window, so it must be set). ``folder``: where each point keeps its records
    (:func:`~.run.run_load`)."""
    if template.duration is None:
        raise ValueError("a sweep needs a duration for each point")
    window = template.duration
    points: list[SweepPoint] = []

    arrival = template.shape.arrival if isinstance(template.shape, OpenLoop) else None

    async def point(rate: float) -> SweepPoint:
        test = attrs.evolve(
            template,
            shape=OpenLoop.at_rate(rate, burstiness=burstiness, arrival=arrival),
            requests=None,
        )
        run = await run_load(
            rt, test, progress=progress, interrupt=interrupt, direct=direct, folder=folder
        )
        found = SweepPoint(rate, judge(run.records, window), run)
        points.append(found)
        if on_point is not None:
            on_point(found)
        return found

    def stopped() -> bool:
        return interrupt is not None and interrupt.state is not None

    if not plan.auto:
        for rate in plan.rates:
            if (await point(rate)).verdict.saturated or stopped():
                break
        return SweepResult(plan, tuple(points))
    good: float | None = None
    bad: float | None = None
    rate = plan.start
    while len(points) < plan.max_points and not stopped():
        if (await point(rate)).verdict.saturated:
            bad = rate
            break
        good, rate = rate, rate * 2
    if good is not None and bad is not None:
        for _ in range(plan.refine):
            if len(points) >= plan.max_points or stopped():
                break
            middle = (good + bad) / 2
            if (await point(middle)).verdict.saturated:
                bad = middle
            else:
                good = middle
    return SweepResult(plan, tuple(points))
