"""What a ProviderActor works with (:class:`ProviderContext`, built by the runtime's provider
startup) and what it changes as it runs (:class:`ProviderState`), kept across its restarts."""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from sluice._config import ReplyLimits
from sluice._protocols.base import Codec
from sluice._record import Record
from sluice._redact import secrets_of
from sluice.providers._registry import ResolvedProvider
from sluice.transport._base import HotTransport

from ._rate_limiter import RateLimiterHandle
from ._token_ledger import TokenLedgerHandle

if TYPE_CHECKING:
    from collections.abc import Callable

    from sluice._mail import StartAttempt
    from sluice._observe.observer import Observer  # noqa: TC004 (loaded when a runtime opens)

__all__ = ["ProviderContext", "ProviderState"]


class ProviderState:
    """What a ProviderActor changes as it runs, kept across its restarts (the restarter runs
    the actor again with the same context). Only the actor's tasks write it: its loop applies
    a reload (:class:`~sluice._mail_rare.ReloadProvider`) and sets :attr:`start_attempt` while it
    runs, its attempt tasks count themselves in and out. The runtime's statistics read
    :attr:`in_flight`; the actor's door (:class:`~sluice.actors._doors.ProviderDoor`) reads
    :attr:`start_attempt`."""

    __slots__ = ("in_flight", "secrets", "settings", "start_attempt")

    def __init__(self, spec: ResolvedProvider) -> None:
        self.start_attempt: Callable[[StartAttempt], None] | None = None
        """Starts an attempt's task in the running actor's nursery; None while no instance
        runs (before the start, between a crash and the restart, after the end)."""
        self.in_flight = 0
        """Attempts running now."""
        self.settings = spec
        """The provider as last resolved (``Runtime.reload``): each attempt reads it as it
        starts, so a rotated key or a moved endpoint is used by the next attempt."""
        self.secrets = secrets_of(spec.api_key, spec.headers)
        """The key and secret header values of every settings this actor has had: masked in
        every error (an attempt sent with an older key may be answered after a reload)."""

    def reload(self, spec: ResolvedProvider) -> None:
        """Send every attempt that starts from now on with ``spec``'s key, headers and URL."""
        self.settings = spec
        self.secrets = (*self.secrets, *secrets_of(spec.api_key, spec.headers))


@attrs.frozen(eq=False, repr=False)
class ProviderContext(Record):
    """What one ProviderActor works with. Built by the runtime's provider startup."""

    spec: ResolvedProvider
    """The provider as it was when the actor started (its codec, transport and pool were made
    for it); :attr:`ProviderState.settings` is the one to send with."""
    base_url: str
    transport: HotTransport
    codec: Codec
    limiter: RateLimiterHandle
    ledger: TokenLedgerHandle
    limits: ReplyLimits = ReplyLimits()
    """Size and time bounds on every reply (see :class:`sluice._config.ReplyLimits`)."""
    observer: Observer | None = None
    """Told when each attempt starts and ends (metrics, traces, hooks, logs)."""
    state: ProviderState = attrs.field(
        default=attrs.Factory(lambda self: ProviderState(self.spec), takes_self=True)
    )
    """What the actor's tasks change (see :class:`ProviderState`)."""
