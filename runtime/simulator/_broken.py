"""JSON text broken the ways weak models break it. Pure: no trio, no clock, no global state.

:func:`break_json` renders a JSON value as text that a strict parser rejects (or, for
``no_envelope``, as valid JSON of the wrong shape), so a client's repair path can be tested end
to end. The kinds::

    fences          ```json fences around the text
    prose           a sentence before and after the text
    trailing_comma  a comma after the last member of every non-empty object and array
    single_quotes   every string and key in single quotes
    unquoted_keys   object keys without quotes (those that are identifiers)
    unclosed        the closing brackets at the end are missing
    no_envelope     the tool-call envelope ({"name", "parameters"}, and an ``item`` wrapper
                    around it) is dropped: only the arguments remain
    double_encoded  the JSON text encoded once more as a JSON string
"""

from __future__ import annotations

import re
from typing import Any

import orjson

__all__ = ["KINDS", "applicable_kinds", "break_json", "strip_envelope"]

KINDS: tuple[str, ...] = (
    "fences",
    "prose",
    "trailing_comma",
    "single_quotes",
    "unquoted_keys",
    "unclosed",
    "no_envelope",
    "double_encoded",
)
"""Every way :func:`break_json` knows, in the order the fault dice index them."""

FALLBACK = "prose"
"""The kind used when the one asked for cannot break the value (it is always applicable)."""

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def applicable_kinds(value: Any) -> tuple[str, ...]:
    """The kinds of :data:`KINDS` that change ``value``'s text, in :data:`KINDS` order."""
    found = _Shape()
    found.scan(value)
    usable = {
        "trailing_comma": found.non_empty,
        "single_quotes": found.strings,
        "unquoted_keys": found.keys,
        "unclosed": isinstance(value, dict | list),
        "no_envelope": strip_envelope(value) is not None,
    }
    return tuple(kind for kind in KINDS if usable.get(kind, True))


def break_json(value: Any, kind: str) -> str:
    """``value`` as JSON text broken the way ``kind`` names.

    A kind that cannot break this value (``unquoted_keys`` without any object key, say) falls
    back to :data:`FALLBACK`.

    Raises:
        ValueError: ``kind`` is not one of :data:`KINDS`.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown broken-JSON kind {kind!r}; expected one of {', '.join(KINDS)}")
    if kind not in applicable_kinds(value):
        kind = FALLBACK
    text = orjson.dumps(value).decode()
    match kind:
        case "fences":
            return f"```json\n{text}\n```"
        case "prose":
            return f"Sure! Here is the JSON you asked for:\n{text}\nLet me know if you need more."
        case "trailing_comma":
            return _emit(value, trailing_comma=True)
        case "single_quotes":
            return _emit(value, single_quotes=True)
        case "unquoted_keys":
            return _emit(value, bare_keys=True)
        case "unclosed":
            return text.rstrip("]}")
        case "no_envelope":
            return orjson.dumps(strip_envelope(value)).decode()
        case _:
            return orjson.dumps(text).decode()


def strip_envelope(value: Any) -> Any | None:
    """What remains of ``value`` without its tool-call envelope, or None if it has none.

    The envelope is an object ``{"name": ..., "parameters": ...}`` (or ``"arguments"``), maybe
    inside ``{"item": ...}``; a list loses the envelope of each element that has one.
    """
    if isinstance(value, dict):
        if value.keys() == {"item"}:
            return strip_envelope(value["item"])
        if "name" in value:
            for key in ("parameters", "arguments"):
                if key in value:
                    return value[key]
        return None
    if isinstance(value, list):
        inner = [strip_envelope(item) for item in value]
        if all(x is None for x in inner):
            return None
        return [item if x is None else x for item, x in zip(value, inner, strict=True)]
    return None


class _Shape:
    """What a value holds: strings (keys too), identifier keys, non-empty containers."""

    def __init__(self) -> None:
        self.strings = self.keys = self.non_empty = False

    def scan(self, value: Any) -> None:
        if isinstance(value, str):
            self.strings = True
        elif isinstance(value, dict):
            if value:
                self.non_empty = self.strings = True
                self.keys = self.keys or any(map(_IDENTIFIER.fullmatch, value))
            for item in value.values():
                self.scan(item)
        elif isinstance(value, list):
            self.non_empty = self.non_empty or bool(value)
            for item in value:
                self.scan(item)


def _emit(
    value: Any,
    *,
    trailing_comma: bool = False,
    single_quotes: bool = False,
    bare_keys: bool = False,
) -> str:
    """JSON-like text of ``value`` with the given faults; scalars as orjson writes them."""

    def string(text: str) -> str:
        encoded = orjson.dumps(text).decode()
        if not single_quotes:
            return encoded
        inner = encoded[1:-1].replace('\\"', '"').replace("'", "\\'")
        return f"'{inner}'"

    def key(name: str) -> str:
        return name if bare_keys and _IDENTIFIER.fullmatch(name) else string(name)

    def emit(item: Any) -> str:
        if isinstance(item, str):
            return string(item)
        if isinstance(item, dict):
            if not item:
                return "{}"
            members = ",".join(f"{key(k)}:{emit(v)}" for k, v in item.items())
            return "{" + members + ("," if trailing_comma else "") + "}"
        if isinstance(item, list):
            if not item:
                return "[]"
            return "[" + ",".join(map(emit, item)) + ("," if trailing_comma else "") + "]"
        return orjson.dumps(item).decode()

    return emit(value)
