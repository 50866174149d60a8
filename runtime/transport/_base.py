"""The hot-path HTTP interface the ProviderActor speaks: send one request, read its body.

Two implementations: sluice's own trio-native HTTP/1.1 client (the default, built for thousands
of concurrent streams) and an adapter over ``httpx.AsyncClient`` (the fallback, and the way to
reach what the fast client does not cover). The ProviderActor only ever sees this interface.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ._phases import HttpPhases

__all__ = ["HotResponse", "HotTransport"]


class HotResponse(Protocol):
    """A response whose head has arrived; the body is read piece by piece."""

    @property
    def status(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str]:
        """Response headers with lower-case names (repeated names joined with ``", "``)."""
        ...

    async def read_some(self) -> bytes:
        """The next piece of the body, de-chunked and decompressed; ``b""`` once it is complete.

        Raises:
            TransportError: the connection broke or the body is malformed.
        """
        ...

    async def aclose(self) -> None:
        """Release the connection: back to the pool if the body was read to its end, else closed.

        Safe to call more than once, and under cancellation.
        """
        ...


class HotTransport(Protocol):
    """Sends requests for one provider endpoint."""

    async def send(
        self,
        method: str,
        url: str,
        headers: tuple[tuple[str, str], ...],
        body: bytes,
        *,
        phases: HttpPhases | None = None,
    ) -> HotResponse:
        """Send a request and wait for the response head.

        ``phases``, when given, is started over (:meth:`HttpPhases.begin`) and filled with
        whatever moments of the exchange the transport can observe; the rest stay None. The
        runtime passes it only for calls that asked for one, so a transport written before
        it existed keeps working for every other call.

        Raises:
            TransportError (or a subclass): could not connect, or the connection broke first.
        """
        ...

    async def aclose(self) -> None:
        """Close every pooled connection."""
        ...
