"""What keeps a batch output whole: one writer at a time, and the input it answers.

* :class:`OutputLock`: an exclusive ``flock`` on ``OUT.lock`` beside the output, taken before
  the output is read or written. The kernel drops it when the process ends, however it ends
  (``kill -9`` included), so a lock is never stale; a second run finds it held and names the
  process holding it (its pid is written in the file).
* :class:`InputRecord`: a fingerprint of the input (its size, the SHA-256 of those bytes,
  ``--model`` and ``--shard``) kept in ``OUT.input.json``, written before the first output
  line. A resume checks that the input still starts with the recorded bytes: the same input,
  or the same input with lines appended, is accepted; anything else is refused before a byte
  changes. :class:`PrefixHasher` computes both digests (the recorded prefix's and the whole
  file's) in the one pass the batch already makes over its input.
* :func:`probe_output`: one write at the output's end, taken back at once, so a full disk
  (or ``/dev/full``) is found before the first call is paid for.

These are the only file operations of a batch that are not lines: :mod:`sluice._jobs.batch`
calls them in order, before anything else touches the output.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import stat
from typing import TYPE_CHECKING, Any

import attrs
import orjson

from .._errors import ConfigError

if TYPE_CHECKING:
    from typing import BinaryIO

__all__ = [
    "InputRecord",
    "OutputLock",
    "PrefixHasher",
    "input_record_path",
    "lock_path",
    "probe_output",
    "regular_or_missing",
]

_PROBE = b" " * 4096
"""Bytes written past the end and cut off again: a block's worth, so a disk without one
free block fails the probe. No newline: if the process dies before the cut, a resume sees
a torn last line and cuts it."""


def lock_path(output: str) -> str:
    """``OUT.jsonl`` is locked through ``OUT.jsonl.lock``."""
    return f"{output}.lock"


def input_record_path(output: str) -> str:
    """Where the input's fingerprint goes: ``OUT.jsonl`` gives ``OUT.input.json``."""
    return f"{output.removesuffix('.jsonl')}.input.json"


def regular_or_missing(path: str) -> bool:
    """True for a regular file or a path with nothing there yet: such an output gets a lock
    and an input record. A device or a pipe (``/dev/null``, ``/dev/full``) gets neither: it
    cannot be resumed, and nothing can be written beside it."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except FileNotFoundError:
        return True


class OutputLock:
    """An exclusive lock on ``path`` (the lock file), held from :meth:`acquire` to
    :meth:`release`. The file is removed on release; a lock file left by a killed process
    is harmless (nobody holds its lock) and is taken over by the next run."""

    def __init__(self, path: str, what: str) -> None:
        self.path = path
        self._what = what
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock without waiting, and write this process's pid into the file.

        Raises:
            ConfigError: another process holds it (its pid named), or the file cannot be
                created.
        """
        while True:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except OSError as exc:
                raise ConfigError(
                    f"cannot create the lock file {self.path}: {exc.strerror or exc}"
                ) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_pid(fd)
                os.close(fd)
                who = f"process {holder}" if holder else "another process"
                raise ConfigError(
                    f"{self._what} is being written by {who} (another sluice batch; lock"
                    f" {self.path}): wait for it to end, or stop it, then run again"
                ) from None
            # A run that ended between our open and our flock removed the file we opened:
            # lock the file that is there now instead.
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(self.path))
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd

    def release(self) -> None:
        """Remove the lock file, then drop the lock (in that order: a run waiting to lock
        the removed file sees it is gone and locks a new one). Harmless when not held."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        with contextlib.suppress(OSError):
            os.unlink(self.path)
        os.close(fd)


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


class PrefixHasher:
    """SHA-256 of a file fed in chunks, and of its first ``prefix`` bytes on the way."""

    def __init__(self, prefix: int | None = None) -> None:
        self._hash = hashlib.sha256()
        self._prefix = prefix
        self.size = 0
        self.prefix_digest: str | None = None
        """The first ``prefix`` bytes' digest, once that many were fed; None before (or
        for a file shorter than ``prefix``)."""
        if prefix == 0:
            self.prefix_digest = self._hash.hexdigest()

    def update(self, chunk: bytes) -> None:
        prefix = self._prefix
        if prefix is not None and self.prefix_digest is None and self.size + len(chunk) >= prefix:
            cut = prefix - self.size
            self._hash.update(chunk[:cut])
            self.prefix_digest = self._hash.hexdigest()
            self._hash.update(chunk[cut:])
        else:
            self._hash.update(chunk)
        self.size += len(chunk)

    def hexdigest(self) -> str:
        return self._hash.hexdigest()


@attrs.frozen(kw_only=True)
class InputRecord:
    """What an output was made from."""

    input: str
    """The input's path when it was recorded (for the reader; only the bytes are compared)."""
    size: int
    sha256: str
    """Of the input's first ``size`` bytes."""
    model: str | None
    shard: str | None

    def to_json(self) -> bytes:
        return orjson.dumps(
            {
                "input": self.input,
                "bytes": self.size,
                "sha256": self.sha256,
                "model": self.model,
                "shard": self.shard,
            },
            option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE,
        )

    @classmethod
    def read(cls, path: str) -> InputRecord | None:
        """The record at ``path``; None when there is none.

        Raises:
            ConfigError: the file is there but is not such a record.
        """
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
        try:
            data: Any = orjson.loads(raw)
            record = cls(
                input=str(data["input"]),
                size=int(data["bytes"]),
                sha256=str(data["sha256"]),
                model=data["model"],
                shard=data["shard"],
            )
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            raise ConfigError(
                f"{path} is not a sluice input record: remove it, or give another -o"
            ) from None
        return record

    def mismatch(self, now: InputRecord, prefix_digest: str | None, output: str) -> str | None:
        """Why an output recorded as ``self`` cannot be resumed with the input and options
        ``now`` (whose input's first ``self.size`` bytes hash to ``prefix_digest``, None when
        it is shorter); None when it can."""
        fix = "give a new -o, or --overwrite to start it over"
        if now.model != self.model:
            return (
                f"output {output} was made with --model {self.model or '(none)'}, not"
                f" {now.model or '(none)'}: resume with the same --model, or {fix}"
            )
        if now.shard != self.shard:
            return (
                f"output {output} was made with --shard {self.shard or '(none)'}, not"
                f" {now.shard or '(none)'}: resume with the same --shard, or {fix}"
            )
        if prefix_digest != self.sha256:
            how = "is shorter than" if prefix_digest is None else "does not start with"
            return (
                f"output {output} answers another input: {now.input} {how} the"
                f" {self.size} bytes it was made from ({self.input}); resume with that input"
                f" (lines appended to it are fine), or {fix}"
            )
        return None

    def write(self, path: str) -> None:
        """Replace ``path`` with this record at once (a reader sees the old one or this).
        Not synced to disk: neither are the output's lines, which it only has to outlive
        as long as they do."""
        partial = f"{path}.partial"
        with open(partial, "wb") as f:
            f.write(self.to_json())
        os.replace(partial, path)


def probe_output(out: BinaryIO, name: str) -> None:
    """Write a block at the end of ``out`` and cut it off again, so a disk that cannot take
    one more block refuses now, before any call. ``out`` is left at its end, unchanged.
    Written past ``out``'s buffer (which must be empty), so a failure leaves nothing in it.
    A device or a pipe gets an empty write (``/dev/full`` refuses even that; a pipe or a
    terminal must not receive stray bytes).

    Raises:
        ConfigError: the write failed (the disk is full, the file system read-only...).
    """
    fd = out.fileno()
    end = out.seek(0, os.SEEK_END)
    regular = stat.S_ISREG(os.fstat(fd).st_mode)
    try:
        os.pwrite(fd, _PROBE, end) if regular else os.write(fd, b"")
    except OSError as exc:
        raise ConfigError(f"output {name} cannot be written: {exc.strerror or exc}") from None
    finally:
        if regular:
            os.ftruncate(fd, end)
