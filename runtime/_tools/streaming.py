"""Tool-call arguments parsed while they stream, at a cost linear in their length. Pure.

:class:`StreamingArguments` reads one call's argument fragments as they arrive and keeps the
value built so far, so each fragment costs time for its own characters only (plus a shallow
copy of the objects and arrays still open, for the snapshot it returns), where re-parsing the
whole text per fragment (:func:`~sluice._tools.repair.parse_partial`) costs time for all of it.
Its snapshots equal what ``parse_partial`` gives for the same text: strings cut off are
included as far as they go, numbers (and unfinished literals) touching the end and keys
without a value are left out, so a snapshot only ever grows.

It follows strict JSON, which is what native tool calls stream. At the first character that
strict JSON does not allow (single quotes, comments, a code fence, prose, double encoding...)
it falls back to ``parse_partial`` on the whole text for the rest of the call, which repairs
all that at the quadratic cost. :class:`ArgumentStreams` puts the snapshots on an attempt's
``ToolCallDelta`` events.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Final

import orjson

from .._events import TextDelta, ToolCallDelta
from .repair import parse_partial

if TYPE_CHECKING:
    from collections.abc import Iterable

    from .._events import DeltaEvent
    from .._messages import ToolCall

__all__ = ["ArgumentStreams", "ForcedReplyDeltas", "StreamingArguments", "whole_call_deltas"]

_PLAIN: Final = re.compile(r'[^"\\]+')
_WS: Final = frozenset(" \t\r\n")
_ESCAPES: Final = {
    '"': '"',
    "\\": "\\",
    "/": "/",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
}
_HEX: Final = frozenset("0123456789abcdefABCDEF")
_LITERALS: Final[dict[str, Any]] = {"true": True, "false": False, "null": None}
_NUMBER: Final = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?")

# What an open container expects next.
_KEY_OR_END: Final = 0  # just after "{"
_KEY: Final = 1  # after ","
_COLON: Final = 2
_VALUE: Final = 3  # after ":" or, in an array, after ","
_VALUE_OR_END: Final = 4  # just after "["
_COMMA_OR_END: Final = 5


class _NotStrict(Exception):
    """The text left strict JSON: fall back to the repairing parser."""


class _Frame:
    __slots__ = ("expect", "key", "value")

    def __init__(self, value: dict[str, Any] | list[Any], expect: int) -> None:
        self.value = value
        self.expect = expect
        self.key: str | None = None
        """In an object: the key whose value is being read."""


class StreamingArguments:
    """One tool call's arguments, fed fragment by fragment; see the module docstring."""

    def __init__(self) -> None:
        self._fragments: list[str] = []
        self._fallback = False
        self._stack: list[_Frame] = []
        self._root: dict[str, Any] | None = None
        self._done = False
        """The top-level object has closed."""
        self._string: list[str] | None = None
        """The decoded pieces of the string being read, if one is."""
        self._string_is_key = False
        self._escape = ""
        """An escape sequence begun but not finished (from its backslash)."""
        self._high: str | None = None
        """A high surrogate from a ``\\u`` escape, waiting for its low half."""
        self._word: str | None = None
        """A number or literal being read."""
        self._word_ended = False
        """Whitespace followed the word: only a delimiter may come next."""
        self._snapshot: dict[str, Any] | None = None

    @property
    def repairing(self) -> bool:
        """Whether the text left strict JSON, so each fragment now re-parses all of it."""
        return self._fallback

    def feed(self, fragment: str) -> dict[str, Any] | None:
        """Append ``fragment``; the arguments parsed so far, or None when nothing parses yet
        (or the text is not a JSON object). Never raises."""
        self._fragments.append(fragment)
        if not self._fallback:
            try:
                self._consume(fragment)
            except _NotStrict:
                self._fallback = True
            else:
                if fragment:
                    self._snapshot = self._build()
                return self._snapshot
        value = parse_partial("".join(self._fragments))
        self._snapshot = value if isinstance(value, dict) else None
        return self._snapshot

    # Reading ------------------------------------------------------------------------------

    def _consume(self, text: str) -> None:
        i, n = 0, len(text)
        while i < n:
            if self._string is not None:
                i = self._in_string(text, i)
                continue
            c = text[i]
            i += 1
            if c in _WS:
                if self._word is not None:
                    self._word_ended = True
                continue
            if self._done:
                raise _NotStrict
            if c in ",]}":
                if self._word is not None:
                    self._end_word()
                self._delimiter(c)
                continue
            if self._word is not None:
                if self._word_ended:
                    raise _NotStrict
                self._word += c
                continue
            frame = self._stack[-1] if self._stack else None
            if c == "{" or c == "[":
                if frame is not None and frame.expect not in (_VALUE, _VALUE_OR_END):
                    raise _NotStrict
                if frame is None and (self._root is not None or c == "["):
                    raise _NotStrict  # the arguments are one object
                opened = _Frame({}, _KEY_OR_END) if c == "{" else _Frame([], _VALUE_OR_END)
                if frame is None:
                    assert isinstance(opened.value, dict)
                    self._root = opened.value
                self._stack.append(opened)
            elif frame is None:
                raise _NotStrict
            elif c == ":":
                if frame.expect != _COLON:
                    raise _NotStrict
                frame.expect = _VALUE
            elif c == '"':
                if frame.expect in (_KEY_OR_END, _KEY):
                    self._string_is_key = True
                elif frame.expect in (_VALUE, _VALUE_OR_END):
                    self._string_is_key = False
                else:
                    raise _NotStrict
                self._string = []
            elif frame.expect in (_VALUE, _VALUE_OR_END) and (c.isalnum() or c == "-"):
                self._word, self._word_ended = c, False
            else:
                raise _NotStrict

    def _in_string(self, text: str, i: int) -> int:
        """Read string characters from ``i``; the position after them."""
        pieces = self._string
        assert pieces is not None
        if self._escape:
            return self._in_escape(text, i)
        c = text[i]
        if c == '"':
            self._close_high()
            value = "".join(pieces)
            self._string = None
            frame = self._stack[-1]
            if self._string_is_key:
                frame.key = value
                frame.expect = _COLON
            else:
                self._set(value)
            return i + 1
        if c == "\\":
            self._escape = "\\"
            return i + 1
        match = _PLAIN.match(text, i)
        assert match is not None
        self._close_high()
        pieces.append(match.group())
        return match.end()

    def _in_escape(self, text: str, i: int) -> int:
        pieces = self._string
        assert pieces is not None
        if self._escape == "\\":
            c = text[i]
            i += 1
            if c != "u":
                decoded = _ESCAPES.get(c)
                if decoded is None:
                    raise _NotStrict
                self._escape = ""
                self._close_high()
                pieces.append(decoded)
                return i
            self._escape = "\\u"
        take = min(6 - len(self._escape), len(text) - i)
        self._escape += text[i : i + take]
        i += take
        if len(self._escape) < 6:
            return i
        digits, self._escape = self._escape[2:], ""
        if not all(d in _HEX for d in digits):
            raise _NotStrict
        code = int(digits, 16)
        if 0xDC00 <= code <= 0xDFFF and self._high is not None:
            pair = (self._high + chr(code)).encode("utf-16", "surrogatepass")
            pieces.append(pair.decode("utf-16"))
            self._high = None
        elif 0xD800 <= code <= 0xDBFF:
            self._close_high()
            self._high = chr(code)
        else:
            self._close_high()
            pieces.append("\ufffd" if 0xDC00 <= code <= 0xDFFF else chr(code))
        return i

    def _close_high(self) -> None:
        """A high surrogate not followed by its low half stands for U+FFFD."""
        if self._high is not None:
            assert self._string is not None
            self._string.append("\ufffd")
            self._high = None

    def _end_word(self) -> None:
        word = self._word
        assert word is not None
        self._word = None
        if word in _LITERALS:
            self._set(_LITERALS[word])
        elif _NUMBER.fullmatch(word):
            self._set(int(word) if word.lstrip("-").isdigit() else float(word))
        else:
            raise _NotStrict

    def _delimiter(self, c: str) -> None:
        if not self._stack:
            raise _NotStrict
        frame = self._stack[-1]
        if c == ",":
            if frame.expect != _COMMA_OR_END:
                raise _NotStrict
            frame.expect = _KEY if isinstance(frame.value, dict) else _VALUE
            return
        is_object = isinstance(frame.value, dict)
        if (c == "}") != is_object:
            raise _NotStrict
        allowed = (_KEY_OR_END, _COMMA_OR_END) if is_object else (_VALUE_OR_END, _COMMA_OR_END)
        if frame.expect not in allowed:
            raise _NotStrict
        self._stack.pop()
        if self._stack:
            self._set(frame.value)
        else:
            self._done = True

    def _set(self, value: Any) -> None:
        frame = self._stack[-1]
        if isinstance(frame.value, dict):
            assert frame.key is not None
            frame.value[frame.key] = value
            frame.key = None
        else:
            frame.value.append(value)
        frame.expect = _COMMA_OR_END

    # Snapshots ----------------------------------------------------------------------------

    def _build(self) -> dict[str, Any] | None:
        """The value so far: each open container copied (closed ones are final and shared),
        with the value being read put in its place."""
        if self._root is None:
            return None
        if self._done:
            return self._root
        child: Any = None
        has_child = False
        if self._string is not None and not self._string_is_key:
            child, has_child = "".join(self._string), True
        elif self._word in _LITERALS:
            child, has_child = _LITERALS[self._word], True
        for frame in reversed(self._stack):
            copy: dict[str, Any] | list[Any]
            if isinstance(frame.value, dict):
                copy = dict(frame.value)
                if has_child and frame.key is not None:
                    copy[frame.key] = child
            else:
                copy = list(frame.value)
                if has_child:
                    copy.append(child)
            child, has_child = copy, True
        assert isinstance(child, dict)
        return child


class ArgumentStreams:
    """Puts the parsed partial arguments on one attempt's ``ToolCallDelta`` events."""

    def __init__(self) -> None:
        self._calls: dict[int, StreamingArguments] = {}

    def annotate(self, events: list[DeltaEvent]) -> list[DeltaEvent]:
        """``events`` with each ``ToolCallDelta`` carrying ``partial_arguments`` (the same
        list when it holds none)."""
        out: list[DeltaEvent] | None = None
        for pos, event in enumerate(events):
            if type(event) is not ToolCallDelta:
                continue
            parser = self._calls.get(event.index)
            if parser is None:
                parser = self._calls[event.index] = StreamingArguments()
            partial = parser.feed(event.arguments)
            if partial is None:
                continue
            if out is None:
                out = list(events)
            out[pos] = ToolCallDelta(
                event.call_id, event.index, event.id, event.name, event.arguments, partial
            )
        return events if out is None else out


class ForcedReplyDeltas:
    """Withholds the text of a reply that carries a tool call forced through structured output.

    That text is the JSON envelope sluice asked the model for (``{"name": ..., "parameters":
    ...}``), not something the caller asked to read, and it may still be repaired, corrected or
    retried; streaming it would show the caller our mechanism instead of their tool call. So
    its ``TextDelta`` events are dropped here, and the Supervisor sends the finalized calls as
    ``ToolCallDelta`` events right before ``Completed``. Reasoning and every other event pass.
    """

    def annotate(self, events: list[DeltaEvent]) -> list[DeltaEvent]:
        """``events`` without the ``TextDelta`` ones (the same list when it holds none)."""
        if not any(type(event) is TextDelta for event in events):
            return events
        return [event for event in events if type(event) is not TextDelta]


def whole_call_deltas(call_id: str, calls: Iterable[ToolCall]) -> list[ToolCallDelta]:
    """Finished tool calls as the ``ToolCallDelta`` events a stream would end up with: one per
    call, whole (id, name, all the arguments), with the arguments parsed (empty ones mean
    ``{}``; arguments that are not a JSON object give None). Used where a call's tool calls
    reach the consumer only once they are final: a cache replay, a forced call."""
    deltas = []
    for index, call in enumerate(calls):
        try:
            parsed = orjson.loads(call.arguments) if call.arguments.strip() else {}
        except orjson.JSONDecodeError:
            parsed = None
        partial = parsed if isinstance(parsed, dict) else None
        deltas.append(ToolCallDelta(call_id, index, call.id, call.name, call.arguments, partial))
    return deltas
