"""Repair of broken JSON as language models write it, and parsing of JSON that is still streaming.

Valid JSON takes the fast path (orjson) and comes back untouched. Anything else goes through a
tolerant recursive-descent parser written for the mistakes models make: code fences, prose
around the JSON, trailing or missing commas, single quotes, unquoted keys, comments, Python
literals (``True``/``False``/``None``), unclosed strings, arrays and objects, several JSON values
in a row, and JSON encoded a second time as a JSON string.

Guarantees:

* ``repair_json(text).value == json.loads(text)`` for every valid JSON text (numbers included).
* The only exception raised on purpose is :class:`RepairError`; any other is a bug.
* Time is linear in the length of the input (each character is looked at a bounded number of
  times); nesting deeper than :data:`MAX_DEPTH` and inputs longer than :data:`MAX_LENGTH` are
  refused with :class:`RepairError` instead of exhausting the stack or the clock.
* Values that JSON cannot carry never come out: ``NaN`` and infinities become ``None`` and lone
  UTF-16 surrogates become U+FFFD, so the result always serializes back to JSON.

We chose our own parser over the json-repair library: its pure-Python parser recurses (deep
nesting raised RecursionError) and was slow on a long unclosed string (benchmarks/README.md
has the figures), it has no mode for
partial JSON whose result only grows as more text arrives, and several of its answers are wrong
for tool calls (``None`` becomes the string ``"None"``, prose becomes ``""``, ``{"a"`` becomes
``["a"]``, two objects of the same shape collapse into the second).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Final

import attrs

__all__ = [
    "MAX_DEPTH",
    "MAX_LENGTH",
    "PartialJson",
    "RepairError",
    "Repaired",
    "TRUNCATION_REPAIRS",
    "parse_partial",
    "repair_arguments",
    "repair_json",
]

MAX_DEPTH: Final = 200
"""Deepest nesting the tolerant parser follows (valid JSON is limited only by orjson)."""
MAX_LENGTH: Final = 4_000_000
"""Longest text, in characters, that is repaired at all."""

TRUNCATION_REPAIRS: Final = frozenset(
    {"unclosed_string", "unclosed_object", "unclosed_array", "dangling_key", "truncated_literal"}
)
"""Repairs that mean the text ended too early (for example cut off by ``max_tokens``)."""


class RepairError(ValueError):
    """The text holds no JSON value that could be recovered (the message says why)."""


@attrs.frozen
class Repaired:
    """A recovered JSON value and the repairs it needed, in the order first met.

    ``repairs`` holds short codes for logs and metrics (``code_fence``, ``trailing_comma``,
    ``single_quotes``, ``unquoted_key``, ``comment``, ``python_literal``, ``unclosed_string``...);
    it is empty when the text was valid JSON.
    """

    value: Any
    repairs: tuple[str, ...] = ()

    @property
    def truncated(self) -> bool:
        """True when the text looked cut off: something was still open at its end."""
        return any(r in TRUNCATION_REPAIRS for r in self.repairs)


class _Incomplete:
    """A number or literal that touches the end of partial text: it may still change."""


_INCOMPLETE: Final = _Incomplete()
_WS: Final = frozenset(" \t\r\n\ufeff")
_NUMBER: Final = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")
_STRICT_NUMBER: Final = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?")
_VALUE_WORD: Final = re.compile(r"[^,{}\[\]\r\n\"]*")
_KEY_WORD: Final = re.compile(r"[^,:{}\[\]\s\"']*")
_PLAIN: Final = {'"': re.compile(r'[^"\\]*'), "'": re.compile(r"[^'\\]*")}
_ESCAPES: Final = {
    '"': '"',
    "\\": "\\",
    "/": "/",
    "'": "'",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
}
_STRING_END: Final = frozenset(",:}]\r\n/#\"'")
_LITERALS: Final[dict[str, tuple[Any, str | None]]] = {
    "true": (True, None),
    "false": (False, None),
    "null": (None, None),
    "True": (True, "python_literal"),
    "False": (False, "python_literal"),
    "None": (None, "python_literal"),
    "NaN": (None, "non_json_number"),
    "Infinity": (None, "non_json_number"),
    "-Infinity": (None, "non_json_number"),
    "+Infinity": (None, "non_json_number"),
    "undefined": (None, "bare_word"),
}
_COMPLETABLE: Final = ("true", "false", "null")


class _Parser:
    """One pass over ``text`` from a position; ``partial`` changes only what happens at its end."""

    def __init__(self, text: str, *, partial: bool) -> None:
        self.s = text
        self.n = len(text)
        self.i = 0
        self.partial = partial
        self.repairs: list[str] = []
        self.depth = 0

    def note(self, code: str) -> None:
        # Open structures at the end of partial text are expected, not repairs.
        if self.partial and code in TRUNCATION_REPAIRS:
            return
        if code not in self.repairs:
            self.repairs.append(code)

    def skip(self) -> None:
        """Skip whitespace and comments (``//``, ``/* */``, ``#``)."""
        s, n = self.s, self.n
        while self.i < n:
            c = s[self.i]
            if c in _WS:
                self.i += 1
            elif (c == "/" and s.startswith("//", self.i)) or c == "#":
                end = s.find("\n", self.i)
                self.i = n if end < 0 else end + 1
                self.note("comment")
            elif c == "/" and s.startswith("/*", self.i):
                end = s.find("*/", self.i + 2)
                self.i = n if end < 0 else end + 2
                self.note("comment")
            else:
                return

    def at_end(self) -> bool:
        return self.i >= self.n

    def value(self) -> Any:
        """Parse one value at the current position (which is not whitespace and not the end)."""
        c = self.s[self.i]
        if c == "{":
            return self.object()
        if c == "[":
            return self.array()
        if c == '"' or c == "'":
            return self.string(c, key=False)
        if c.isdigit() or c in "-+.":
            return self.number()
        return self.word()

    def enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise RepairError(f"JSON nested deeper than {MAX_DEPTH} levels")

    def object(self) -> dict[str, Any]:
        self.enter()
        self.i += 1
        result: dict[str, Any] = {}
        after_value = False
        while True:
            self.skip()
            if self.at_end():
                self.note("unclosed_object")
                break
            c = self.s[self.i]
            if c == "}":
                self.i += 1
                break
            if c == "]":
                self.note("unclosed_object")
                break
            if c == ",":
                self.i += 1
                self.skip()
                if (not self.at_end() and self.s[self.i] == "}") or not after_value:
                    self.note("trailing_comma")
                after_value = False
                continue
            if after_value:
                self.note("missing_comma")
            if c in "{[":
                self.note("stray_value")
                self.value()
                after_value = True
                continue
            key = self.key()
            self.skip()
            if self.at_end():
                self.note("dangling_key")
                break
            if self.s[self.i] in ":=":
                self.i += 1
            else:
                self.note("missing_colon")
            self.skip()
            if self.at_end():
                self.note("dangling_key")
                break
            if self.s[self.i] in ",}]":
                self.note("missing_value")
                result[key] = None
            else:
                item = self.value()
                if item is not _INCOMPLETE:
                    result[key] = item
            after_value = True
        self.depth -= 1
        return result

    def key(self) -> str:
        c = self.s[self.i]
        if c == '"' or c == "'":
            return self.string(c, key=True)
        match = _KEY_WORD.match(self.s, self.i)
        assert match is not None  # the pattern matches the empty string
        if not match.group():
            # A character that cannot start a key (":"): treat it as an empty key.
            self.i += 1
            self.note("missing_key")
            return ""
        self.i = match.end()
        self.note("unquoted_key")
        return match.group()

    def array(self) -> list[Any]:
        self.enter()
        self.i += 1
        result: list[Any] = []
        after_value = False
        while True:
            self.skip()
            if self.at_end():
                self.note("unclosed_array")
                break
            c = self.s[self.i]
            if c == "]":
                self.i += 1
                break
            if c == "}":
                self.note("unclosed_array")
                break
            if c == ",":
                self.i += 1
                self.skip()
                if (not self.at_end() and self.s[self.i] == "]") or not after_value:
                    self.note("trailing_comma")
                after_value = False
                continue
            if c == ":":
                self.i += 1
                self.note("stray_colon")
                continue
            if after_value:
                self.note("missing_comma")
            item = self.value()
            if item is not _INCOMPLETE:
                result.append(item)
            after_value = True
        self.depth -= 1
        return result

    def string(self, quote: str, *, key: bool) -> str:
        if quote == "'":
            self.note("single_quotes")
        s, n = self.s, self.n
        plain = _PLAIN[quote]
        self.i += 1
        parts: list[str] = []
        while True:
            match = plain.match(s, self.i)
            assert match is not None
            chunk = match.group()
            if chunk:
                if not self.partial and ("\n" in chunk or "\r" in chunk or "\t" in chunk):
                    self.note("control_character")
                parts.append(chunk)
            self.i = match.end()
            if self.i >= n:
                self.note("unclosed_string")
                break
            c = s[self.i]
            if c == "\\":
                self.escape(parts)
                continue
            # A quote: the end, unless text goes on right after it (an unescaped inner quote).
            j = self.i + 1
            while j < n and s[j] in " \t":
                j += 1
            if key or j >= n or s[j] in _STRING_END:
                self.i += 1
                break
            self.note("inner_quote")
            parts.append(c)
            self.i += 1
        return _clean("".join(parts), self)

    def escape(self, parts: list[str]) -> None:
        s, n = self.s, self.n
        if self.i + 1 >= n:
            # A lone backslash at the end: dropped, so partial results only ever grow.
            self.i = n
            self.note("unclosed_string")
            return
        c = s[self.i + 1]
        if c in _ESCAPES:
            parts.append(_ESCAPES[c])
            self.i += 2
            return
        if c == "u":
            digits = s[self.i + 2 : self.i + 6]
            if len(digits) == 4 and all(d in "0123456789abcdefABCDEF" for d in digits):
                parts.append(chr(int(digits, 16)))
                self.i += 6
                return
            if self.i + 6 > n and all(d in "0123456789abcdefABCDEF" for d in digits):
                self.i = n  # an escape cut off by the end of the text
                self.note("unclosed_string")
                return
        self.note("invalid_escape")
        parts.append(c)
        self.i += 2

    def number(self) -> Any:
        s = self.s
        match = _NUMBER.match(s, self.i)
        end = match.end() if match else self.i
        if match is None or (end < self.n and (s[end].isalpha() or s[end] == "_")):
            return self.word()
        if self.partial and end >= self.n:
            self.i = end
            return _INCOMPLETE
        text = match.group()
        self.i = end
        if not _STRICT_NUMBER.fullmatch(text):
            self.note("lenient_number")
        if text.lstrip("+-").isdigit():
            return int(text)
        number = float(text)
        if not math.isfinite(number):
            self.note("non_json_number")
            return None
        return number

    def word(self) -> Any:
        match = _VALUE_WORD.match(self.s, self.i)
        assert match is not None
        raw = match.group()
        if not raw:
            # A character no value can start with (a stray "}" or "]" is handled by callers).
            self.i += 1
            self.note("stray_character")
            return _INCOMPLETE
        self.i = match.end()
        word = raw.strip()
        touches_end = self.i >= self.n
        if word in _LITERALS:
            value, code = _LITERALS[word]
            if code:
                self.note(code)
            return value
        if touches_end and word and any(lit.startswith(word) for lit in _COMPLETABLE):
            if self.partial:
                return _INCOMPLETE
            self.note("truncated_literal")
            return {"t": True, "f": False, "n": None}[word[0]]
        if self.partial and touches_end:
            return _INCOMPLETE
        self.note("bare_word")
        return word


def _clean(text: str, parser: _Parser) -> str:
    """Replace lone UTF-16 surrogates (which no JSON encoder accepts) by U+FFFD."""
    if not any("\ud800" <= c <= "\udfff" for c in text):
        return text
    fixed = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if fixed.count("\ufffd") > text.count("\ufffd"):
        parser.note("lone_surrogate")
    return fixed


def _strip_fence(text: str) -> tuple[str, bool]:
    """The body of the first Markdown code fence, if the text has one before its JSON.

    Backticks after the first bracket are inside the JSON (a string holding a fence, say),
    not a fence around it.
    """
    start = text.find("```")
    if start < 0:
        return text, False
    if 0 <= _first_opener(text) < start:
        return text, False
    line_end = text.find("\n", start + 3)
    if line_end < 0:
        body_start = start + 3
        while body_start < len(text) and (text[body_start].isalnum() or text[body_start] in "_-"):
            body_start += 1
    else:
        body_start = line_end + 1
    end = text.find("```", body_start)
    return text[body_start : len(text) if end < 0 else end], True


def _first_opener(text: str) -> int:
    braces = [p for p in (text.find("{"), text.find("[")) if p >= 0]
    return min(braces) if braces else -1


def _parse(text: str, *, partial: bool) -> Repaired:
    if len(text) > MAX_LENGTH:
        raise RepairError(f"text of {len(text)} characters is longer than {MAX_LENGTH}")
    stripped = text.strip().lstrip("\ufeff")
    if not stripped:
        raise RepairError("the text is empty")
    # The standard library's parser keeps integers of any size exact (orjson turns those
    # beyond 64 bits into floats); NaN and infinities are refused so they take the slow path.
    if not partial and "\\ud" not in stripped.lower():
        try:
            return Repaired(json.loads(stripped, parse_constant=_refuse_constant))
        except (ValueError, RecursionError):
            pass
    body, fenced = _strip_fence(stripped)
    if fenced and _first_opener(body) < 0 and _first_opener(stripped) >= 0:
        body, fenced = stripped, False
    parser = _Parser(body, partial=partial)
    if fenced:
        parser.note("code_fence")
    start = _first_opener(body)
    if start < 0 or (body[0] in "\"'" and _is_one_string(body)):
        return _scalar(parser)
    if body[:start].strip():
        parser.note("surrounding_text")
    parser.i = start
    values = [parser.value()]
    opener = body[start]
    while True:
        parser.skip()
        while not parser.at_end() and body[parser.i] == ",":
            parser.i += 1
            parser.skip()
        if parser.at_end() or body[parser.i] != opener:
            break
        values.append(parser.value())
    rest = body[parser.i :].strip()
    if rest:
        parser.note("extra_closer" if not rest.strip("}]") else "surrounding_text")
    if len(values) > 1:
        parser.note("multiple_values")
        return Repaired(values, tuple(parser.repairs))
    return Repaired(values[0], tuple(parser.repairs))


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _is_one_string(body: str) -> bool:
    """Whether ``body`` is one quoted string and nothing else (possibly cut off)."""
    probe = _Parser(body, partial=True)
    try:
        probe.string(body[0], key=False)
    except RepairError:
        return False
    probe.skip()
    return probe.at_end()


def _scalar(parser: _Parser) -> Repaired:
    """Text without ``{`` or ``[``: accepted only when it is exactly one scalar value."""
    parser.skip()
    if parser.at_end():
        raise RepairError("the text holds only comments")
    c = parser.s[parser.i]
    value: Any
    if c in "\"'":
        value = parser.string(c, key=False)
    elif c.isdigit() or c in "-+.":
        value = parser.number()
    else:
        match = _VALUE_WORD.match(parser.s, parser.i)
        word = match.group().strip() if match else ""
        if word not in _LITERALS:
            raise RepairError("no JSON value found in the text")
        value = parser.word()
    parser.skip()
    if value is _INCOMPLETE or not parser.at_end() or "bare_word" in parser.repairs:
        raise RepairError("no JSON value found in the text")
    return Repaired(value, tuple(parser.repairs))


def _unwrap(result: Repaired, *, partial: bool) -> Repaired:
    """Decode JSON that was encoded again as a JSON string (up to three times)."""
    current = result
    for _ in range(3):
        value = current.value
        if not isinstance(value, str) or value.strip()[:1] not in ("{", "[", '"'):
            break
        try:
            inner = _parse(value, partial=partial)
        except RepairError:
            break
        if not isinstance(inner.value, dict | list | str) or inner.value == value:
            break
        repairs = [*current.repairs, "double_encoded"]
        repairs += [r for r in inner.repairs if r not in repairs]
        current = Repaired(inner.value, tuple(dict.fromkeys(repairs)))
    return current if isinstance(current.value, dict | list) else result


def repair_json(text: str, *, unwrap_strings: bool = True) -> Repaired:
    """Recover the JSON value in ``text``, repairing what models commonly break.

    Several top-level values of the same kind in a row (``{...}{...}`` or ``{...}, {...}``)
    come back as a list. Text without any ``{`` or ``[`` is accepted only when it is exactly one
    scalar (``42``, ``"x"``, ``'x'``, ``true``, ``None``). With ``unwrap_strings``, a JSON string
    whose content is itself a JSON object or array is decoded (repair ``double_encoded``).

    Raises:
        RepairError: no value could be recovered (empty text, prose only, nesting too deep,
            text too long).
    """
    result = _parse(text, partial=False)
    return _unwrap(result, partial=False) if unwrap_strings else result


def repair_arguments(text: str) -> Repaired:
    """Recover tool-call arguments: always a JSON object.

    Empty or blank text and ``null`` mean no arguments (``{}``); double-encoded arguments are
    decoded.

    Raises:
        RepairError: nothing recoverable, or the value is not an object (a list, which is what
            several calls fused into one look like, or a scalar).
    """
    if not text.strip():
        return Repaired({}, ("empty_arguments",))
    result = repair_json(text)
    if result.value is None:
        return Repaired({}, (*result.repairs, "null_arguments"))
    if not isinstance(result.value, dict):
        kind = "a list" if isinstance(result.value, list) else f"a {_kind(result.value)}"
        raise RepairError(f"the arguments are {kind}, not a JSON object")
    return result


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    return "string" if isinstance(value, str) else type(value).__name__


def parse_partial(text: str) -> Any | None:
    """The value of JSON text that may still be streaming, or None when there is nothing yet.

    What is open is closed; strings cut off are included as far as they go, while numbers and
    literals touching the end (which may still change, ``1`` becoming ``12``) and keys without
    a value are left out, so that as text is appended results only grow. Never raises.
    """
    try:
        result = _unwrap(_parse(text, partial=True), partial=True)
    except RepairError:
        return None
    return None if result.value is _INCOMPLETE else result.value


@attrs.define
class PartialJson:
    """Accumulates streamed fragments of one JSON text (a tool call's arguments).

    Each :meth:`feed` re-parses the whole buffer, which is linear in its length; tool arguments
    are small, and ``every`` characters of growth can be required between parses. The runtime
    uses :class:`~sluice._tools.streaming.StreamingArguments` instead, which reads each fragment
    once (and falls back to this parser's rules for text that is not strict JSON).
    """

    every: int = 1
    """Parse only when the buffer grew by at least this many characters since the last parse."""
    text: str = ""
    value: Any = None
    """The last parsed value (None before the first)."""
    _parsed_at: int = attrs.field(default=0, init=False)

    def feed(self, fragment: str) -> Any | None:
        """Append ``fragment``; return the newly parsed value, or None when it was not parsed."""
        self.text += fragment
        if len(self.text) - self._parsed_at < self.every:
            return None
        self._parsed_at = len(self.text)
        value = parse_partial(self.text)
        if value is None:
            return None
        self.value = value
        return value
