"""Every exception sluice raises on purpose.

::

    SluiceError
    ├── ConfigError                 bad config file, key, model string or input
    ├── RuntimeClosed               the runtime (or one of its actors) has stopped
    └── CallError                   one call failed (call_id, provider, model, attempt,
        │                           status, error_type, request_id)
        ├── RetryableError          the Supervisor may try again
        │   ├── RateLimited         429 (retry_after; quota="quota" is fatal)
        │   ├── Overloaded          529 and provider "overloaded" bodies
        │   ├── ServerError         5xx, 408, 409
        │   ├── ConnectionFailed    could not connect, or the connection dropped before a reply
        │   ├── StreamBroken        the stream ended early (events_delivered)
        │   ├── ProtocolError       a malformed stream or body
        │   └── CallTimeout         first token, idle gap or total deadline (kind)
        └── FatalError              trying again cannot help
            ├── BadRequest          400, 422, and other 4xx
            │   └── ContextTooLong
            ├── AuthenticationFailed 401, 403
            ├── NotFound            404 (unknown model or endpoint)
            ├── ContentFiltered
            └── TooLargeForQuota    needs more than a whole rate-limit window

Retryable versus fatal is the first split under ``CallError`` because it is the only question
the Supervisor asks. A bug in sluice is none of these: it propagates as itself.
"""

from __future__ import annotations

from typing import Literal

import attrs

__all__ = [
    "AuthenticationFailed",
    "BadRequest",
    "CallError",
    "CallTimeout",
    "ConfigError",
    "ConnectionFailed",
    "ContentFiltered",
    "ContextTooLong",
    "FatalError",
    "NotFound",
    "Overloaded",
    "ProtocolError",
    "RateLimited",
    "RetryableError",
    "RuntimeClosed",
    "ServerError",
    "SluiceError",
    "StreamBroken",
    "TooLargeForQuota",
]


class SluiceError(Exception):
    """Base class: ``except SluiceError`` catches everything sluice raises on purpose."""


class ConfigError(SluiceError):
    """A configuration value, model string or input line is wrong; the message says where."""


class RuntimeClosed(SluiceError):
    """The runtime, or the actor a request needed, has already stopped."""


@attrs.define(eq=False, repr=False)
class CallError(SluiceError):
    """One call (or one attempt of it) failed.

    The codec that reads the provider's reply fills ``message``, ``status``, ``error_type`` and
    ``request_id``; the actors add ``call_id``, ``provider``, ``model`` and ``attempt`` with
    :meth:`in_context`. Nothing here ever holds an API key or a request body.
    """

    message: str
    call_id: str = ""
    provider: str = ""
    model: str = ""
    attempt: int = 0
    status: int | None = None
    """HTTP status of the provider's reply, or None when there was no reply."""
    error_type: str | None = None
    """The provider's own error type or code (``rate_limit_exceeded``, ``overloaded_error``)."""
    request_id: str | None = None

    @property
    def retryable(self) -> bool:
        """True when the Supervisor may try the call again."""
        return isinstance(self, RetryableError)

    def in_context(self, *, call_id: str, provider: str, model: str, attempt: int) -> CallError:
        """Return a copy that names the call and attempt it belongs to."""
        return attrs.evolve(self, call_id=call_id, provider=provider, model=model, attempt=attempt)

    @property
    def kind(self) -> str:
        """The error's class name, as printed by the CLI (``RateLimited``)."""
        return type(self).__name__

    def __str__(self) -> str:
        where = f"{self.provider}:{self.model}" if self.provider else ""
        parts = [p for p in (where, f"HTTP {self.status}" if self.status else "") if p]
        prefix = f"[{', '.join(parts)}] " if parts else ""
        return f"{prefix}{self.kind}: {self.message}"

    def __repr__(self) -> str:
        return (
            f"{self.kind}(message={self.message!r}, call_id={self.call_id!r}, "
            f"provider={self.provider!r}, model={self.model!r}, attempt={self.attempt}, "
            f"status={self.status!r}, error_type={self.error_type!r})"
        )


class RetryableError(CallError):
    """A failure that may pass: the Supervisor may try the call again."""


@attrs.define(eq=False, repr=False)
class RateLimited(RetryableError):
    """The provider answered 429."""

    retry_after: float | None = None
    """Seconds the provider asked us to wait, when it said."""
    quota: Literal["rate", "quota"] = "rate"
    """``rate``: a limit per window, worth waiting for. ``quota``: the account's quota is
    exhausted (``insufficient_quota``, a daily cap, or a wait beyond the maximum), so the
    call fails fast instead of waiting."""

    @property
    def retryable(self) -> bool:
        return self.quota == "rate"


class Overloaded(RetryableError):
    """The provider is overloaded (HTTP 529 or an ``overloaded`` error body)."""


class ServerError(RetryableError):
    """The provider failed on its side (5xx), or asked for a retry (408, 409)."""


class ConnectionFailed(RetryableError):
    """No reply: the connection could not be made or dropped before the reply began."""


@attrs.define(eq=False, repr=False)
class StreamBroken(RetryableError):
    """The reply stream ended before it was complete."""

    events_delivered: int = 0


class ProtocolError(RetryableError):
    """The provider sent something that is not valid for its protocol."""


@attrs.define(eq=False, repr=False)
class CallTimeout(RetryableError):
    """A deadline passed."""

    timeout_kind: Literal["connect", "first_token", "idle", "total"] = "total"


class FatalError(CallError):
    """Trying the same call again cannot help."""


class BadRequest(FatalError):
    """The provider rejected the request (400, 422 or another 4xx)."""


class ContextTooLong(BadRequest):
    """The prompt and requested output do not fit the model's context window."""


class AuthenticationFailed(FatalError):
    """The provider did not accept the credentials (401 or 403)."""


class NotFound(FatalError):
    """The model or endpoint does not exist (404)."""


class ContentFiltered(FatalError):
    """The provider refused to answer because of its content policy."""


class TooLargeForQuota(FatalError):
    """The call needs more than a whole rate-limit window allows: it could never be admitted."""
