"""Reading a gateway request's parts: its bearer token, its JSON body, the client's wire format
and ``anthropic-*`` headers, and the Responses parameters only OpenAI's own API honours. Pure
functions over one :class:`~.http.Request`, so the routes share one reading of each."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._errors import ConfigError
from .errors import BadBody
from .json_body import BodyError, load_json_body

if TYPE_CHECKING:
    from .._messages import ChatRequest
    from .errors import Wire
    from .http import Request

__all__ = ["anthropic_headers", "bearer_token", "json_object", "refuse_stored", "wire_of"]


def refuse_stored(request: ChatRequest) -> None:
    """Refuse the Responses parameters no upstream but OpenAI's own Responses API can honour.

    Raises:
        ConfigError: naming the parameter and what to send instead.
    """
    extra = request.extra_body
    if extra.get("previous_response_id") is not None:
        raise ConfigError(
            "body.previous_response_id: this model's provider keeps no stored responses; "
            "send the whole conversation in 'input' instead"
        )
    if extra.get("background"):
        raise ConfigError(
            "body.background: background responses are not supported for this model's provider;"
            " call without it (stream: true for a long reply)"
        )


def bearer_token(request: Request) -> str | None:
    for name, value in request.headers:
        if name == b"authorization":
            scheme, _, token = value.partition(b" ")
            if scheme.lower() == b"bearer" and token:
                return token.strip().decode("latin-1")
        elif name == b"x-api-key" and value:
            return value.decode("latin-1")
    return None


_NOT_FORWARDED = frozenset({b"anthropic-version"})
"""``anthropic-*`` request headers the upstream provider sets itself."""


def anthropic_headers(request: Request) -> dict[str, str] | None:
    """The client's ``anthropic-*`` headers (``anthropic-beta`` and the like) for an Anthropic
    upstream, except the version, which the provider sets itself; credentials never match."""
    found: dict[str, str] | None = None
    for name, value in request.headers:
        if name[:10] == b"anthropic-" and name not in _NOT_FORWARDED:
            if found is None:
                found = {}
            text = value.decode("latin-1")
            key = name.decode("latin-1")
            found[key] = f"{found[key]},{text}" if key in found else text
    return found


def wire_of(request: Request) -> Wire:
    """Anthropic clients send ``anthropic-version``; everyone else gets OpenAI's format."""
    return "anthropic" if request.header(b"anthropic-version") is not None else "openai"


def json_object(request: Request) -> dict[str, Any]:
    """The request's body, a JSON object.

    Raises:
        BadBody: it is not JSON, nests too deep, or is no object.
    """
    try:
        body = load_json_body(request.body)
    except BodyError as exc:
        raise BadBody(str(exc)) from None
    if not isinstance(body, dict):
        raise BadBody("the request body must be a JSON object")
    return body
