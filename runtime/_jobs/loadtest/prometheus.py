"""A server's Prometheus metrics during a load test: the text format parsed, scrapes taken on
an interval, and a summary per series for the results file. The parser is pure; only
:func:`scrape` and :func:`scrape_every` do I/O.

The parser reads the Prometheus text exposition format (0.0.4), which vLLM, TGI and sluice
serve: ``# HELP``/``# TYPE`` lines and comments are skipped, each sample line is a metric name,
optional ``{label="value",...}`` (with ``\\\\``, ``\\"`` and ``\\n`` escapes), a value (a float,
``NaN``, ``+Inf``, ``-Inf``) and an optional timestamp, which is ignored. Histogram buckets
(``_bucket``) are left out: their ``_sum`` and ``_count`` carry the mean and the rate, and the
buckets would multiply the size of the results by ten.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    import httpx

__all__ = ["ScrapeLog", "parse_prometheus", "scrape", "scrape_every", "summarize_scrapes"]

MAX_SERIES = 500
"""Series kept per scrape (the first in the server's order); the rest are counted."""


def _labels(text: str, start: int, where: str) -> tuple[str, int]:
    """The ``{...}`` block starting at ``text[start]`` in a canonical form, and the index
    after it."""
    parts: list[str] = []
    i = start + 1
    while True:
        while i < len(text) and text[i] in " ,":
            i += 1
        if i < len(text) and text[i] == "}":
            return ("{" + ",".join(parts) + "}" if parts else ""), i + 1
        eq = text.find("=", i)
        if eq < 0 or eq + 1 >= len(text) or text[eq + 1] != '"':
            raise ValueError(f'{where}: a label needs name="value"')
        name = text[i:eq].strip()
        j, value = eq + 2, []
        while True:
            if j >= len(text):
                raise ValueError(f"{where}: a label value is not closed")
            ch = text[j]
            if ch == "\\" and j + 1 < len(text):
                value.append({"n": "\n", "\\": "\\", '"': '"'}.get(text[j + 1], text[j + 1]))
                j += 2
            elif ch == '"':
                break
            else:
                value.append(ch)
                j += 1
        parts.append(f'{name}="{"".join(value)}"')
        i = j + 1


def parse_prometheus(text: str) -> dict[str, float]:
    """Every sample of ``text`` as ``{"name{labels}": value}`` (buckets left out).

    Raises:
        ValueError: a line that is not a sample, naming the line.
    """
    samples: dict[str, float] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        where = f"line {number}"
        end = 0
        while end < len(line) and (line[end].isalnum() or line[end] in "_:"):
            end += 1
        name = line[:end]
        if not name:
            raise ValueError(f"{where}: expected a metric name: {raw[:80]!r}")
        labels = ""
        if end < len(line) and line[end] == "{":
            labels, end = _labels(line, end, where)
        fields = line[end:].split()
        if not fields:
            raise ValueError(f"{where}: {name} has no value")
        try:
            value = float(fields[0])
        except ValueError:
            raise ValueError(f"{where}: {name} has value {fields[0]!r}, not a number") from None
        if name.endswith("_bucket"):
            continue
        samples[name + labels] = value
    return samples


async def scrape(client: httpx.AsyncClient, url: str) -> dict[str, float]:
    """One scrape of ``url``.

    Raises:
        ValueError: the server answered something else than the text format, or not 200.
        httpx.HTTPError: it could not be reached.
    """
    response = await client.get(url)
    if response.status_code != 200:
        raise ValueError(f"{url} answered {response.status_code}")
    return parse_prometheus(response.text)


@attrs.define
class ScrapeLog:
    """The scrapes of one run: ``(seconds since the first, samples)`` each, and failures."""

    url: str
    interval: float
    scrapes: list[tuple[float, dict[str, float]]] = attrs.Factory(list)
    failures: int = 0
    last_error: str | None = None
    dropped_series: int = 0


async def scrape_every(
    client: httpx.AsyncClient, log: ScrapeLog, *, task_status: Any = None
) -> None:
    """Scrape ``log.url`` every ``log.interval`` seconds into ``log`` until cancelled; a
    failed scrape is counted, not raised."""
    import httpx
    import trio

    start = trio.current_time()
    if task_status is not None:
        task_status.started()
    while True:
        at = trio.current_time()
        try:
            samples = await scrape(client, log.url)
        except (httpx.HTTPError, ValueError) as exc:
            log.failures += 1
            log.last_error = str(exc) or type(exc).__name__
        else:
            if len(samples) > MAX_SERIES:
                log.dropped_series = max(log.dropped_series, len(samples) - MAX_SERIES)
                samples = dict(list(samples.items())[:MAX_SERIES])
            log.scrapes.append((at - start, samples))
        await trio.sleep_until(at + log.interval)


def summarize_scrapes(log: ScrapeLog) -> dict[str, Any]:
    """The results file's ``server_metrics``: per series its first and last value, the
    change, the change per second (for counters: their rate), min and max; and every scrape
    as a time series."""
    series: dict[str, dict[str, Any]] = {}
    for at, samples in log.scrapes:
        for key, value in samples.items():
            entry = series.setdefault(key, {"first": value, "first_t": at, "values": []})
            entry["values"].append(value)
            entry["last"], entry["last_t"] = value, at
    summary = {}
    for key, entry in series.items():
        finite = [v for v in entry["values"] if math.isfinite(v)]
        span = entry["last_t"] - entry["first_t"]
        change = entry["last"] - entry["first"]
        summary[key] = {
            "first": entry["first"],
            "last": entry["last"],
            "change": change,
            "per_second": change / span if span > 0 and math.isfinite(change) else None,
            "min": min(finite) if finite else None,
            "max": max(finite) if finite else None,
        }
    return {
        "url": log.url,
        "interval_s": log.interval,
        "scrapes": len(log.scrapes),
        "failures": log.failures,
        "last_error": log.last_error,
        "dropped_series": log.dropped_series,
        "series": summary,
        "timeline": [{"t_s": at, "values": samples} for at, samples in log.scrapes],
    }
