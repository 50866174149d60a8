"""Where one request's time went on the wire, as the transport saw it: a record the caller
hands to :meth:`FastTransport.send` only when it wants the numbers (the load tester does).

Requests sent without one pay nothing for it: the transport checks for the record at a few
points and does no other work. Times are :func:`trio.current_time` readings, the clock the
caller's own measurements use, so they line up with them exactly (and are exact under a
test's virtual clock).
"""

from __future__ import annotations

__all__ = ["HttpPhases"]


class HttpPhases:
    """The moments of one request's exchange, filled in by the transport as they happen.

    Every moment is None until it happens; a request that failed keeps the ones it reached.
    When a call is sent more than once (a retry), each :meth:`FastTransport.send` starts the
    record over, so it describes the last request sent. A reused keep-alive connection that
    turns out to be closed by the server is replaced by a new one inside the same send: the
    record then says ``reused=False`` and its connect time includes the failed try.
    """

    __slots__ = ("connected", "connecting", "done", "headers", "reused", "sent", "started")

    def __init__(self) -> None:
        self.started: float | None = None
        """The caller asked to send (before waiting for a free connection slot)."""
        self.connecting: float | None = None
        """A connection slot was free: the pool began looking for (or opening) a connection."""
        self.connected: float | None = None
        """A connection was ready (reused from the pool, or newly opened: DNS, TCP, proxy
        tunnel and TLS)."""
        self.reused: bool | None = None
        """The connection came from the pool (True) or was opened for this request."""
        self.sent: float | None = None
        """The request (head and body) was handed to the connection."""
        self.headers: float | None = None
        """The final response's status line and headers were parsed."""
        self.done: float | None = None
        """The body's last byte was parsed (the connection went back to the pool)."""

    def begin(self, at: float) -> None:
        """Start the record over for a request sent at ``at``."""
        self.started = at
        self.connecting = self.connected = self.sent = self.headers = self.done = None
        self.reused = None

    @property
    def connect(self) -> float | None:
        """Seconds spent opening a new connection; None for a reused one (or none yet)."""
        if self.reused or self.connecting is None or self.connected is None:
            return None
        return self.connected - self.connecting

    @property
    def time_to_headers(self) -> float | None:
        """Seconds from the request being sent to its response's headers being parsed."""
        if self.sent is None or self.headers is None:
            return None
        return self.headers - self.sent

    @property
    def receive(self) -> float | None:
        """Seconds from the response's headers to the last byte of its body."""
        if self.headers is None or self.done is None:
            return None
        return self.done - self.headers

    @property
    def pool_wait(self) -> float | None:
        """Seconds waiting for a connection slot (the origin had ``max_connections`` busy)."""
        if self.started is None or self.connecting is None:
            return None
        return self.connecting - self.started

    def __repr__(self) -> str:
        def ms(value: float | None) -> str:
            return "-" if value is None else f"{value * 1000:.3f}ms"

        return (
            f"<HttpPhases reused={self.reused} connect={ms(self.connect)} "
            f"headers={ms(self.time_to_headers)} receive={ms(self.receive)}>"
        )
