"""Where a run's request records go as they finish: a file, not memory.

A long run makes hundreds of thousands of records, each with a latency per output token; kept
as objects they made a client's memory grow with every request, so a soak test could not
run. :class:`RecordFile` appends each record as one JSON line to an anonymous temporary file
(in the output's folder when told, so it never fills a RAM-backed ``/tmp``; gone when the
process ends, however it ends) and keeps only fixed-size numbers per record in flat arrays:
where its line is and when it was due. Reading gives the records back in the order they were
due, one at a time, so the aggregates and the output files are computed and written in
memory that does not grow with the run.
"""

from __future__ import annotations

import math
import operator
import os
import tempfile
import weakref
from array import array
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, overload

import attrs
import orjson

from .metrics import RequestRecord

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

__all__ = [
    "KEYS",
    "SECONDS",
    "RecordDicts",
    "RecordFile",
    "record_from_json",
    "record_json",
    "record_line",
]

RECENT = 500
"""Latest requests whose TTFT and lag stay in memory, for the live progress view."""


_FIELDS = tuple(field.name for field in attrs.fields(RequestRecord))

SECONDS = frozenset(
    {
        "scheduled",
        "sent",
        "lag",
        "queue_wait",
        "ttft",
        "ttst",
        "e2e",
        "tpot",
        "itls",
        "icls",
        "retry_wait",
        "admitted",
        "http_connect",
        "http_headers",
        "http_receive",
    }
)
"""The record's fields in seconds: written with an ``_s`` suffix (``ttft_s``), so every key
of the results names its unit."""

KEYS = {name: f"{name}_s" if name in SECONDS else name for name in _FIELDS}
"""Each :class:`RequestRecord` field's key in the JSON record."""
_NAMES = {key: name for name, key in KEYS.items()}
_PAIRS = tuple(KEYS.items())
_KEYS = tuple(KEYS.values())
_VALUES = operator.attrgetter(*_FIELDS)
"""Every field of a record, in order, in one call (the line is made once per request)."""


def record_json(record: RequestRecord) -> dict[str, Any]:
    """One request's record as JSON-ready data (keys as :data:`KEYS` names them)."""
    return {
        key: list(value) if isinstance(value := getattr(record, name), tuple) else value
        for name, key in _PAIRS
    }


def record_line(record: RequestRecord) -> bytes:
    """:func:`record_json`'s JSON text, made without building lists: orjson writes the
    record's tuples as arrays itself. It runs once per request during the run."""
    return orjson.dumps(dict(zip(_KEYS, _VALUES(record), strict=True)))


def record_from_json(data: dict[str, Any]) -> RequestRecord:
    """The record :func:`record_json` wrote (floats come back bit for bit: orjson writes the
    shortest text that reads back as the same double)."""
    fields = {_NAMES.get(key, key): value for key, value in data.items()}
    fields["itls"] = tuple(fields["itls"])
    fields["icls"] = tuple(fields["icls"])
    return RequestRecord(**fields)


class RecordFile(Sequence[RequestRecord]):
    """The records of one run, on disk, in the order they were due.

    :meth:`add` appends; ``len``, iteration and indexing (an int or a slice) read them back
    sorted by when they were due (then by index), which is how the results list them.
    :meth:`lines` gives the same order as the JSON lines themselves, for writing them out
    without building a record. Per record, memory holds three numbers (24 bytes).

    Raises:
        OSError: when the file cannot be written (a full disk: ``filename`` says it is the
            records) or read.
    """

    def __init__(self, folder: Path | None = None) -> None:
        self._folder = folder or tempfile.gettempdir()
        self._file = tempfile.TemporaryFile(  # noqa: SIM115 (open as long as the records live)
            dir=folder, prefix=".sluice-loadtest-records-"
        )
        # Closed when the records are dropped (a RunResult outlives the run that made it).
        weakref.finalize(self, self._file.close)
        self._offsets = array("q")
        self._scheduled = array("d")
        self._indexes = array("q")
        self._size = 0
        self.start = math.inf
        """The earliest time a record was due."""
        self.end = -math.inf
        """The latest time a record ended."""
        self._order: array[int] | None = None
        self.failed = 0
        self.recent: deque[tuple[float | None, float]] = deque(maxlen=RECENT)
        """``(ttft, lag)`` of the latest records, newest last (for a live view)."""

    def add(self, record: RequestRecord) -> None:
        self._keep(
            record_line(record) + b"\n",
            record.index,
            record.scheduled,
            record.end,
            ok=record.ok,
            ttft=record.ttft,
            lag=record.lag,
        )

    def add_line(self, line: bytes) -> dict[str, Any]:
        """Add the record whose JSON text (:func:`record_line`'s, no newline) is ``line``,
        kept as it is, without making its :class:`RequestRecord` (the ``--workers`` parent
        merges every worker's records this way); returns the line's data."""
        data: dict[str, Any] = orjson.loads(line)
        self._keep(
            line + b"\n",
            data["index"],
            data["scheduled_s"],
            data["sent_s"] + data["e2e_s"],  # RequestRecord.end
            ok=data["ok"],
            ttft=data["ttft_s"],
            lag=data["lag_s"],
        )
        return data

    def _keep(
        self,
        line: bytes,
        index: int,
        scheduled: float,
        end: float,
        *,
        ok: bool,
        ttft: float | None,
        lag: float,
    ) -> None:
        try:
            self._file.write(line)
        except OSError as exc:
            where = f"the request records (a temporary file in {self._folder})"
            raise OSError(exc.errno, exc.strerror, where) from exc
        self._offsets.append(self._size)
        self._scheduled.append(scheduled)
        self.start = min(self.start, scheduled)
        self.end = max(self.end, end)
        self._indexes.append(index)
        self._size += len(line)
        self._order = None
        self.failed += not ok
        self.recent.append((ttft, lag))

    def close(self) -> None:
        self._file.close()

    def __len__(self) -> int:
        return len(self._offsets)

    def _sorted(self) -> array[int]:
        if self._order is None:
            self._file.flush()
            scheduled, indexes = self._scheduled, self._indexes
            order = sorted(range(len(scheduled)), key=lambda i: (scheduled[i], indexes[i]))
            self._order = array("q", order)
        return self._order

    @property
    def span(self) -> tuple[float, float]:
        """When the first record was due and the last one ended ((0, 0) for none)."""
        return (self.start, self.end) if self._offsets else (0.0, 0.0)

    def _line(self, position: int) -> bytes:
        offsets = self._offsets
        start = offsets[position]
        end = offsets[position + 1] if position + 1 < len(offsets) else self._size
        return os.pread(self._file.fileno(), end - start - 1, start)

    def lines(self) -> Iterator[bytes]:
        """Each record's JSON text (no newline), in order."""
        for position in self._sorted():
            yield self._line(position)

    def __iter__(self) -> Iterator[RequestRecord]:
        for line in self.lines():
            yield record_from_json(orjson.loads(line))

    @overload
    def __getitem__(self, key: int) -> RequestRecord: ...
    @overload
    def __getitem__(self, key: slice) -> list[RequestRecord]: ...
    def __getitem__(self, key: int | slice) -> RequestRecord | list[RequestRecord]:
        order = self._sorted()
        if isinstance(key, slice):
            return [record_from_json(orjson.loads(self._line(p))) for p in order[key]]
        return record_from_json(orjson.loads(self._line(order[key])))


class RecordDicts:
    """A :class:`RecordFile`'s records as the results document lists them (JSON-ready dicts),
    read from the file when iterated or indexed. :func:`~.results.write_results` copies their
    lines straight into the file; nothing builds the whole list."""

    def __init__(self, records: Sequence[RequestRecord]) -> None:
        self.records = records

    def __len__(self) -> int:
        return len(self.records)

    def lines(self) -> Iterator[bytes]:
        """Each record's JSON text, in order."""
        records = self.records
        if isinstance(records, RecordFile):
            yield from records.lines()
        else:
            for record in records:
                yield record_line(record)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for line in self.lines():
            yield orjson.loads(line)

    def __getitem__(self, index: int) -> dict[str, Any]:
        records = self.records
        if isinstance(records, RecordFile):
            data: dict[str, Any] = orjson.loads(records._line(records._sorted()[index]))
            return data
        return record_json(records[index])
