"""How a load-test run is ended early from outside: the CLI's Ctrl-C and SIGTERM handlers
drain it (no new request starts) or cancel it (the ones in flight end too), and every
request sent still gets exactly one record."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import trio

__all__ = ["Interrupt"]


class Interrupt:
    """Ends runs early from outside (the CLI's Ctrl-C handler).

    :meth:`drain` stops sending: no new request starts, the ones in flight finish and are
    recorded. :meth:`cancel` also cancels the ones in flight; each is recorded as a failure of
    type ``Cancelled``, so every request sent has exactly one record. A run that ends either
    way returns its results with ``interrupted`` set, and they are marked invalid.
    """

    def __init__(self) -> None:
        self.state: str | None = None
        self.cause = "Ctrl-C"
        """What asked for the stop (``Ctrl-C``, ``SIGTERM``), for the results' reason."""
        self._sending: set[trio.CancelScope] = set()
        self._running: set[trio.CancelScope] = set()

    def drain(self, cause: str = "Ctrl-C") -> None:
        if self.state is None:
            self.cause = cause
        self.state = self.state or "drained"
        for scope in self._sending:
            scope.cancel()

    def cancel(self, cause: str = "Ctrl-C") -> None:
        if self.state is None:
            self.cause = cause
        self.state = "cancelled"
        for scope in (*self._sending, *self._running):
            scope.cancel()

    def watch(self, sending: trio.CancelScope, running: trio.CancelScope) -> None:
        """Scopes of a run starting now (cancelled at once when the interrupt came first)."""
        self._sending.add(sending)
        self._running.add(running)
        if self.state is not None:
            sending.cancel()
        if self.state == "cancelled":
            running.cancel()
