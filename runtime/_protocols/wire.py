"""Small pieces every request builder needs: JSON encoding, tool-call arguments, headers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import orjson

from .._errors import ConfigError
from .._version import USER_AGENT

if TYPE_CHECKING:
    from .._messages import ToolCall

__all__ = [
    "PROTECTED_HEADERS",
    "add_headers",
    "arguments_object",
    "json_body",
    "request_headers",
    "to_json",
]

PROTECTED_HEADERS = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "x-api-key",
        "api-key",
        "x-goog-api-key",
        "cookie",
        "host",
        "content-length",
        "content-type",
        "content-encoding",
        "transfer-encoding",
        "connection",
        "te",
        "upgrade",
        "expect",
    }
)
"""Headers a request's ``extra_headers`` never set: credentials and the request's framing."""


def add_headers(
    merged: dict[str, str],
    extra: Mapping[str, str],
    configured: Mapping[str, str] | None,
) -> None:
    """Add a request's ``extra`` headers to ``merged`` (the codec's own, credentials among
    them), then the provider's ``configured`` ones, which replace any of the same name.

    Names are lower-cased; an extra header named in :data:`PROTECTED_HEADERS` is dropped, so
    nothing a caller (a gateway client) sends can replace or add credentials.
    """
    for name, value in extra.items():
        lower = name.lower()
        if lower not in PROTECTED_HEADERS:
            merged[lower] = value
    if configured:
        for name, value in configured.items():
            merged[name.lower()] = value


def request_headers(
    accept: str,
    credential: tuple[str, str] | None,
    extra: Mapping[str, str],
    configured: Mapping[str, str] | None,
    *fixed: tuple[str, str],
) -> tuple[tuple[str, str], ...]:
    """Every header of one provider request, in the order sent: the user agent, the JSON
    content type, ``accept``, the protocol's ``fixed`` ones (a version), the ``credential``
    (a name and value; None without a key), then the call's ``extra`` and the provider's
    ``configured`` headers as :func:`add_headers` merges them."""
    merged = {"user-agent": USER_AGENT, "content-type": "application/json", "accept": accept}
    for name, value in fixed:
        merged[name] = value
    if credential is not None:
        merged[credential[0]] = credential[1]
    if extra:
        add_headers(merged, extra, configured)
    elif configured:
        for name, value in configured.items():
            merged[name.lower()] = value
    return tuple(merged.items())


def to_json(value: object) -> object:
    """orjson's fallback: read-only mappings (schemas handed in by users) become dicts."""
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"cannot send a {type(value).__name__} in a request body")


def json_body(value: object) -> bytes:
    """``value`` as a request body: its JSON, in a bytes object that holds no more memory
    than its length.

    orjson writes into a buffer several times the size of what it writes (4 KiB for a
    hundred bytes, ten times the text of a long prompt) and hands that buffer back as the
    bytes object, unshrunk. A body lives as long as its attempt waits for the reply, so ten
    thousand open calls would hold tens of megabytes of empty buffer; one copy of exactly
    the bytes written costs far less than the encoding did.
    """
    return bytes(memoryview(orjson.dumps(value, default=to_json)))


def arguments_object(call: ToolCall, provider: str) -> dict[str, Any]:
    """A tool call's arguments as the JSON object that ``provider``'s protocol carries.

    Raises:
        ConfigError: the arguments are not JSON, or not an object.
    """
    try:
        value = call.parsed_arguments()
    except ValueError:
        raise ConfigError(
            f"the arguments of tool call {call.id!r} are not JSON, and {provider} needs them "
            "as an object"
        ) from None
    if type(value) is not dict:
        raise ConfigError(f"the arguments of tool call {call.id!r} are not a JSON object")
    return value
