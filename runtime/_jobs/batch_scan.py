"""The pass over a batch input before its run: duplicates, lines to do, providers. Pure: no I/O.

A batch must refuse a duplicated ``custom_id`` before the first call (two output lines with one
id cannot be joined back), with as little memory per line as it can. So the check keeps one
64-bit hash per custom_id in a flat table (two to four machine words a line, where a dict of the
id strings would hold the strings themselves, a hash entry and an object header), and only when
two hashes meet does a second pass look at the ids themselves, which also names both line
numbers. The same pass counts the lines this run will do (for progress and ETA) and the
providers they call (the limits apply to those).
"""

from __future__ import annotations

from array import array
from typing import TYPE_CHECKING

import orjson

from .batch_lines import custom_id_of

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping

    from .batch_lines import Answered, Shard

__all__ = ["HashSet", "InputCheck", "find_duplicate", "not_text"]


def not_text(lineno: int, raw: bytes) -> str | None:
    """Why line ``lineno`` shows the file is not UTF-8 text, or None when it is text (and
    merely not JSON). NUL bytes never occur in JSON text: they are how UTF-16 and UTF-32
    files look when read as UTF-8."""
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        return f"line {lineno} starts with a UTF-16 byte order mark: the file is UTF-16"
    if b"\x00" in raw:
        return f"line {lineno} holds NUL bytes: the file looks like UTF-16 or UTF-32"
    try:
        raw.decode()
    except UnicodeDecodeError as exc:
        return f"line {lineno}: byte {exc.start + 1} ({raw[exc.start]:#04x}) is not UTF-8"
    return None


class HashSet:
    """A set of nonzero 64-bit integers in one flat array, open addressing, at most half full."""

    def __init__(self, capacity: int = 1024) -> None:
        size = 1 << max(4, (2 * capacity - 1).bit_length())
        self._table = array("q", bytes(8 * size))
        self._mask = size - 1
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def add(self, value: int) -> bool:
        """Add ``value`` (a nonzero signed 64-bit integer); True when it was already there."""
        table, mask = self._table, self._mask
        i = value & mask
        while True:
            found = table[i]
            if found == 0:
                break
            if found == value:
                return True
            i = (i + 1) & mask
        table[i] = value
        self._size += 1
        if 2 * self._size > mask:
            self._grow()
        return False

    def _grow(self) -> None:
        old = self._table
        size = 2 * len(old)
        self._table = table = array("q", bytes(8 * size))
        self._mask = mask = size - 1
        for value in old:
            if value:
                i = value & mask
                while table[i]:
                    i = (i + 1) & mask
                table[i] = value


def _hash(custom_id: str) -> int:
    # str hashes are 64-bit and stable within one process, which is all the check needs.
    return hash(custom_id) or 1


class InputCheck:
    """Feed every input line once with :meth:`add`; then read the findings.

    Args:
        model: ``--model`` (its provider is the only one called), else None.
        shard: only lines of this shard count towards :attr:`todo`.
        answered: lines an existing output answers (``resume``) do not count either.
        groups: the config's model groups, each with the providers of its deployments: a
            line (or ``model``) naming a group calls those.
    """

    def __init__(
        self,
        *,
        model: str | None = None,
        shard: Shard | None = None,
        answered: Answered | None = None,
        groups: Mapping[str, Collection[str]] | None = None,
    ) -> None:
        self._shard = shard
        self._answered = answered
        self._groups = groups or {}
        self._seen = HashSet()
        self.suspects: set[int] = set()
        """Hashes seen twice: a duplicate, or (rarely) two ids with the same hash."""
        self.todo = 0
        """Non-blank lines this run will answer."""
        self.lines = 0
        """Non-blank lines in the input."""
        self.not_text: str | None = None
        """Why the input is not UTF-8 text (its first such line), else None."""
        self.providers: set[str] = set()
        """The provider part of every ``provider:model`` the lines name (a group's
        deployments' providers for a group)."""
        if model is not None:
            self._add_model(model)
        self._model = model

    def _add_model(self, model: str) -> None:
        group = self._groups.get(model)
        if group is not None:
            self.providers.update(group)
        elif ":" in model:
            self.providers.add(model.partition(":")[0])

    def add(self, lineno: int, raw: bytes) -> None:
        if not raw.strip():
            return
        self.lines += 1
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError:
            data = None
            if self.not_text is None:
                self.not_text = not_text(lineno, raw)
        custom_id = data.get("custom_id") if isinstance(data, dict) else None
        if not isinstance(custom_id, str) or not custom_id:
            custom_id = None
        else:
            digest = _hash(custom_id)
            if self._seen.add(digest):
                self.suspects.add(digest)
        if self._model is None and isinstance(data, dict):
            body = data.get("body")
            model = body.get("model") if isinstance(body, dict) else None
            if isinstance(model, str):
                self._add_model(model)
        if self._shard is not None and not self._shard.holds(custom_id):
            return
        answered = self._answered
        if answered is not None and (
            custom_id in answered.custom_ids
            if custom_id is not None
            else lineno in answered.linenos
        ):
            return
        self.todo += 1


def find_duplicate(
    lines: list[tuple[int, bytes]], suspects: set[int], first: dict[str, int]
) -> str | None:
    """The second pass, over one chunk's lines: a message naming both lines of the first
    custom_id (among those whose hash is in ``suspects``) seen twice, else None.

    ``first`` carries the suspected ids seen so far, with their line, from chunk to chunk.
    """
    for lineno, raw in lines:
        custom_id = custom_id_of(raw)
        if custom_id is None or _hash(custom_id) not in suspects:
            continue
        seen = first.setdefault(custom_id, lineno)
        if seen != lineno:
            return f"custom_id {custom_id!r} appears on line {seen} and again on line {lineno}"
    return None
