"""``sluice loadtest compare A.json B.json [C.json ...]``: the differences between results
files. Two files give a change and a verdict per number; more give a table of every run side by
side, each with its change against the first (the baseline) and the best run of each row
marked. Pure apart from :func:`load_results`.

A latency percentile or mean carries its 95 % confidence interval in the results; B is called
better or worse only when the two runs' intervals do not overlap (else ``within CI``: the runs
cannot tell the difference apart from their sampling noise). Numbers without an interval
(counts, rates) are called the same within 1 %. :func:`config_differences` names the settings
that differ between two runs, since numbers from different tests are not a comparison."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs
import orjson

from ..._errors import ConfigError
from .results import FORMAT

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

__all__ = [
    "Difference",
    "compare",
    "config_differences",
    "format_comparison",
    "format_config_differences",
    "format_many",
    "load_results",
]

# (label, path in the document, unit, lower is better)
_ROWS: tuple[tuple[str, tuple[str, ...], str, bool], ...] = (
    ("requests ok", ("aggregates", "requests", "ok"), "", False),
    ("requests failed", ("aggregates", "requests", "failed"), "", True),
    ("error rate", ("aggregates", "requests", "error_rate"), "%", True),
    ("TTFT p50", ("aggregates", "ttft_s", "p50"), "ms", True),
    ("TTFT p99", ("aggregates", "ttft_s", "p99"), "ms", True),
    ("TTST p50", ("aggregates", "ttst_s", "p50"), "ms", True),
    ("ITL p50", ("aggregates", "itl_s", "p50"), "ms", True),
    ("ITL p99", ("aggregates", "itl_s", "p99"), "ms", True),
    ("TPOT p50", ("aggregates", "tpot_s", "p50"), "ms", True),
    ("E2E p50", ("aggregates", "e2e_s", "p50"), "ms", True),
    ("E2E p95", ("aggregates", "e2e_s", "p95"), "ms", True),
    ("E2E p99", ("aggregates", "e2e_s", "p99"), "ms", True),
    ("queue wait p99", ("aggregates", "queue_wait_s", "p99"), "ms", True),
    ("requests/s", ("aggregates", "throughput", "requests_per_s"), "/s", False),
    ("output tokens/s", ("aggregates", "throughput", "output_tokens_per_s"), "/s", False),
    ("goodput requests/s", ("aggregates", "goodput", "requests_per_s"), "/s", False),
    ("sent requests/s", ("aggregates", "load", "offered_rate_per_s"), "/s", False),
    ("client lag p99", ("aggregates", "client_lag_s", "p99"), "ms", True),
    ("saturation rate", ("sweep", "saturation_rate"), "/s", False),
)


@attrs.frozen
class Difference:
    label: str
    a: float | None
    b: float | None
    unit: str
    lower_is_better: bool
    a_ci: tuple[float, float] | None = None
    """A's 95 % confidence interval of this number, when the results hold one."""
    b_ci: tuple[float, float] | None = None

    @property
    def overlap(self) -> bool | None:
        """Whether the two 95 % intervals overlap (None when either is missing)."""
        if self.a_ci is None or self.b_ci is None:
            return None
        return self.a_ci[0] <= self.b_ci[1] and self.b_ci[0] <= self.a_ci[1]

    @property
    def change(self) -> float | None:
        """Relative change from A to B (0.1 is +10 %), None when it cannot be told."""
        if self.a is None or self.b is None or self.a == 0:
            return None
        return (self.b - self.a) / abs(self.a)

    @property
    def verdict(self) -> str:
        """``better`` or ``worse`` for B against A; ``within CI`` when their 95 % intervals
        overlap; ``same`` when equal, or within 1 % for a number without an interval."""
        if self.a is None or self.b is None or self.a == self.b:
            return "same"
        overlap = self.overlap
        if overlap:
            return "within CI"
        change = self.change
        if overlap is None and change is not None and abs(change) < 0.01:
            return "same"
        return "better" if (self.b < self.a) == self.lower_is_better else "worse"


def load_results(path: Path) -> dict[str, Any]:
    """A results file.

    Raises:
        ConfigError: it cannot be read, is not JSON, or is not a sluice loadtest results file.
    """
    try:
        data = orjson.loads(path.read_bytes())
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    except orjson.JSONDecodeError as exc:
        raise ConfigError(f"{path} is not JSON: {exc}") from None
    if isinstance(data, dict) and data.get("format") == "sluice-loadtest/1":
        raise ConfigError(
            f"{path} was written by an older sluice (format sluice-loadtest/1, durations under "
            f"bare names like ttft); this one reads {FORMAT} (the same seconds, under names "
            "that say so: ttft_s): run the test again to compare it"
        )
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ConfigError(f"{path} is not a sluice loadtest results file ({FORMAT})")
    return data


def _get(document: dict[str, Any], path: tuple[str, ...]) -> float | None:
    value: Any = document
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _interval(document: dict[str, Any], path: tuple[str, ...]) -> tuple[float, float] | None:
    """The 95 % interval stored beside the number at ``path`` (``ci95`` of its summary)."""
    *summary, stat = path
    bounds = _get_any(document, (*summary, "ci95", stat))
    if (
        isinstance(bounds, list)
        and len(bounds) == 2
        and all(isinstance(v, int | float) for v in bounds)
    ):
        return float(bounds[0]), float(bounds[1])
    return None


def _get_any(document: dict[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = document
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def compare(a: dict[str, Any], b: dict[str, Any]) -> list[Difference]:
    """Every headline number of ``a`` and ``b`` side by side (rows both lack are left out),
    with their confidence intervals where the results hold them."""
    rows = []
    for label, path, unit, lower in _ROWS:
        va, vb = _get(a, path), _get(b, path)
        if va is None and vb is None:
            continue
        rows.append(Difference(label, va, vb, unit, lower, _interval(a, path), _interval(b, path)))
    return rows


_UNCOMPARED = frozenset({"wall_seconds", "wall_s"})
"""Config keys that describe how a run went, not what was asked: not a difference."""


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        flat: dict[str, Any] = {}
        for key, item in value.items():
            flat |= _flatten(item, f"{prefix}{key}.")
        return flat
    return {prefix.removesuffix("."): value}


def config_differences(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """The settings (``config`` keys, nested ones dotted: ``workload.output_tokens``) whose
    values differ between the runs ``a`` and ``b``, with both values; a key one run lacks
    shows as None on that side."""
    flat_a, flat_b = _flatten(a.get("config") or {}), _flatten(b.get("config") or {})
    keys = [k for k in flat_a if k not in _UNCOMPARED]
    keys += [k for k in flat_b if k not in flat_a and k not in _UNCOMPARED]
    return [(k, flat_a.get(k), flat_b.get(k)) for k in keys if flat_a.get(k) != flat_b.get(k)]


def format_config_differences(
    differences: Sequence[tuple[str, Any, Any]], name_a: str, name_b: str
) -> str:
    """A warning naming each differing setting, or an empty string when there is none."""
    if not differences:
        return ""
    shown = "; ".join(f"{key}: {a!r} in {name_a}, {b!r} in {name_b}" for key, a, b in differences)
    return (
        f"warning: {name_b} was not run with the same configuration as {name_a}, so a "
        f"difference may come from the test rather than the endpoint: {shown}"
    )


def _show(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "ms":
        return f"{value * 1000:.2f} ms"
    if unit == "%":
        return f"{value * 100:.2f} %"
    if unit == "/s":
        return f"{value:.2f}/s"
    return f"{value:g}"


def format_comparison(rows: Sequence[Difference], name_a: str, name_b: str) -> str:
    """A plain-text table: metric, A, B, change, verdict for B."""
    table = [("metric", name_a, name_b, "change", "B is")]
    for row in rows:
        change = row.change
        table.append(
            (
                row.label,
                _show(row.a, row.unit),
                _show(row.b, row.unit),
                "-" if change is None else f"{change * 100:+.1f} %",
                row.verdict,
            )
        )
    widths = [max(len(line[i]) for line in table) for i in range(5)]
    lines = [
        "  ".join(
            cell.ljust(widths[i]) if i == 0 else cell.rjust(widths[i])
            for i, cell in enumerate(line)
        ).rstrip()
        for line in table
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _overlaps_another(intervals: Sequence[tuple[float, float] | None], index: int) -> bool:
    """Whether run ``index``'s interval overlaps any other run's."""
    mine = intervals[index]
    if mine is None:
        return False
    return any(
        other is not None and mine[0] <= other[1] and other[0] <= mine[1]
        for number, other in enumerate(intervals)
        if number != index
    )


def format_many(documents: Sequence[dict[str, Any]], names: Sequence[str]) -> str:
    """A plain-text table of every headline number of every run: the first run's value, then
    each other run's with its change against the first; ``*`` marks the best run of a row,
    unless its 95 % interval overlaps another run's (then no run is told apart)."""
    table = [("metric", *names)]
    for label, path, unit, lower in _ROWS:
        values = [_get(document, path) for document in documents]
        known = [v for v in values if v is not None]
        if not known:
            continue
        best: float | None = min(known) if lower else max(known)
        intervals = [_interval(document, path) for document in documents]
        winner = values.index(best)
        if _overlaps_another(intervals, winner):
            best = None
        base = values[0]
        cells = []
        for index, value in enumerate(values):
            cell = _show(value, unit)
            if index and value is not None and base:
                cell += f" ({(value - base) / abs(base) * 100:+.1f} %)"
            if value == best and len(known) > 1 and min(known) != max(known):
                cell += " *"
            cells.append(cell)
        table.append((label, *cells))
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    lines = [
        "  ".join(
            cell.ljust(widths[i]) if i == 0 else cell.rjust(widths[i])
            for i, cell in enumerate(line)
        ).rstrip()
        for line in table
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
