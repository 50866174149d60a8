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
    "record_json",
    "results_document",
    "versions",
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
        "requests": [record_json(r) for r in run.records],
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


def write_results(path: Path, document: dict[str, Any]) -> None:
    """Write ``document`` to ``path`` (the folder is created).

    Raises:
        OSError: it cannot be written.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(orjson.dumps(document, option=orjson.OPT_INDENT_2) + b"\n")


def write_report(path: Path, document: dict[str, Any]) -> None:
    """Write the HTML report of ``document`` to ``path`` (the folder is created).

    Raises:
        OSError: it cannot be written.
    """
    from .report import render_report

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_report(document), encoding="utf-8")
