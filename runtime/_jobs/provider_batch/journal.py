"""The provider lane's state file: what was submitted, so a crash never pays twice.

``OUT.jsonl`` keeps its batches in ``OUT.batches.jsonl``, an append-only journal of JSON
records, each written whole and fsynced before the step it announces or right after the
step it records:

* ``intent`` (before the upload and the create): the submission's number, provider, model,
  fingerprint, wall time, worst-case tokens and cost, and its lines (``[wire_id, lineno,
  custom_id]`` each); for a batch of another endpoint than chat completions its ``url``
  (``responses``, ``embeddings``: absent in journals of older versions, which made only chat
  batches), and what its lines' results need besides their reply (``extra``, by wire id: the
  settings a response object repeats, an embeddings line's ``encoding_format``);
* ``file`` (after the upload): the input file's id;
* ``batch`` (after the create): the batch's id;
* ``done`` (after every line of the ended batch is in the output, or handed back to be sent
  again): the submission needs nothing more.

A process killed at any moment leaves a journal that says, for every submission, how far it
got; only the last record can be torn (no newline, or not JSON), and reading drops it, as
the output's own torn tail is dropped. A submission with an intent and no batch id may or
may not exist at the provider (killed during the create): the engine asks the backend to
find it by its fingerprint before it creates anything.

Reading keeps, per submission, only its ids and where its intent lies in the file: its
lines are read back when its batch is merged (:meth:`Journal.lines`), so memory holds the
lines of the batches being filled or merged, never the journal's.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import attrs
import orjson

from ..._errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

__all__ = ["Journal", "Submission", "journal_path"]


def journal_path(output: str) -> str:
    """``OUT.jsonl`` keeps its batches in ``OUT.batches.jsonl``."""
    return f"{output.removesuffix('.jsonl')}.batches.jsonl"


@attrs.define
class Submission:
    """One submission as the journal knows it."""

    seq: int
    provider: str
    model: str
    fingerprint: str
    at: float
    """Wall time of the intent (epoch seconds): the earliest the batch can have been made."""
    count: int
    tokens: int
    micros: int
    offset: int
    """Where the intent record starts in the journal (its lines are read from there)."""
    endpoint: str = "chat"
    """What its lines ask for: ``chat``, ``responses`` or ``embeddings``."""
    file_id: str | None = None
    batch_id: str | None = None
    done: bool = False


class Journal:
    """An open journal: its submissions replayed, appended to with :meth:`append`.

    Args:
        path: the journal's file; created when missing.

    Raises:
        ConfigError: a record other than the last is not a journal record (the file is not a
            sluice journal, or was edited).
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.submissions: dict[int, Submission] = {}
        self.run_id: str | None = None
        """The id of the journal, written in its first record; fingerprints start with it."""
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            end = self._replay()
            os.ftruncate(self._fd, end)  # a torn last record goes
            self._end = end
        except BaseException:
            os.close(self._fd)
            raise

    def _replay(self) -> int:
        keep = 0
        torn: int | None = None
        with open(self.path, "rb") as f:
            for n, raw in enumerate(f, start=1):
                if torn is not None:
                    raise ConfigError(
                        f"{self.path}: record {torn} is not a journal record: the file is not"
                        " a sluice batch journal (move it away to start over)"
                    )
                try:
                    data = orjson.loads(raw) if raw.endswith(b"\n") else None
                except orjson.JSONDecodeError:
                    data = None
                if not isinstance(data, dict) or not self._apply(data, keep):
                    torn = n
                    continue
                keep += len(raw)
        return keep

    def _apply(self, data: dict[str, Any], offset: int) -> bool:
        kind = data.get("t")
        try:
            if kind == "run":
                self.run_id = str(data["id"])
                return True
            if kind == "intent":
                seq = int(data["n"])
                self.submissions[seq] = Submission(
                    seq=seq,
                    provider=str(data["provider"]),
                    model=str(data["model"]),
                    fingerprint=str(data["fp"]),
                    at=float(data["at"]),
                    count=len(data["lines"]),
                    tokens=int(data["tokens"]),
                    micros=int(data["micros"]),
                    offset=offset,
                    endpoint=str(data.get("url", "chat")),
                )
                return True
            sub = self.submissions[int(data["n"])]
            if kind == "file":
                sub.file_id = str(data["file"])
            elif kind == "batch":
                sub.batch_id = str(data["batch"])
            elif kind == "done":
                sub.done = True
            else:
                return False
        except (KeyError, TypeError, ValueError):
            return False
        return True

    @property
    def next_seq(self) -> int:
        return max(self.submissions, default=0) + 1

    def active(self) -> list[Submission]:
        """Submissions not done, oldest first."""
        return [s for s in sorted(self.submissions.values(), key=lambda s: s.seq) if not s.done]

    def _write(self, record: dict[str, Any]) -> int:
        """Append one record and sync it; the offset it starts at."""
        data = orjson.dumps(record) + b"\n"
        offset = self._end
        written = 0
        while written < len(data):
            written += os.pwrite(self._fd, data[written:], offset + written)
        os.fsync(self._fd)
        self._end = offset + len(data)
        return offset

    def start(self, run_id: str) -> None:
        """Name a new journal (its first record)."""
        self._write({"t": "run", "id": run_id})
        self.run_id = run_id

    def intend(
        self,
        *,
        provider: str,
        model: str,
        fingerprint: str,
        at: float,
        lines: Sequence[tuple[str, int, str]],
        tokens: int,
        micros: int,
        endpoint: str = "chat",
        extra: Mapping[str, Any] | None = None,
    ) -> Submission:
        """Record a submission before anything is sent for it; ``extra`` maps a line's wire
        id to what its result needs besides the reply (see the module docstring)."""
        seq = self.next_seq
        record: dict[str, Any] = {
            "t": "intent",
            "n": seq,
            "provider": provider,
            "model": model,
            "fp": fingerprint,
            "at": at,
            "tokens": tokens,
            "micros": micros,
            "lines": lines,
        }
        if endpoint != "chat":
            record["url"] = endpoint
        if extra:
            record["extra"] = extra
        offset = self._write(record)
        sub = Submission(
            seq, provider, model, fingerprint, at, len(lines), tokens, micros, offset, endpoint
        )
        self.submissions[seq] = sub
        return sub

    def uploaded(self, sub: Submission, file_id: str) -> None:
        self._write({"t": "file", "n": sub.seq, "file": file_id})
        sub.file_id = file_id

    def created(self, sub: Submission, batch_id: str) -> None:
        self._write({"t": "batch", "n": sub.seq, "batch": batch_id})
        sub.batch_id = batch_id

    def finished(self, sub: Submission) -> None:
        self._write({"t": "done", "n": sub.seq})
        sub.done = True

    def lines(self, sub: Submission) -> list[tuple[str, int, str]]:
        """The submission's lines, read back from its intent record."""
        data = self._intent(sub)
        return [(str(w), int(n), str(c)) for w, n, c in data["lines"]]

    def extra(self, sub: Submission) -> dict[str, Any]:
        """What the submission's lines' results need besides the reply, by wire id."""
        extra = self._intent(sub).get("extra")
        return extra if isinstance(extra, dict) else {}

    def _intent(self, sub: Submission) -> dict[str, Any]:
        with open(self.path, "rb") as f:
            f.seek(sub.offset)
            data: dict[str, Any] = orjson.loads(f.readline())
        return data

    def close(self) -> None:
        os.close(self._fd)

    def remove(self) -> None:
        """Close and delete the journal (a run started over)."""
        self.close()
        os.unlink(self.path)
