"""What each failure looks like to a gateway client: status, error type, headers. Pure.

One table, :data:`ANSWERS`, maps every exception a request can end in to its answer, for both
wire formats: the gateway's own refusals (:class:`Refused` and its subclasses, raised by the
steps that read a request before any call) and the runtime's error tree (:mod:`sluice._errors`).
The first row whose class matches (and, for a row that names upstream statuses, whose
``CallError.status`` is among them) wins, so the rows go from the most specific to the least.

What the rows say, in words. The upstream's own 401/403 is the gateway's credential problem,
not the client's, so it goes out as 502 (a client told "401" would think its own key is
wrong). A spent budget is 429 ``insufficient_quota`` for OpenAI clients (what OpenAI sends)
and 400 for Anthropic clients (what Anthropic sends for a low credit balance), both with
``x-should-retry: false`` so the SDKs do not retry what cannot succeed. An upstream 503 stays
503, another upstream 4xx is the client's bad request (400); every other mapping follows the
error class. A wait the provider asked for (``CallError.retry_after``), or the one a key's own
rate limit needs, goes out as ``Retry-After`` and ``retry-after-ms``, which both SDKs honour.

The status each class of :mod:`sluice._errors` gets (``tests/test_gateway_errors.py`` holds
the table to this list)::

    BudgetExceeded        429 (Anthropic clients: 400)
    RateLimited           429
    Overloaded            529
    CircuitOpen           503
    RuntimeClosed         503
    ServerError           502; 503 when the upstream said 503; 400 when it said 4xx (408, 409)
    CallTimeout           504
    AuthenticationFailed  502
    NotFound              404
    TooLargeForQuota      400
    ContentFiltered       400
    BadRequest            400
    ContextTooLong        400
    ToolCallError         502
    ConfigError           400
    KeyStoreError         400
    ToolSchemaError       400
    ConnectionFailed      502; 400 when the upstream said 4xx
    StreamBroken          502; 400 when the upstream said 4xx
    ProtocolError         502; 400 when the upstream said 4xx
    EmptyResponse         502; 400 when the upstream said 4xx
    StoreUnavailable      502; 400 when the upstream said 4xx
    HistoryLost           502; 400 when the upstream said 4xx
    InternalError         502; 400 when the upstream said 4xx
    CallError             502; 400 when the upstream said 4xx
    RetryableError        502; 400 when the upstream said 4xx
    FatalError            502; 400 when the upstream said 4xx
    ActorCrashed          502
    OperationFailed       502
    SluiceError           502

Messages are for the client, so they hold no Python: a tool-call failure's message ends with
the fix for a developer calling sluice from Python (``ToolOptions(emulate=True)``), which
means nothing to an HTTP client and is left out.
"""

from __future__ import annotations

import math
from typing import Final, Literal

import attrs

from .._errors import (
    AuthenticationFailed,
    BadRequest,
    BudgetExceeded,
    CallError,
    CallTimeout,
    CircuitOpen,
    ConfigError,
    ContentFiltered,
    NotFound,
    Overloaded,
    RateLimited,
    RuntimeClosed,
    ServerError,
    SluiceError,
    TooLargeForQuota,
    ToolCallError,
)
from . import anthropic_wire, openai_wire

__all__ = [
    "ANSWERS",
    "Answer",
    "BadBody",
    "KeyOverRate",
    "KeyTooLarge",
    "ModelNotAllowed",
    "ModelNotServed",
    "NoRoute",
    "NotAdmin",
    "Refused",
    "Response",
    "Unauthenticated",
    "Wire",
    "answer_for",
    "error_response",
    "response_for",
]

Wire = Literal["openai", "anthropic"]
Response = tuple[int, list[tuple[bytes, bytes]], bytes]
"""``(status, headers, body)``."""

_NO_RETRY = (b"x-should-retry", b"false")
_JSON = (b"content-type", b"application/json")


class Refused(Exception):
    """The gateway refuses a request before any call is made; the message is the client's.

    Raised by the steps that read a request (key, body, model, the key's quota) and turned
    into a response by :func:`response_for`, like an error of the runtime.
    """

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after
        """Seconds the client should wait before trying again, when that is known."""


class Unauthenticated(Refused):
    """No virtual key, or one the gateway does not know."""


class NotAdmin(Refused):
    """An admin request without the admin token."""


class BadBody(Refused):
    """The request body is no JSON object."""


class NoRoute(Refused):
    """No route for this method and path."""


class ModelNotServed(Refused):
    """The model is not in the gateway's list (or does not exist)."""


class ModelNotAllowed(Refused):
    """The caller's key may not call this model."""


class KeyOverRate(Refused):
    """The caller's key has spent its requests or tokens per minute for now."""


class KeyTooLarge(Refused):
    """The request needs more tokens than the caller's key may use in a whole minute."""


@attrs.frozen
class Answer:
    """How one kind of failure goes out, in either wire format: a row of :data:`ANSWERS`."""

    kind: type[Exception]
    status: int
    openai_type: str
    anthropic_type: str
    code: str | None = attrs.field(default=None, kw_only=True)
    """OpenAI's ``error.code``."""
    upstream: frozenset[int] | range | None = attrs.field(default=None, kw_only=True)
    """The row matches only a ``CallError`` whose upstream ``status`` is one of these."""
    retry: bool = attrs.field(default=True, kw_only=True)
    """False adds ``x-should-retry: false``: the SDKs do not retry what cannot succeed."""
    anthropic_status: int | None = attrs.field(default=None, kw_only=True)
    """The status for Anthropic clients, where it differs from :attr:`status`."""


_INVALID = ("invalid_request_error", "invalid_request_error")
_NOT_FOUND = ("invalid_request_error", "not_found_error")
_API = ("server_error", "api_error")
_LIMITED = "rate_limit_exceeded"

ANSWERS: Final[tuple[Answer, ...]] = (
    # The gateway's own refusals.
    Answer(Unauthenticated, 401, "invalid_request_error", "authentication_error",
           code="invalid_api_key"),
    Answer(NotAdmin, 401, "invalid_request_error", "authentication_error"),
    Answer(BadBody, 400, *_INVALID),
    Answer(NoRoute, 404, *_NOT_FOUND),
    Answer(ModelNotServed, 404, *_NOT_FOUND, code="model_not_found"),
    Answer(ModelNotAllowed, 403, "invalid_request_error", "permission_error",
           code="model_not_allowed"),
    Answer(KeyOverRate, 429, "requests", "rate_limit_error", code=_LIMITED),
    Answer(KeyTooLarge, 429, "tokens", "rate_limit_error", code=_LIMITED, retry=False),
    # The runtime's errors (sluice._errors).
    Answer(BudgetExceeded, 429, "insufficient_quota", "invalid_request_error",
           code="insufficient_quota", retry=False, anthropic_status=400),
    Answer(RateLimited, 429, _LIMITED, "rate_limit_error", code=_LIMITED),
    Answer(Overloaded, 529, "server_error", "overloaded_error"),
    Answer(CircuitOpen, 503, *_API),
    Answer(RuntimeClosed, 503, *_API),
    Answer(ServerError, 503, *_API, upstream=frozenset({503})),  # the client may come back
    Answer(CallTimeout, 504, *_API, code="timeout"),
    Answer(AuthenticationFailed, 502, *_API, code="upstream_authentication"),
    Answer(NotFound, 404, *_NOT_FOUND, code="model_not_found"),
    Answer(TooLargeForQuota, 400, *_INVALID),
    Answer(ContentFiltered, 400, *_INVALID),
    Answer(BadRequest, 400, *_INVALID),
    Answer(ToolCallError, 502, *_API, code="tool_call_error"),
    Answer(ConfigError, 400, *_INVALID),
    Answer(CallError, 400, *_INVALID, upstream=range(400, 500)),  # the client's bad request
    Answer(SluiceError, 502, *_API),
)  # fmt: skip
"""Every row, from the most specific to the least: the first that matches wins."""


def answer_for(exc: SluiceError | Refused) -> Answer:
    """The row of :data:`ANSWERS` for ``exc``."""
    status = exc.status if isinstance(exc, CallError) else None
    for answer in ANSWERS:
        if isinstance(exc, answer.kind) and (answer.upstream is None or status in answer.upstream):
            return answer
    raise AssertionError(f"no answer for {type(exc).__name__}")  # SluiceError's row catches all


def response_for(wire: Wire, exc: SluiceError | Refused) -> Response:
    """The response for a request refused with ``exc``, or a call that failed with it."""
    answer = answer_for(exc)
    status = answer.status
    if wire == "anthropic" and answer.anthropic_status is not None:
        status = answer.anthropic_status
    code, param = answer.code, None
    if isinstance(exc, CallError | Refused):
        message, retry_after = exc.message, exc.retry_after
    else:
        message, retry_after = str(exc), None
    if isinstance(exc, CallError) and status == 400:
        # The provider's own words about what was wrong with the request the client sent.
        param = exc.param
        code = exc.code or code
    if isinstance(exc, ToolCallError):
        message = message.partition("\n")[0]  # the Python fix follows the first line
    return error_response(
        wire,
        status,
        message,
        openai_type=answer.openai_type,
        anthropic_type=answer.anthropic_type,
        code=code,
        param=param,
        retry_after=retry_after,
        retry=answer.retry,
    )


def error_response(
    wire: Wire,
    status: int,
    message: str,
    *,
    openai_type: str,
    anthropic_type: str,
    code: str | None = None,
    param: str | None = None,
    retry_after: float | None = None,
    retry: bool = True,
) -> Response:
    """``(status, headers, body)`` of an error in ``wire``'s own format."""
    headers: list[tuple[bytes, bytes]] = [_JSON]
    if retry_after is not None:
        headers.append((b"retry-after", b"%d" % max(1, math.ceil(retry_after))))
        headers.append((b"retry-after-ms", b"%d" % max(1, math.ceil(retry_after * 1000))))
    if not retry:
        headers.append(_NO_RETRY)
    if wire == "openai":
        body = openai_wire.error_body(message, openai_type, code, param)
    else:
        body = anthropic_wire.error_body(message, anthropic_type)
    return status, headers, body
