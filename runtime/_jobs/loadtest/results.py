"""The results file: one JSON document with the config, the versions, the aggregates, every
request's record and the sweep, when there was one. Pure apart from :func:`write_results`.

Durations are seconds. The shape is versioned by ``format`` so :mod:`.compare` can refuse a
file it does not understand.
"""

from __future__ import annotations

import datetime
import platform
import sys
from importlib import metadata
from typing import TYPE_CHECKING, Any

import attrs
import orjson

if TYPE_CHECKING:
    from pathlib import Path

    from .metrics import RequestRecord
    from .run import RunResult
    from .sweep import SweepResult

__all__ = [
    "FORMAT",
    "aggregates_csv",
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

FORMAT = "sluice-loadtest/1"


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


def record_json(record: RequestRecord) -> dict[str, Any]:
    """One request's record as JSON-ready data."""
    return attrs.asdict(record, value_serializer=_lists)


def _lists(_instance: Any, _attribute: Any, value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def results_document(
    run: RunResult,
    *,
    settings: dict[str, Any] | None = None,
    sweep: SweepResult | None = None,
) -> dict[str, Any]:
    """The whole results document for ``run`` (for a sweep: the point at the saturation rate,
    with every point's summary and records under ``sweep``). ``settings`` adds to the config
    (target URL, whether limits were respected); it must hold no secrets."""
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
        "requests": [record_json(r) for r in run.records],
        "warmup_requests": [record_json(r) for r in run.warmup],
        "sweep": None,
    }
    if sweep is not None:
        document["sweep"] = {
            "plan": sweep.plan.describe(),
            "saturation_rate": sweep.saturation_rate,
            "points": [
                p.summary() | {"requests": [record_json(r) for r in p.run.records]}
                for p in sweep.points
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
        "ttft_p50": agg["ttft"]["p50"],
        "ttft_p99": agg["ttft"]["p99"],
        "itl_p50": agg["itl"]["p50"],
        "e2e_p50": agg["e2e"]["p50"],
        "e2e_p99": agg["e2e"]["p99"],
        "valid": agg["valid"],
    }


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
    "scheduled",
    "sent",
    "lag",
    "queue_wait",
    "ttft",
    "ttst",
    "e2e",
    "tpot",
    "itl_mean",
    "icl_mean",
    "chunks",
    "requested_input_tokens",
    "input_tokens",
    "requested_output_tokens",
    "output_tokens",
    "server_output_tokens",
    "client_output_tokens",
    "attempts",
    "request_id",
    "http_connect",
    "http_headers",
    "http_receive",
    "http_reused",
)


def _csv(rows: list[list[Any]]) -> str:
    import csv
    import io

    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerows([["" if v is None else v for v in row] for row in rows])
    return buffer.getvalue()


def requests_csv(document: dict[str, Any]) -> str:
    """Every request (warm-ups first, marked) as CSV, one row each; seconds."""
    rows: list[list[Any]] = [list(_REQUEST_COLUMNS)]
    for record in (*document.get("warmup_requests", ()), *document["requests"]):
        itls, icls = record.get("itls") or [], record.get("icls") or []
        derived = {
            "itl_mean": sum(itls) / len(itls) if itls else None,
            "icl_mean": sum(icls) / len(icls) if icls else None,
        }
        rows.append([derived[c] if c in derived else record.get(c) for c in _REQUEST_COLUMNS])
    return _csv(rows)


def aggregates_csv(document: dict[str, Any]) -> str:
    """The latency summaries as CSV: one row per metric (count, mean, percentiles, and the
    bootstrap confidence bounds when there are), then the throughput figures, then how many
    requests reused a connection."""
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
    rows.append([])
    rows.append(["throughput", "value"])
    rows += [[k, v] for k, v in agg["throughput"].items()]
    reuse = agg.get("http_reuse")
    if reuse is not None:  # results from before the transport measured HTTP phases have none
        rows.append([])
        rows.append(["http_reuse", "value"])
        rows += [[k, v] for k, v in reuse.items()]
    return _csv(rows)


def _atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file renamed over it, so a reader (or a
    crash) never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_bytes(data)
    temporary.replace(path)


def write_results(path: Path, document: dict[str, Any]) -> None:
    """Write ``document`` to ``path`` (the folder is created), atomically.

    Raises:
        OSError: it cannot be written.
    """
    _atomic_write(path, orjson.dumps(document, option=orjson.OPT_INDENT_2) + b"\n")


def write_outputs(path: Path, document: dict[str, Any]) -> None:
    """The JSON results at ``path`` and the :func:`side_files` beside it.

    Raises:
        OSError: one cannot be written.
    """
    write_results(path, document)
    files = side_files(path)
    lines = b"".join(
        orjson.dumps(record) + b"\n"
        for record in (*document.get("warmup_requests", ()), *document["requests"])
    )
    _atomic_write(files["requests.jsonl"], lines)
    _atomic_write(files["requests.csv"], requests_csv(document).encode())
    _atomic_write(files["aggregates.csv"], aggregates_csv(document).encode())


def write_report(path: Path, document: dict[str, Any]) -> None:
    """Write the HTML report of ``document`` to ``path`` (the folder is created).

    Raises:
        OSError: it cannot be written.
    """
    from .report import render_report

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_report(document), encoding="utf-8")
