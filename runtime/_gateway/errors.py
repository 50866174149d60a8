"""What each failure looks like to a gateway client: status, error type, headers. Pure.

The upstream's own 401/403 is the gateway's credential problem, not the client's, so it goes
out as 502 (a client told "401" would think its own key is wrong). A spent budget is 429
``insufficient_quota`` for OpenAI clients (what OpenAI sends) and 400 for Anthropic clients
(what Anthropic sends for a low credit balance), both with ``x-should-retry: false`` so the
SDKs do not retry what cannot succeed. An upstream 503 stays 503; every other mapping follows
the error class. A wait the provider asked for (``CallError.retry_after``) goes out as
``Retry-After`` and ``retry-after-ms``, which both SDKs honour.

Messages are for the client, so they hold no Python: a tool-call failure's message ends with
the fix for a developer calling sluice from Python (``ToolOptions(emulate=True)``), which
means nothing to an HTTP client and is left out.
"""

from __future__ import annotations

import math
from typing import Literal

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

__all__ = ["Problem", "Wire", "error_response", "problem_for"]

Wire = Literal["openai", "anthropic"]
Problem = tuple[int, str, str, str | None]
"""``(status, openai type, anthropic type, openai code)``."""

_NO_RETRY = (b"x-should-retry", b"false")
_JSON = (b"content-type", b"application/json")


def problem_for(exc: SluiceError) -> Problem:
    """The status and error types for ``exc``."""
    if isinstance(exc, BudgetExceeded):
        return 429, "insufficient_quota", "invalid_request_error", "insufficient_quota"
    if isinstance(exc, RateLimited):
        return 429, "rate_limit_exceeded", "rate_limit_error", "rate_limit_exceeded"
    if isinstance(exc, Overloaded):
        return 529, "server_error", "overloaded_error", None
    if isinstance(exc, CircuitOpen | RuntimeClosed):
        return 503, "server_error", "api_error", None
    if isinstance(exc, ServerError) and exc.status == 503:
        return 503, "server_error", "api_error", None  # unavailable: the client may come back
    if isinstance(exc, CallTimeout):
        return 504, "server_error", "api_error", "timeout"
    if isinstance(exc, AuthenticationFailed):
        return 502, "server_error", "api_error", "upstream_authentication"
    if isinstance(exc, NotFound):
        return 404, "invalid_request_error", "not_found_error", "model_not_found"
    if isinstance(exc, TooLargeForQuota | ContentFiltered | BadRequest):
        return 400, "invalid_request_error", "invalid_request_error", None
    if isinstance(exc, ToolCallError):
        return 502, "server_error", "api_error", "tool_call_error"
    if isinstance(exc, ConfigError):
        return 400, "invalid_request_error", "invalid_request_error", None
    if isinstance(exc, CallError) and exc.status is not None and 400 <= exc.status < 500:
        return 400, "invalid_request_error", "invalid_request_error", None
    return 502, "server_error", "api_error", None


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
) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
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


def call_error_response(
    wire: Wire, exc: SluiceError
) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """The response for a call that failed (or was refused) with ``exc``."""
    status, openai_type, anthropic_type, code = problem_for(exc)
    if isinstance(exc, BudgetExceeded) and wire == "anthropic":
        status = 400
    if isinstance(exc, CallError):
        message, retry_after = exc.message, exc.retry_after
    else:
        message, retry_after = str(exc), None
    param = None
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
        openai_type=openai_type,
        anthropic_type=anthropic_type,
        code=code,
        param=param,
        retry_after=retry_after,
        retry=not isinstance(exc, BudgetExceeded),
    )
