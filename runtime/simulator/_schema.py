"""Deterministic example values for JSON schemas (tool-call arguments). Pure.

Supported: ``type`` (one or a list), ``properties``/``required``, ``items``/``prefixItems``,
``minItems``/``maxItems``/``uniqueItems``, ``enum``, ``const``, ``anyOf``/``oneOf`` (one branch
is picked), ``allOf`` (branches merged), local ``$ref`` (``#/$defs/...``), numeric bounds
(``minimum``, ``maximum``, both ``exclusive*`` spellings, ``multipleOf``), string
``minLength``/``maxLength`` and common ``format``s. ``pattern`` is not honoured. Objects get
every listed property (only the required ones past a nesting depth, so recursive schemas end).
"""

from __future__ import annotations

import math
import random
import uuid
from collections.abc import Mapping
from typing import Any

from ._text import WORDS

__all__ = ["SchemaError", "example_for_schema"]

_FULL_DEPTH = 6
"""Below this depth objects carry optional properties and arrays 1-3 items."""
_MAX_DEPTH = 40
"""Deeper than this the schema is taken to recurse without end."""
_MAX_SIZE = 10_000
"""Largest ``minItems`` or ``minLength`` honoured; a client cannot make the server build more."""


class SchemaError(ValueError):
    """The schema cannot be satisfied or uses something this generator does not know."""


def example_for_schema(schema: Any, *, seed: int) -> Any:
    """A JSON value valid against ``schema`` (within the supported subset), fixed by ``seed``.

    Raises:
        SchemaError: contradictory bounds, an empty enum, a non-local ``$ref``, an unknown
            ``type``, or recursion that never bottoms out.
    """
    try:
        return _Generator(schema, random.Random(seed)).value(schema, 0)
    except SchemaError:
        raise
    except (TypeError, ValueError, AttributeError, KeyError, IndexError) as exc:
        # The schema comes from a client; a malformed one must not take the server down.
        raise SchemaError(f"malformed schema ({type(exc).__name__}: {exc})") from None


class _Generator:
    def __init__(self, root: Any, rng: random.Random) -> None:
        self._root = root
        self._rng = rng

    def value(self, schema: Any, depth: int) -> Any:
        if depth > _MAX_DEPTH:
            raise SchemaError("schema nests too deeply (a $ref that always recurses?)")
        if schema is True:
            return self._words(1, 2)
        if schema is False or not isinstance(schema, Mapping):
            raise SchemaError(f"a schema must be an object or true, got {schema!r}")
        if "$ref" in schema:
            return self.value(self._resolve(schema["$ref"]), depth + 1)
        if "const" in schema:
            return schema["const"]
        if "enum" in schema:
            choices = schema["enum"]
            if not isinstance(choices, list) or not choices:
                raise SchemaError("'enum' must be a non-empty array")
            return self._rng.choice(choices)
        for key in ("anyOf", "oneOf"):
            if key in schema:
                branches = schema[key]
                if not isinstance(branches, list) or not branches:
                    raise SchemaError(f"{key!r} must be a non-empty array")
                useful = [b for b in branches if not _is_null(b)] or branches
                return self.value(self._rng.choice(useful), depth + 1)
        if "allOf" in schema:
            return self.value(self._merge(schema), depth + 1)
        kind = _kind(schema)
        if kind == "object":
            return self._object(schema, depth)
        if kind == "array":
            return self._array(schema, depth)
        if kind == "string":
            return self._string(schema)
        if kind == "integer":
            return self._integer(schema)
        if kind == "number":
            return self._number(schema)
        if kind == "boolean":
            return self._rng.random() < 0.5
        if kind == "null":
            return None
        raise SchemaError(f"unknown type {kind!r}")

    def _resolve(self, ref: Any) -> Any:
        if not isinstance(ref, str) or not ref.startswith("#"):
            raise SchemaError(f"only local $ref ('#/...') is supported, got {ref!r}")
        node = self._root
        for raw in ref[1:].split("/")[1:]:
            key = raw.replace("~1", "/").replace("~0", "~")
            if isinstance(node, Mapping) and key in node:
                node = node[key]
            elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
                node = node[int(key)]
            else:
                raise SchemaError(f"$ref {ref!r} points nowhere")
        return node

    def _merge(self, schema: Mapping[str, Any]) -> dict[str, Any]:
        merged: dict[str, Any] = {k: v for k, v in schema.items() if k != "allOf"}
        for branch in schema["allOf"]:
            while isinstance(branch, Mapping) and "$ref" in branch:
                branch = self._resolve(branch["$ref"])
            if not isinstance(branch, Mapping):
                raise SchemaError("'allOf' branches must be objects")
            for key, val in branch.items():
                if key == "properties":
                    merged["properties"] = {**merged.get("properties", {}), **val}
                elif key == "required":
                    merged["required"] = [*merged.get("required", []), *val]
                else:
                    merged.setdefault(key, val)
        return merged

    def _object(self, schema: Mapping[str, Any], depth: int) -> dict[str, Any]:
        properties: Mapping[str, Any] = schema.get("properties") or {}
        required: list[str] = list(schema.get("required") or [])
        out: dict[str, Any] = {}
        for name, sub in properties.items():
            if depth < _FULL_DEPTH or name in required:
                out[name] = self.value(sub, depth + 1)
        extra = schema.get("additionalProperties", True)
        for name in required:
            if name not in out:
                out[name] = self.value(extra if isinstance(extra, Mapping) else True, depth + 1)
        return out

    def _array(self, schema: Mapping[str, Any], depth: int) -> list[Any]:
        low = _size(schema, "minItems")
        high = schema.get("maxItems")
        if high is not None and low > high:
            raise SchemaError(f"minItems {low} > maxItems {high}")
        count = self._rng.randint(1, 3) if depth < _FULL_DEPTH else 0
        count = max(low, count if high is None else min(count, int(high)))
        items = schema.get("items", True)
        prefix = schema.get("prefixItems") or (items if isinstance(items, list) else [])
        rest = items if not isinstance(items, list) else schema.get("additionalItems", True)
        out: list[Any] = []
        for i in range(count):
            sub = prefix[i] if i < len(prefix) else rest
            item = self.value(sub, depth + 1)
            for _ in range(8):
                if not schema.get("uniqueItems") or item not in out:
                    break
                item = self.value(sub, depth + 1)
            out.append(item)
        return out

    def _string(self, schema: Mapping[str, Any]) -> str:
        rng = self._rng
        match schema.get("format"):
            case "date":
                return f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
            case "date-time":
                return f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T09:30:00Z"
            case "time":
                return f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:00Z"
            case "email":
                return f"{rng.choice(WORDS)}@example.com"
            case "uri" | "url" | "iri" | "uri-reference":
                return f"https://example.com/{rng.choice(WORDS)}"
            case "hostname":
                return f"{rng.choice(WORDS)}.example.com"
            case "ipv4":
                return f"192.0.2.{rng.randint(1, 254)}"
            case "ipv6":
                return f"2001:db8::{rng.randint(1, 0xFFFF):x}"
            case "uuid":
                return str(uuid.UUID(int=rng.getrandbits(128), version=4))
        text = self._words(1, 3)
        low = _size(schema, "minLength")
        while len(text) < low:
            text += " " + rng.choice(WORDS)
        high = schema.get("maxLength")
        if high is not None:
            if low > high:
                raise SchemaError(f"minLength {low} > maxLength {high}")
            text = text[: int(high)].rstrip() or text[: int(high)]
            text = text.ljust(low, "x")
        return text

    def _integer(self, schema: Mapping[str, Any]) -> int:
        low_f, low_x, high_f, high_x = _bounds(schema)
        low = None if low_f is None else (math.floor(low_f) + 1 if low_x else math.ceil(low_f))
        high = None if high_f is None else (math.ceil(high_f) - 1 if high_x else math.floor(high_f))
        if low is None and high is None:
            low, high = 1, 100
        elif low is None:
            assert high is not None
            low = 1 if high >= 1 else high - 99
        elif high is None:
            high = low + 99
        if low > high:
            raise SchemaError(f"no integer between {low_f} and {high_f}")
        step = schema.get("multipleOf")
        if isinstance(step, int) and not isinstance(step, bool) and step > 0:
            first, last = -(-low // step), high // step
            if first > last:
                raise SchemaError(f"no multiple of {step} between {low} and {high}")
            return step * self._rng.randint(first, last)
        return self._rng.randint(low, high)

    def _number(self, schema: Mapping[str, Any]) -> float:
        low_f, low_x, high_f, high_x = _bounds(schema)
        low = 0.0 if low_f is None else low_f
        high = (max(low, 0.0) + 100.0) if high_f is None else high_f
        if low_f is None and high_f is not None:
            low = min(0.0, high - 100.0)
        if low > high or (low == high and (low_x or high_x)):
            raise SchemaError(f"no number between {low_f} and {high_f}")
        step = schema.get("multipleOf")
        if isinstance(step, int | float) and not isinstance(step, bool) and step > 0:
            first, last = math.ceil(low / step), math.floor(high / step)
            first += 1 if low_x and first * step <= low else 0
            last -= 1 if high_x and last * step >= high else 0
            if first > last:
                raise SchemaError(f"no multiple of {step} between {low_f} and {high_f}")
            return float(step * self._rng.randint(first, last))
        value = round(low + (high - low) * self._rng.uniform(0.1, 0.9), 2)
        above = low < value or (value == low and not low_x)
        below = value < high or (value == high and not high_x)
        if not (above and below):
            value = (low + high) / 2
        return value

    def _words(self, least: int, most: int) -> str:
        return " ".join(self._rng.choice(WORDS) for _ in range(self._rng.randint(least, most)))


def _size(schema: Mapping[str, Any], key: str) -> int:
    size = int(schema.get(key, 0))
    if size > _MAX_SIZE:
        raise SchemaError(f"{key} {size} is more than the simulator generates ({_MAX_SIZE})")
    return size


def _is_null(schema: Any) -> bool:
    return isinstance(schema, Mapping) and schema.get("type") == "null"


def _kind(schema: Mapping[str, Any]) -> str:
    kind = schema.get("type")
    if isinstance(kind, list):
        useful = [k for k in kind if k != "null"]
        return str(useful[0]) if useful else "null"
    if isinstance(kind, str):
        return kind
    if kind is not None:
        raise SchemaError(f"'type' must be a string or an array, got {kind!r}")
    if {"properties", "required", "additionalProperties"} & schema.keys():
        return "object"
    if {"items", "prefixItems", "minItems", "maxItems"} & schema.keys():
        return "array"
    if {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"} & schema.keys():
        return "number"
    return "string"


def _bounds(schema: Mapping[str, Any]) -> tuple[float | None, bool, float | None, bool]:
    """(low, low is exclusive, high, high is exclusive), for draft-4 and later spellings."""
    low, low_x = _bound(schema, "minimum", "exclusiveMinimum", sign=1)
    high, high_x = _bound(schema, "maximum", "exclusiveMaximum", sign=-1)
    return low, low_x, high, high_x


def _bound(
    schema: Mapping[str, Any], inclusive: str, exclusive: str, *, sign: int
) -> tuple[float | None, bool]:
    """The tighter of the two bounds; ``sign`` is 1 for a lower bound, -1 for an upper one."""
    value = schema.get(inclusive)
    flag = schema.get(exclusive)
    if isinstance(flag, bool):  # draft 4: a flag on the inclusive bound
        return value, flag and value is not None
    if isinstance(flag, int | float) and (value is None or sign * flag >= sign * value):
        return flag, True
    return value, False
