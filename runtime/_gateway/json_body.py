"""Reading a request's JSON body for the gateway, with a bound on nesting. Pure.

orjson reads up to 1,024 levels of nesting but writes at most 254: a body nested deeper than
that would be accepted, then fail wherever it is written again (the cost estimate, the
upstream request), far from the client, as a 500 or worse. So the gateway refuses it here,
with a 400 that says why: no real request nests anywhere near :data:`MAX_DEPTH` levels.

The bound costs nothing for an ordinary body: one that holds fewer brackets than the bound
cannot nest that deep, which two C-speed counts over the bytes tell. A body with more brackets
(long conversations, many tools) is written once by orjson inside enough extra lists that it
fails exactly when the body nests deeper than the bound: a fraction of what reading it cost,
and several times quicker than walking it in Python.
"""

from __future__ import annotations

from typing import Any

import orjson

__all__ = ["MAX_DEPTH", "BodyError", "load_json_body"]

MAX_DEPTH = 128
"""Levels of arrays and objects a body may nest (the body itself is level 1)."""
_ORJSON_WRITES = 254
"""The deepest nesting ``orjson.dumps`` writes (it refuses one level more)."""


class BodyError(Exception):
    """The body is not JSON the gateway can take; the message says why, for the client."""


def load_json_body(data: bytes) -> Any:
    """The JSON value in ``data``.

    Raises:
        BodyError: ``data`` is not JSON (or not UTF-8), or nests deeper than
            :data:`MAX_DEPTH`.
    """
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise BodyError("the request body is not valid JSON") from None
    if data.count(b"[") + data.count(b"{") > MAX_DEPTH and _deeper_than_max(value):
        raise BodyError(f"the request body nests arrays and objects more than {MAX_DEPTH} deep")
    return value


def _deeper_than_max(value: Any) -> bool:
    wrapped = value
    for _ in range(_ORJSON_WRITES - MAX_DEPTH):
        wrapped = [wrapped]
    try:
        orjson.dumps(wrapped)
    except TypeError:  # "Recursion limit reached": nothing else can fail for loaded JSON
        return True
    return False
