"""The header fields of an HTTP/1.1 response head, read for :mod:`._http11`'s parser.

:func:`read_fields` turns a head's lines into :class:`ResponseHeaders` (lower-case names, a
repeated name's values joined) and says where the four headers that frame the body are among
their values, so the parser reads those without a lookup by name. One server's heads share a
layout (the same names in the same order): each layout is read once, and each head after it
costs a split per line and a lookup of each value among those seen before, both done by ``map``.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Mapping
from typing import TYPE_CHECKING, TypeVar, overload

from ._errors import RemoteProtocolError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from typing import TypeAlias

    _Pick: TypeAlias = Callable[[list[str]], tuple[str, ...]]
    Framing: TypeAlias = tuple[int, int, int, int]
    _Layout: TypeAlias = tuple[dict[str, int], _Pick | None, tuple[tuple[int, int], ...], Framing]

__all__ = ["NO_FRAMING", "TCHAR", "ResponseHeaders", "read_fields"]

_T = TypeVar("_T")

TCHAR = b"!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
"""The bytes a header name (an RFC 9110 token) may hold."""

# Header names seen before, raw -> lower-case: token-checked and lower-cased once per name.
_NAMES: dict[bytes, str] = {}
_MAX_NAMES = 512
_MAX_VALUES = 1024
_MAX_SHARED_VALUE = 64
# Header layouts seen before: a head's raw names in order -> each lower-case name's position,
# for repeated names what picks each one's first value and which lines join it (None, ():
# none repeats), and where the framing headers' values are (see _framing). One server's heads
# share a layout: read with no per-name work, and sharing one name table, each holding only
# its values (see ResponseHeaders). Cleared when full.
_LAYOUTS: dict[tuple[bytes, ...], _Layout] = {}
_MAX_LAYOUTS = 256


class ResponseHeaders(Mapping[str, str]):
    """A response's headers, read-only: lower-case names, a repeated name's values joined with
    ``", "`` in arrival order, iterated in the order the names first came.

    Every open stream holds its response's headers until it ends (the rate limiter reads them
    then), so they are kept small: the values in a tuple, and a name-to-position table shared
    by every response whose head has the same names in the same order, as one server's
    responses do, where a dict per response would hold its own copy of that table.
    """

    __slots__ = ("_index", "_values")

    def __init__(self, index: dict[str, int], values: tuple[str, ...]) -> None:
        self._index = index
        """Name -> position in ``_values``; shared with other responses, so never changed."""
        self._values = values

    def __getitem__(self, name: str) -> str:
        return self._values[self._index[name]]

    @overload
    def get(self, name: str, /) -> str | None: ...
    @overload
    def get(self, name: str, /, default: str | _T) -> str | _T: ...
    def get(self, name: str, /, default: object = None) -> object:
        at = self._index.get(name)
        return default if at is None else self._values[at]

    def __contains__(self, name: object) -> bool:
        return name in self._index

    def __iter__(self) -> Iterator[str]:
        return iter(self._index)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        # Names only: a value may be a cookie or a token the server set.
        return f"ResponseHeaders({list(self._index)!r})"


NO_HEADERS = ResponseHeaders({}, ())


class _Values(dict[bytes, str]):
    """Header values seen before, raw -> text (see ``_VALUES``); a value not seen before is
    read by ``__missing__``, so :func:`read_fields` looks every value up by one ``map``."""

    __slots__ = ()

    def __missing__(self, value: bytes) -> str:
        text = value.strip(b" \t").decode("latin-1")
        if len(value) <= _MAX_SHARED_VALUE:
            if len(self) >= _MAX_VALUES:
                self.clear()
            self[value] = text
        return text


# Header values seen before, raw -> text, for the short ones: a server sends many of the same
# values in every response (content type, versions, limits, policies), and every open stream
# holds its response's headers, so each shares one string instead of holding a copy. Cleared
# when full, so values that are never repeated (ids, dates) cannot keep out the common ones.
_VALUES = _Values()
_COLONS = itertools.repeat(b":")
"""The second argument of every ``bytes.partition`` in :func:`read_fields`' ``map``."""


def _value(value: bytes) -> str:
    """The text of a header value (``value`` is what follows the colon)."""
    return _VALUES[value]


def _name(key: bytes) -> str:
    """The lower-case text of a header name, checked to be a token."""
    lower = _NAMES.get(key)
    if lower is None:
        if not key or key.translate(None, TCHAR):
            raise RemoteProtocolError("malformed header line")
        lower = key.lower().decode("ascii")
        if len(_NAMES) < _MAX_NAMES:
            _NAMES[key] = lower
    return lower


def read_fields(lines: list[bytes]) -> tuple[ResponseHeaders, tuple[str, ...], Framing]:
    """The headers of the head ``lines`` (the status line first), their values, and where the
    framing headers are among those. Per head, only a split of each line at its colon and a
    lookup of each value among those seen before, done by ``map`` over all lines at once (no
    Python step per line): the names are read once per layout (see ``_LAYOUTS``). A line
    without a colon, or a name that is no token, may be a folded line:
    :func:`_folded_headers` reads those heads."""
    if len(lines) < 2:
        return NO_HEADERS, (), NO_FRAMING
    keys, colons, raw = zip(*map(bytes.partition, lines[1:], _COLONS), strict=True)
    if b"" in colons:
        return _folded_headers(lines)
    texts = list(map(_VALUES.__getitem__, raw))
    layout = _LAYOUTS.get(keys)
    if layout is None:
        try:
            layout = _layout(keys)
        except RemoteProtocolError:
            return _folded_headers(lines)
        if len(_LAYOUTS) >= _MAX_LAYOUTS:
            _LAYOUTS.clear()
        _LAYOUTS[keys] = layout
    index, firsts, repeats, framing = layout
    values = tuple(texts) if firsts is None else _joined(texts, firsts, repeats)
    return ResponseHeaders(index, values), values, framing


def _joined(
    texts: list[str], firsts: _Pick, repeats: tuple[tuple[int, int], ...]
) -> tuple[str, ...]:
    """The values of a head whose names repeat: each name's values joined in arrival order."""
    joined = list(firsts(texts))
    for slot, line_at in repeats:
        joined[slot] = f"{joined[slot]}, {texts[line_at]}"
    return tuple(joined)


def _layout(keys: tuple[bytes, ...]) -> _Layout:
    """Each lower-case name's position for the raw names ``keys``, what joins a repeated
    name's values (see ``_LAYOUTS``), and where the framing headers are (:func:`_framing`).

    Raises:
        RemoteProtocolError: a name is not a token.
    """
    index: dict[str, int] = {}
    firsts: list[int] = []
    repeats: list[tuple[int, int]] = []
    for line, key in enumerate(keys):
        slot = index.setdefault(_name(key), len(firsts))
        if slot == len(firsts):
            firsts.append(line)
        else:
            repeats.append((slot, line))
    if not repeats:
        return index, None, (), _framing(index)
    # itemgetter of one position returns the item, not a tuple of one
    pick = operator.itemgetter(*firsts) if len(firsts) > 1 else lambda texts: (texts[0],)
    return index, pick, tuple(repeats), _framing(index)


def _framing(index: dict[str, int]) -> Framing:
    """Where ``connection``, ``transfer-encoding``, ``content-length`` and
    ``content-encoding`` are among a head's values (-1: absent), for
    :meth:`~._http11.ResponseParser._frame`."""
    return (
        index.get("connection", -1),
        index.get("transfer-encoding", -1),
        index.get("content-length", -1),
        index.get("content-encoding", -1),
    )


NO_FRAMING: Framing = (-1, -1, -1, -1)


def _folded_headers(lines: list[bytes]) -> tuple[ResponseHeaders, tuple[str, ...], Framing]:
    """The headers of the head ``lines`` when some line is no plain ``name: value``: a line
    that continues the one before (obs-fold, RFC 9112 §5.2) joins its header's value after a
    space; anything else is refused.

    Raises:
        RemoteProtocolError: a line is neither a header nor a continuation.
    """
    index: dict[str, int] = {}
    texts: list[str] = []
    at = -1  # the position of the previous header's value
    for raw in lines[1:]:
        if raw[:1] in (b" ", b"\t") and at >= 0:
            more = raw.strip(b" \t").decode("latin-1")
            texts[at] = f"{texts[at]} {more}".strip()
            continue
        key, colon, value = raw.partition(b":")
        if not colon:
            raise RemoteProtocolError("malformed header line")
        name = _name(key)
        text = _value(value)
        seen = index.get(name)
        if seen is None:
            at = index[name] = len(texts)
            texts.append(text)
        else:
            at = seen
            texts[at] = f"{texts[at]}, {text}"
    values = tuple(texts)
    return ResponseHeaders(index, values), values, _framing(index)
