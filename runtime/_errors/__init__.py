"""Every exception sluice raises on purpose.

The tree below names every subclass of :class:`SluiceError` (those defined elsewhere say
where); ``tests/test_errors_tree.py`` holds it to the classes. ::

    SluiceError
    ├── ConfigError                 bad config file, key, model string or input
    │   ├── KeyStoreError           the key store cannot be read or written, or a key in it
    │   │                           does not decrypt (sluice.providers._keys)
    │   └── ToolSchemaError         a tool's JSON schema cannot be used (sluice._tools.schema)
    ├── RuntimeClosed               the runtime (or one of its actors) has stopped
    ├── ActorCrashed                an actor crashed more often than its restart limit
    ├── OperationFailed             ``sluice providers check``/``models`` got no usable answer
    │                               (sluice.providers._operations)
    └── CallError                   one call failed (call_id, provider, model, attempt,
        │                           status, error_type, request_id, retry_after)
        ├── RetryableError          the Supervisor may try again
        │   ├── RateLimited         429 (quota="quota" is fatal)
        │   ├── Overloaded          529 and provider "overloaded" bodies
        │   ├── ServerError         5xx, 408, 409
        │   ├── ConnectionFailed    could not connect, or the connection dropped before a reply
        │   ├── StreamBroken        the stream ended early (events_delivered)
        │   ├── ProtocolError       a malformed stream or body
        │   ├── EmptyResponse       finished normally with nothing in it
        │   └── CallTimeout         first token, idle gap or total deadline (kind)
        └── FatalError              trying again cannot help
            ├── BadRequest          400, 422, and other 4xx
            │   └── ContextTooLong
            ├── AuthenticationFailed 401, 403
            ├── NotFound            404 (unknown model or endpoint)
            ├── ContentFiltered
            ├── ToolCallError       the reply broke the request's tool-call contract
            │                       (correctable: the Supervisor may retry with a correction)
            ├── TooLargeForQuota    needs more than a whole rate-limit window
            ├── CircuitOpen         the provider's breaker is open
            ├── BudgetExceeded      the spending budget cannot cover the call
            ├── StoreUnavailable    the shared quota store (Redis) does not answer
            │   └── HistoryLost     it answered, but lost what it held (run id changed)
            │                       (sluice._limits.store_epoch)
            └── InternalError       a bug in sluice; only the affected call fails

Retryable versus fatal is the first split under ``CallError`` because it is the only question
the Supervisor asks (a provider's ``x-should-retry`` header, kept in ``should_retry``, overrides
the class). A bug in sluice is none of these: it propagates as itself.

The four with fields of their own (``RateLimited``, ``StreamBroken``, ``CallTimeout``,
``ToolCallError``) are defined in :mod:`sluice._errors.rare`, which loads when one is first
asked for here (PEP 562): a call that succeeds builds none of them, and each attrs class costs
the import a compiled ``__init__``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    from .rare import CallTimeout as CallTimeout
    from .rare import RateLimited as RateLimited
    from .rare import StreamBroken as StreamBroken
    from .rare import ToolCallError as ToolCallError

__all__ = [
    "ActorCrashed",
    "AuthenticationFailed",
    "BadRequest",
    "BudgetExceeded",
    "CallError",
    "CallTimeout",
    "CircuitOpen",
    "ConfigError",
    "ConnectionFailed",
    "ContentFiltered",
    "ContextTooLong",
    "EmptyResponse",
    "FatalError",
    "InternalError",
    "NotFound",
    "Overloaded",
    "ProtocolError",
    "RateLimited",
    "RetryableError",
    "RuntimeClosed",
    "ServerError",
    "SluiceError",
    "StreamBroken",
    "StoreUnavailable",
    "TooLargeForQuota",
    "ToolCallError",
]


class SluiceError(Exception):
    """Base class: ``except SluiceError`` catches everything sluice raises on purpose."""


class ConfigError(SluiceError):
    """A configuration value, model string or input line is wrong; the message says where."""


class RuntimeClosed(SluiceError):
    """The runtime, or the actor a request needed, has already stopped."""


class ActorCrashed(SluiceError):
    """An actor crashed more often than its restart limit allows; the runtime has stopped."""


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
    param: str | None = None
    """The request field the provider blamed (OpenAI's ``error.param``), when it named one."""
    code: str | None = None
    """The provider's own error code (OpenAI's ``error.code``), when it gave one."""
    request_id: str | None = None
    should_retry: bool | None = None
    """The provider's own verdict (``x-should-retry``), which wins over the class's."""
    retry_after: float | None = None
    """Seconds the provider asked us to wait before trying again (``Retry-After`` on a 429,
    503 or 529), or until an open breaker lets a probe through; None when nobody said."""

    @property
    def retryable(self) -> bool:
        """True when the Supervisor may try the call again."""
        if self.should_retry is not None:
            return self.should_retry
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


class Overloaded(RetryableError):
    """The provider is overloaded (HTTP 529 or an ``overloaded`` error body)."""


class ServerError(RetryableError):
    """The provider failed on its side (5xx), or asked for a retry (408, 409)."""


class ConnectionFailed(RetryableError):
    """No reply: the connection could not be made or dropped before the reply began."""


class ProtocolError(RetryableError):
    """The provider sent something that is not valid for its protocol."""


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


class CircuitOpen(FatalError):
    """The provider's circuit breaker is open after repeated failures; calls fail fast
    (``retry_after``: seconds until the breaker lets a probe call through)."""


class BudgetExceeded(FatalError):
    """The call's worst-case cost does not fit the remaining budget; it was not sent."""


class StoreUnavailable(FatalError):
    """The shared quota store (Redis) did not answer and ``on_store_error`` is ``"fail"``:
    the call was not sent (a batch line with this error is redone by ``--resume``)."""


class EmptyResponse(RetryableError):
    """The provider finished normally but sent no text and no tool call."""


class InternalError(FatalError):
    """A bug in sluice ended this call (and only this call); the traceback is in the log."""


_RARE = frozenset(("CallTimeout", "RateLimited", "StreamBroken", "ToolCallError"))


def __getattr__(name: str) -> Any:
    # The errors with fields of their own load when first asked for (sluice._errors.rare), and
    # are kept here then: code that names them after a failure pays a plain lookup.
    if name in _RARE:
        from . import rare

        found = {rare_name: getattr(rare, rare_name) for rare_name in _RARE}
        globals().update(found)
        return found[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
