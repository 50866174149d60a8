"""Keys out of every text that leaves sluice: the one redaction function.

A server may send a key back (some proxies echo the request's ``Authorization`` header in a
401 body), and a transport error may quote a URL that carries one. Every text that comes from
a server enters sluice's errors through :func:`redact_error` (the ProviderActor applies it to
each failed attempt, ``sluice providers check`` to what it prints), so an error message, the
``--json`` output, a batch output line, a load-test result and a log line built from that error
hold ``********`` where the key was, whole or as ``Bearer <key>``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from ._config import Secret
    from ._errors import CallError

__all__ = ["MASK", "SECRET_HEADER_PARTS", "redact", "redact_error", "secrets_of", "with_headers"]

MASK = "********"
SECRET_HEADER_PARTS = ("auth", "key", "token", "secret", "cookie", "signature")
"""A header whose lower-cased name holds one of these may carry a secret."""
_MIN_SECRET = 4
"""Shorter values are not searched for: masking every ``ab`` would garble the message."""


def secrets_of(api_key: Secret | None, headers: Mapping[str, str] = {}) -> tuple[str, ...]:
    """The secret strings one provider sends: its key, and the values of its headers that may
    hold one (each also without a ``Bearer``/``Basic`` prefix), longest first so a key that
    contains another is masked whole."""
    found: set[str] = set()
    if api_key is not None:
        found.add(api_key.reveal())
    for name, value in headers.items():
        if any(part in name.lower() for part in SECRET_HEADER_PARTS):
            found.add(value)
            scheme, _, rest = value.partition(" ")
            if rest and scheme.lower() in ("bearer", "basic", "token"):
                found.add(rest.strip())
    return tuple(sorted((s for s in found if len(s) >= _MIN_SECRET), key=len, reverse=True))


def with_headers(secrets: tuple[str, ...], headers: Mapping[str, str]) -> tuple[str, ...]:
    """``secrets`` (as :func:`secrets_of` gives them) and the secret-looking values of one
    call's own ``headers`` (a per-call ``x-api-key``, a program's own auth header), longest
    first as :func:`secrets_of` orders them, so neither list's secret is masked in part."""
    if not headers:
        return secrets
    found = {*secrets, *secrets_of(None, headers)}
    return tuple(sorted(found, key=len, reverse=True))


def redact(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every occurrence of each of ``secrets`` replaced by :data:`MASK`."""
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, MASK)
    return text


def redact_error(error: CallError, secrets: tuple[str, ...]) -> CallError:
    """``error`` with every field that may hold server text redacted (the same object when
    nothing needed masking, so the common path allocates nothing)."""
    if not secrets:
        return error
    changes: dict[str, Any] = {}
    for field in ("message", "error_type", "request_id"):
        value = getattr(error, field)
        if isinstance(value, str):
            masked = redact(value, secrets)
            if masked != value:
                changes[field] = masked
    return attrs.evolve(error, **changes) if changes else error
