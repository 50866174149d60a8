"""The files of a batch run, in blocking calls that :func:`~sluice._jobs.batch.run_batch` runs
in worker threads: the output's lock, opening and probing it, reading an output to resume,
cutting its torn tail, dropping the error lines a resume does again (atomically), checking the
whole input once, and writing the summary. Nothing here knows about calls or tasks."""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from typing import BinaryIO

import orjson
import trio

from .batch_guard import OutputLock, PrefixHasher, lock_path, probe_output
from .batch_lines import Answered, LineSplitter, RetryErrors, custom_id_of, scan_output
from .batch_scan import InputCheck, find_duplicate

__all__ = [
    "READ_SIZE",
    "check_input",
    "close",
    "cut_torn_tail",
    "drop_redone",
    "lock_output",
    "open_input",
    "open_output",
    "same_file",
    "scan_for_resume",
    "size",
    "write_summary",
]

READ_SIZE = 1 << 16
"""Bytes read from the input at a time."""


def lock_output(name: str) -> OutputLock:
    """The output's lock, taken. It lies beside the file itself, so two runs that name the
    output through different links conflict too."""
    lock = OutputLock(lock_path(os.path.realpath(name)), f"output {name}")
    lock.acquire()
    return lock


def size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


async def close(f: BinaryIO) -> None:
    with trio.CancelScope(shield=True):
        await trio.to_thread.run_sync(f.close)


def same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """One file by path, link or inode (writing the output would empty the input)."""
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist yet
        return os.path.abspath(a) == os.path.abspath(b)


def open_input(path: str | os.PathLike[str]) -> BinaryIO:
    return open(path, "rb")


def open_output(path: str) -> BinaryIO:
    """The output opened to write from its start, once a probe write showed the disk takes
    it (:func:`probe_output`): a full disk leaves an existing file as it was and a new one
    not created."""
    existed = os.path.exists(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
    out = os.fdopen(fd, "wb")
    try:
        probe_output(out, path)
        if stat.S_ISREG(os.fstat(fd).st_mode):
            out.seek(0)
            out.truncate()
    except BaseException:
        out.close()
        if not existed:
            with contextlib.suppress(OSError):
                os.unlink(path)
        raise
    return out


def scan_for_resume(
    path: str | os.PathLike[str], retry_errors: RetryErrors
) -> tuple[BinaryIO | None, Answered]:
    """The existing output opened to append to (None when there is none) and what it holds.

    Nothing is changed yet: the torn tail is cut by :func:`cut_torn_tail` (or the error lines
    to redo dropped by :func:`drop_redone`) once the input has passed its check.
    """
    try:
        out = open(path, "r+b")  # noqa: SIM115 (closed by run_batch)
    except FileNotFoundError:
        return None, Answered(frozenset(), frozenset(), 0)
    try:
        return out, scan_output(out, retry_errors)
    except BaseException:
        out.close()
        raise


def cut_torn_tail(out: BinaryIO, keep: int) -> None:
    out.seek(keep)
    out.truncate()


def drop_redone(out: BinaryIO, path: str | os.PathLike[str], answered: Answered) -> BinaryIO:
    """The output without the error lines a resume does again (``answered.redo``), written to
    a temporary file that replaces it, synced first: the file on disk is always the old one or
    the new one whole. Killed before the rename, the old output stands and the next resume
    starts over; after it, the dropped lines are simply not answered yet, and the next resume
    does them. Returns the new file, opened to append to."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, temp = tempfile.mkstemp(prefix=".resume-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as copy:
            out.seek(0)
            left = answered.keep
            for raw in out:
                if left <= 0:
                    break
                left -= len(raw)
                if raw.startswith(b"{") and custom_id_of(raw) in answered.redo:
                    data = orjson.loads(raw)
                    if isinstance(data.get("error"), dict):
                        continue
                copy.write(raw)
            copy.flush()
            os.fsync(copy.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    out.close()
    fresh = open(path, "r+b")  # noqa: SIM115 (closed by run_batch)
    fresh.seek(0, os.SEEK_END)
    return fresh


def check_input(
    path: str | os.PathLike[str], check: InputCheck, hasher: PrefixHasher
) -> str | None:
    """Feed the whole input to ``check`` and ``hasher``; a message for the first duplicated
    custom_id, else None. A second pass runs only when two custom_ids hashed alike."""
    with open(path, "rb") as infile:
        splitter = LineSplitter()
        while True:
            chunk = infile.read(READ_SIZE)
            hasher.update(chunk)
            for lineno, raw in splitter.feed(chunk) if chunk else splitter.close():
                check.add(lineno, raw)
            if not chunk:
                break
        if not check.suspects or check.not_text is not None:
            return None
        infile.seek(0)
        splitter = LineSplitter()
        first: dict[str, int] = {}
        while True:
            chunk = infile.read(READ_SIZE)
            lines = splitter.feed(chunk) if chunk else splitter.close()
            found = find_duplicate(lines, check.suspects, first)
            if found is not None or not chunk:
                return found


def write_summary(path: str, data: bytes) -> None:
    """Replace ``path`` at once: a reader never sees half a summary."""
    partial = f"{path}.partial"
    with open(partial, "wb") as f:
        f.write(data)
    os.replace(partial, path)
