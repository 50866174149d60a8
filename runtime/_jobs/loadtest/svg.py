"""Small SVG charts as text: lines, scatter points and histogram bars on linear axes. Pure.

No JavaScript and nothing fetched: a chart is one ``<svg>`` element that any browser draws
offline. Axes get "nice" ticks (1, 2 or 5 times a power of ten).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

import attrs

__all__ = ["Series", "histogram", "nice_ticks", "xy_chart"]

PALETTE = ("#2563eb", "#dc2626", "#059669", "#d97706", "#7c3aed", "#0891b2")
_W, _H = 560, 260
_LEFT, _RIGHT, _TOP, _BOTTOM = 64, 16, 30, 44


@attrs.frozen
class Series:
    """``points`` as (x, y); drawn as a line, as dots, or both."""

    name: str
    points: Sequence[tuple[float, float]]
    color: str = PALETTE[0]
    line: bool = True
    dots: bool = False


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """About ``count`` round tick values, the first at or below ``low``, the last at or
    above ``high``."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return [0.0]
    if high <= low:
        high = low + (abs(low) or 1.0)
    raw = (high - low) / max(count, 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.floor(low / step) * step
    ticks = [round(first, 12)]
    while ticks[-1] < high - step * 1e-9:
        ticks.append(round(first + len(ticks) * step, 12))
    if len(ticks) < 2:
        ticks.append(round(first + step, 12))
    return ticks


def _label(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.4g}"


class _Axes:
    """Maps data to pixels for ticks ``xt`` and ``yt`` and draws the frame."""

    def __init__(self, xt: list[float], yt: list[float]) -> None:
        self.x0, self.x1 = xt[0], xt[-1]
        self.y0, self.y1 = yt[0], yt[-1]
        self.xt, self.yt = xt, yt

    def px(self, x: float) -> float:
        span = (self.x1 - self.x0) or 1.0
        return _LEFT + (x - self.x0) / span * (_W - _LEFT - _RIGHT)

    def py(self, y: float) -> float:
        span = (self.y1 - self.y0) or 1.0
        return _H - _BOTTOM - (y - self.y0) / span * (_H - _TOP - _BOTTOM)

    def frame(self, title: str, x_label: str, y_label: str) -> list[str]:
        out = [
            f'<text x="{_LEFT}" y="18" class="title">{escape(title)}</text>',
        ]
        for y in self.yt:
            p = self.py(y)
            out.append(
                f'<line x1="{_LEFT}" x2="{_W - _RIGHT}" y1="{p:.1f}" y2="{p:.1f}" class="grid"/>'
                f'<text x="{_LEFT - 6}" y="{p + 4:.1f}" class="tick" text-anchor="end">'
                f"{_label(y)}</text>"
            )
        for x in self.xt:
            p = self.px(x)
            out.append(
                f'<line x1="{p:.1f}" x2="{p:.1f}" y1="{_H - _BOTTOM}" y2="{_H - _BOTTOM + 4}" '
                f'class="axis"/><text x="{p:.1f}" y="{_H - _BOTTOM + 16}" class="tick" '
                f'text-anchor="middle">{_label(x)}</text>'
            )
        out.append(
            f'<line x1="{_LEFT}" x2="{_W - _RIGHT}" y1="{_H - _BOTTOM}" y2="{_H - _BOTTOM}" '
            f'class="axis"/><line x1="{_LEFT}" x2="{_LEFT}" y1="{_TOP}" y2="{_H - _BOTTOM}" '
            'class="axis"/>'
            f'<text x="{(_LEFT + _W - _RIGHT) / 2}" y="{_H - 8}" class="label" '
            f'text-anchor="middle">{escape(x_label)}</text>'
            f'<text transform="translate(14 {(_TOP + _H - _BOTTOM) / 2}) rotate(-90)" '
            f'class="label" text-anchor="middle">{escape(y_label)}</text>'
        )
        return out


def _svg(chart_id: str, body: list[str]) -> str:
    return (
        f'<svg id="{escape(chart_id)}" data-chart="{escape(chart_id)}" '
        f'xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {_W} {_H}" width="{_W}" '
        f'height="{_H}" role="img">' + "".join(body) + "</svg>"
    )


def _legend(series: Sequence[Series]) -> list[str]:
    out = []
    x = _W - _RIGHT
    for s in reversed(series):
        width = 14 + 7 * len(s.name)
        x -= width + 10
        out.append(
            f'<rect x="{x}" y="8" width="10" height="10" fill="{s.color}"/>'
            f'<text x="{x + 14}" y="17" class="tick">{escape(s.name)}</text>'
        )
    return out


def xy_chart(
    chart_id: str,
    title: str,
    series: Sequence[Series],
    *,
    x_label: str,
    y_label: str,
    y_from_zero: bool = True,
    extra: Sequence[str] = (),
) -> str:
    """Lines and/or dots for every series on shared axes; an empty chart says "no data"."""
    xs = [x for s in series for x, _ in s.points]
    ys = [y for s in series for _, y in s.points]
    if not xs:
        axes = _Axes([0.0, 1.0], [0.0, 1.0])
        body = axes.frame(title, x_label, y_label)
        body.append(
            f'<text x="{_W / 2}" y="{_H / 2}" class="label" text-anchor="middle">no data</text>'
        )
        return _svg(chart_id, body)
    axes = _Axes(nice_ticks(min(xs), max(xs)), nice_ticks(0.0 if y_from_zero else min(ys), max(ys)))
    body = axes.frame(title, x_label, y_label)
    body.extend(extra)
    for s in series:
        if s.line and len(s.points) > 1:
            path = " ".join(f"{axes.px(x):.1f},{axes.py(y):.1f}" for x, y in s.points)
            body.append(
                f'<polyline points="{path}" fill="none" stroke="{s.color}" stroke-width="1.8"/>'
            )
        if s.dots or len(s.points) == 1:
            body.extend(
                f'<circle cx="{axes.px(x):.1f}" cy="{axes.py(y):.1f}" r="1.8" '
                f'fill="{s.color}" fill-opacity="0.55"/>'
                for x, y in s.points
            )
    body.extend(_legend(series))
    return _svg(chart_id, body)


def histogram(
    chart_id: str,
    title: str,
    samples: Sequence[float],
    *,
    x_label: str,
    bins: int = 40,
    color: str = PALETTE[0],
    markers: Sequence[tuple[str, float]] = (),
) -> str:
    """Counts of ``samples`` in ``bins`` equal bins, with labelled vertical ``markers``
    (percentiles)."""
    if not samples:
        return xy_chart(chart_id, title, [], x_label=x_label, y_label="count")
    low, high = min(samples), max(samples)
    if high == low:
        high = low + (abs(low) or 1.0) * 0.01
    width = (high - low) / bins
    counts = [0] * bins
    for value in samples:
        counts[min(bins - 1, int((value - low) / width))] += 1
    axes = _Axes(nice_ticks(low, high), nice_ticks(0.0, max(counts)))
    body = axes.frame(title, x_label, "count")
    for i, count in enumerate(counts):
        if not count:
            continue
        x0, x1 = axes.px(low + i * width), axes.px(low + (i + 1) * width)
        y = axes.py(count)
        body.append(
            f'<rect x="{x0:.1f}" y="{y:.1f}" width="{max(x1 - x0 - 0.5, 0.5):.1f}" '
            f'height="{axes.py(0) - y:.1f}" fill="{color}" fill-opacity="0.8"/>'
        )
    for n, (name, value) in enumerate(markers):
        p = axes.px(value)
        # A label near the right edge goes on the marker's left, so it is not cut off.
        x, anchor = (p - 3, "end") if p > _W - _RIGHT - 90 else (p + 3, "start")
        body.append(
            f'<line x1="{p:.1f}" x2="{p:.1f}" y1="{_TOP}" y2="{_H - _BOTTOM}" class="marker"/>'
            f'<text x="{x:.1f}" y="{_TOP + 10 + 11 * n}" class="tick" text-anchor="{anchor}">'
            f"{escape(name)}</text>"
        )
    return _svg(chart_id, body)
