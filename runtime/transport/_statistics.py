"""A snapshot of a :class:`~sluice.transport.FastTransport`'s connections
(``FastTransport.statistics``).

Apart from :mod:`sluice.transport._pool`, which serves the name (PEP 562), so that a program
that never asks for the snapshot does not build its class.
"""

from __future__ import annotations

import attrs

from .._record import Value

__all__ = ["TransportStatistics"]


@attrs.frozen(eq=False, repr=False)
class TransportStatistics(Value):
    """A snapshot of a :class:`FastTransport`'s connections, summed over its origins."""

    connections: int
    """Open connections: ``idle + in_use``."""
    idle: int
    """Open connections waiting in a pool for the next request."""
    in_use: int
    """Open connections serving a request (sending it, or reading its response)."""
    waiters: int
    """Requests queued because their origin already has ``max_connections`` connections."""
