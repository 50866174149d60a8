"""What the embedding codecs share: request headers, and checking the vectors a reply holds.
Pure.

A reply's vectors are handed on as the lists the JSON parser made (no copy per value); each is
checked once to hold only numbers, so a reply that carries something else fails here, naming
the vector, instead of deep in the caller's arithmetic.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .decode_shared import malformed
from .wire import add_headers

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from .._embeddings import EmbedRequest
    from .._errors import ProtocolError

__all__ = ["checked_vector", "request_headers", "wrong_count"]


def checked_vector(values: object, index: int, body: bytes) -> list[float]:
    """``values`` as vector number ``index`` of the reply ``body``.

    Raises:
        ProtocolError: ``values`` is not a non-empty list of numbers.
    """
    if type(values) is not list or not values:
        raise malformed(f"embedding {index} of the reply is not a list of numbers", body)
    try:
        # sum() refuses strings, None, lists and objects at C speed; only bool slips through,
        # and no server sends true as a coordinate.
        sum(values)
    except TypeError:
        raise malformed(
            f"embedding {index} of the reply holds a value that is no number", body
        ) from None
    return values


def wrong_count(vectors: Sequence[object], inputs: int, body: bytes) -> ProtocolError:
    """The error for a reply whose number of vectors is not the number of inputs sent."""
    return malformed(f"the reply holds {len(vectors)} embeddings for {inputs} inputs", body)


def request_headers(
    own: dict[str, str],
    request: EmbedRequest,
    configured: Mapping[str, str] | None,
) -> tuple[tuple[str, str], ...]:
    """The headers of an embedding request: the codec's ``own`` (credentials among them),
    then the request's ``extra_headers`` (never credentials: :func:`.wire.add_headers`), then
    the provider's ``configured`` ones, which replace any of the same name."""
    if request.extra_headers:
        add_headers(own, request.extra_headers, configured)
    elif configured:
        for name, value in configured.items():
            own[name.lower()] = value
    return tuple(own.items())
