"""The results file: one JSON document with the config, the versions, the aggregates, every
request's record and the sweep, when there was one. Pure apart from :func:`write_results`.

Durations are seconds, and every key holding one ends in ``_s``. The shape is versioned by
``format`` (:data:`FORMAT`) so :mod:`.compare` can refuse a file it does not understand.
"""

from __future__ import annotations

import datetime
import itertools
import platform
import re
import sys
from importlib import metadata
from typing import TYPE_CHECKING, Any

import orjson

from .records import RecordDicts, record_json

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator
    from pathlib import Path

    from .run import RunResult
    from .sweep import SweepResult

__all__ = [
    "FORMAT",
    "aggregates_csv",
    "json_chunks",
    "own_output",
    "point_summary",
    "record_json",
    "requests_csv",
    "results_document",
    "side_files",
    "versions",
    "write_outputs",
    "write_report",
    "write_results",
]

FORMAT = "sluice-loadtest/2"
"""Version 2 (issue 35) names the unit of every duration in its key (``ttft_s``,
``aggregates.ttft_s.p99``, ``timeline[].t_s``, the CSV headers); version 1 had the same
numbers, in seconds, under bare names (``ttft``). :mod:`.compare` reads only version 2."""


def versions() -> dict[str, str]:
    """The software that produced the numbers."""

    def version(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "unknown"

    return {
        "sluice": version("sluice"),
        "trio": version("trio"),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
    }


def results_document(
    run: RunResult,
    *,
    settings: dict[str, Any] | None = None,
    sweep: SweepResult | None = None,
) -> dict[str, Any]:
    """The whole results document for ``run`` (for a sweep: the point at the saturation rate,
    with every point's summary and records under ``sweep``). ``settings`` adds to the config
    (target URL, whether limits were respected); it must hold no secrets. The records are
    :class:`~.records.RecordDicts`: read from their file when used, never all in memory."""
    aggregates = run.aggregates
    started = datetime.datetime.fromtimestamp(run.started_at, datetime.UTC)
    document: dict[str, Any] = {
        "format": FORMAT,
        "started_at": started.isoformat(timespec="seconds"),
        "versions": versions(),
        "config": run.test.describe() | (settings or {}),
        "valid": aggregates["valid"],
        "invalid_reason": aggregates["invalid_reason"],
        "aggregates": aggregates,
        "interrupted": run.interrupted,
        "requests": RecordDicts(run.records),
        "warmup_requests": RecordDicts(run.warmup),
        "sweep": None,
    }
    if sweep is not None:
        document["sweep"] = {
            "plan": sweep.plan.describe(),
            "saturation_rate": sweep.saturation_rate,
            "points": [
                p.summary() | {"requests": RecordDicts(p.run.records)} for p in sweep.points
            ],
        }
    return document


def point_summary(run: RunResult) -> dict[str, Any]:
    """One run's headline numbers, for a list of runs (a concurrency sweep)."""
    agg = run.aggregates
    concurrency = getattr(run.test.shape, "concurrency", None)
    return {
        "concurrency": concurrency,
        "requests": agg["requests"]["total"],
        "error_rate": agg["requests"]["error_rate"],
        "requests_per_s": agg["throughput"]["requests_per_s"],
        "output_tokens_per_s": agg["throughput"]["output_tokens_per_s"],
        "ttft_p50_s": agg["ttft_s"]["p50"],
        "ttft_p99_s": agg["ttft_s"]["p99"],
        "itl_p50_s": agg["itl_s"]["p50"],
        "e2e_p50_s": agg["e2e_s"]["p50"],
        "e2e_p99_s": agg["e2e_s"]["p99"],
        "valid": agg["valid"],
    }


_OWN_STARTS = (
    re.compile(rb'\s*\{\s*"format"\s*:\s*"sluice-loadtest/'),  # the results JSON
    re.compile(rb'\{"index":'),  # requests.jsonl
    re.compile(rb"index,warmup,"),  # requests.csv
    re.compile(rb"metric,"),  # aggregates.csv
    re.compile(rb"<!doctype html>.{0,2000}<title>sluice loadtest", re.DOTALL | re.IGNORECASE),
)


def own_output(path: Path) -> bool:
    """Whether the file at ``path`` may be replaced without being asked: it is empty, or it
    begins the way one of the files a loadtest writes begins (the results JSON, its
    ``requests.jsonl``, ``requests.csv`` or ``aggregates.csv``, the HTML report). Only the
    first few kilobytes are read. Anything else (someone's notes, a batch output, a file
    that cannot be read) is not replaced unless the user says so.
    """
    try:
        with path.open("rb") as file:
            start = file.read(4096)
    except OSError:
        return False
    return not start or any(pattern.match(start) for pattern in _OWN_STARTS)


def side_files(path: Path) -> dict[str, Path]:
    """The files written beside the results ``path``: ``requests.jsonl``, ``requests.csv``
    and ``aggregates.csv`` after its stem (``run.json`` -> ``run.requests.jsonl``, ...)."""
    stem = path.with_suffix("") if path.suffix == ".json" else path
    return {
        kind: stem.with_name(f"{stem.name}.{kind}")
        for kind in ("requests.jsonl", "requests.csv", "aggregates.csv")
    }


_REQUEST_COLUMNS = (
    "index",
    "warmup",
    "session",
    "turn",
    "ok",
    "status",
    "error_type",
    "scheduled_s",
    "sent_s",
    "lag_s",
    "queue_wait_s",
    "admitted_s",
    "retry_wait_s",
    "ttft_s",
    "ttst_s",
    "e2e_s",
    "tpot_s",
    "itl_mean_s",
    "icl_mean_s",
    "chunks",
    "requested_input_tokens",
    "input_tokens",
    "requested_output_tokens",
    "output_tokens",
    "server_output_tokens",
    "client_output_tokens",
    "attempts",
    "request_id",
    "http_connect_s",
    "http_headers_s",
    "http_receive_s",
    "http_reused",
)


def _csv(rows: list[list[Any]]) -> str:
    import csv
    import io

    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerows([["" if v is None else v for v in row] for row in rows])
    return buffer.getvalue()


def requests_csv(document: dict[str, Any]) -> Iterator[bytes]:
    """Every request (warm-ups first, marked) as CSV, one row each; durations in seconds,
    as their ``_s`` headers say. In pieces: the header, then one row per record as it is
    read."""
    import csv
    import io

    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")

    def row(values: list[Any]) -> bytes:
        buffer.seek(0)
        buffer.truncate()
        writer.writerow(["" if v is None else v for v in values])
        return buffer.getvalue().encode()

    yield row(list(_REQUEST_COLUMNS))
    for record in itertools.chain(document.get("warmup_requests", ()), document["requests"]):
        itls, icls = record.get("itls_s") or [], record.get("icls_s") or []
        derived = {
            "itl_mean_s": sum(itls) / len(itls) if itls else None,
            "icl_mean_s": sum(icls) / len(icls) if icls else None,
        }
        yield row([derived[c] if c in derived else record.get(c) for c in _REQUEST_COLUMNS])


def aggregates_csv(document: dict[str, Any]) -> str:
    """The aggregates as CSV: one row per latency metric (count, mean, percentiles, and the
    bootstrap confidence bounds when there are), then ``name,value`` sections: the run's
    validity, the request counts and error rate, goodput, the load as scheduled, sent and
    completed, sluice's own retries and queueing, the throughput figures, and how many
    requests reused a connection. A section the results do not hold (an older file) is left
    out."""
    agg = document["aggregates"]
    metrics = [k for k, v in agg.items() if isinstance(v, dict) and "p50" in v]
    flat: dict[str, dict[str, Any]] = {}
    for key in metrics:
        row = {c: v for c, v in agg[key].items() if not isinstance(v, dict | list)}
        for stat, (low, high) in (agg[key].get("ci95") or {}).items():
            row[f"{stat}_ci95_low"], row[f"{stat}_ci95_high"] = low, high
        flat[key] = row
    columns: list[str] = []
    for row in flat.values():
        columns += [c for c in row if c not in columns]
    rows: list[list[Any]] = [["metric", *columns]]
    rows += [[key, *(flat[key].get(c) for c in columns)] for key in metrics]
    goodput = agg.get("goodput") or {}
    sections: list[tuple[str, dict[str, Any] | None]] = [
        (
            "validity",
            {"valid": document.get("valid"), "invalid_reason": document.get("invalid_reason")},
        ),
        ("requests", agg.get("requests")),
        ("goodput", {k: v for k, v in goodput.items() if k != "slos"} if goodput else None),
        ("load", agg.get("load")),
        ("sluice_waits", agg.get("sluice_waits")),
        ("throughput", agg.get("throughput")),
        ("http_reuse", agg.get("http_reuse")),
    ]
    for name, values in sections:
        if values is None:
            continue
        rows.append([])
        rows.append([name, "value"])
        rows += [[k, v] for k, v in values.items() if not isinstance(v, dict | list)]
    return _csv(rows)


def _atomic_write(path: Path, chunks: Iterable[bytes]) -> None:
    """Write ``chunks`` to ``path`` through a temporary file renamed over it, so a reader (or
    a crash) never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    try:
        with temporary.open("wb") as file:
            for chunk in chunks:
                file.write(chunk)
        temporary.replace(path)
    finally:
        temporary.unlink(missing_ok=True)


def json_chunks(value: Any, indent: int = 0) -> Iterator[bytes]:
    """``value`` as JSON text, in pieces: each :class:`~.records.RecordDicts` one record per
    line, copied from the records file; the rest indented like ``orjson.OPT_INDENT_2``."""
    pad = b"  " * indent
    if isinstance(value, RecordDicts):
        yield b"["
        first = True
        for line in value.lines():
            yield (b"\n" if first else b",\n") + pad + b"  " + line
            first = False
        yield b"]" if first else b"\n" + pad + b"]"
    elif isinstance(value, dict) and _holds_records(value):
        yield b"{"
        for number, (key, item) in enumerate(value.items()):
            yield (b"\n" if not number else b",\n") + pad + b"  " + orjson.dumps(key) + b": "
            yield from json_chunks(item, indent + 1)
        yield b"\n" + pad + b"}"
    elif isinstance(value, list) and _holds_records(value):
        yield b"["
        for number, item in enumerate(value):
            yield (b"\n" if not number else b",\n") + pad + b"  "
            yield from json_chunks(item, indent + 1)
        yield b"\n" + pad + b"]"
    else:
        text = orjson.dumps(value, option=orjson.OPT_INDENT_2)
        yield text.replace(b"\n", b"\n" + pad) if indent else text


def _holds_records(value: Any) -> bool:
    if isinstance(value, RecordDicts):
        return True
    if isinstance(value, dict):
        return any(_holds_records(v) for v in value.values())
    if isinstance(value, list):
        return any(_holds_records(v) for v in value)
    return False


def write_results(path: Path, document: dict[str, Any]) -> None:
    """Write ``document`` to ``path`` (the folder is created), atomically, streaming its
    records from their file.

    Raises:
        OSError: it cannot be written.
    """
    _atomic_write(path, itertools.chain(json_chunks(document), [b"\n"]))


def write_outputs(path: Path, document: dict[str, Any]) -> None:
    """The JSON results at ``path`` and the :func:`side_files` beside it.

    Raises:
        OSError: one cannot be written.
    """
    write_results(path, document)
    files = side_files(path)
    everything = (document.get("warmup_requests", ()), document["requests"])
    _atomic_write(
        files["requests.jsonl"],
        (line + b"\n" for records in everything for line in _lines(records)),
    )
    _atomic_write(files["requests.csv"], requests_csv(document))
    _atomic_write(files["aggregates.csv"], [aggregates_csv(document).encode()])


def _lines(records: Any) -> Iterator[bytes]:
    if isinstance(records, RecordDicts):
        return records.lines()
    return (orjson.dumps(record) for record in records)


def write_report(path: Path, document: dict[str, Any]) -> None:
    """Write the HTML report of ``document`` to ``path`` (the folder is created).

    Raises:
        OSError: it cannot be written.
    """
    from .report import render_report

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_report(document), encoding="utf-8")
