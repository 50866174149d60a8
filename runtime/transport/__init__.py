"""The hot-path HTTP transports: what the ProviderActor sends requests through.

* :class:`FastTransport` (:mod:`.pool`): sluice's own trio-native HTTP/1.1 client, the default.
* :class:`HttpxTransport` (:mod:`.httpx_adapter`): the same interface over ``httpx.AsyncClient``,
  the fallback for what the fast one does not cover (HTTP/2, SOCKS or HTTPS proxies, custom
  auth flows), and a baseline to compare against.
* :class:`HttpPhases` (:mod:`.phases`): an optional per-request record of where the time went
  on the wire (connect, time to headers, receive, connection reused), filled by the fast
  transport when a caller passes one to ``send``.

Both implement :class:`HotTransport` (:mod:`.base`) and raise only :class:`TransportError` and
its subclasses (:mod:`.errors`). Importing this package is cheap: each name is imported from
its module on first use, so neither the HTTP code nor httpx loads until a transport is asked for.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._base import HotResponse as HotResponse
    from ._base import HotTransport as HotTransport
    from ._errors import ConnectError as ConnectError
    from ._errors import ConnectTimeout as ConnectTimeout
    from ._errors import ProxyError as ProxyError
    from ._errors import ReadError as ReadError
    from ._errors import RemoteProtocolError as RemoteProtocolError
    from ._errors import ResponseTimeout as ResponseTimeout
    from ._errors import ResponseTooLarge as ResponseTooLarge
    from ._errors import TLSError as TLSError
    from ._errors import TransportError as TransportError
    from ._errors import WriteError as WriteError
    from ._httpx_adapter import HttpxResponse as HttpxResponse
    from ._httpx_adapter import HttpxTransport as HttpxTransport
    from ._phases import HttpPhases as HttpPhases
    from ._pool import FastResponse as FastResponse
    from ._pool import FastTransport as FastTransport
    from ._statistics import TransportStatistics as TransportStatistics

__all__ = [
    "ConnectError",
    "ConnectTimeout",
    "FastResponse",
    "FastTransport",
    "HotResponse",
    "HotTransport",
    "HttpPhases",
    "HttpxResponse",
    "HttpxTransport",
    "ProxyError",
    "ReadError",
    "RemoteProtocolError",
    "ResponseTimeout",
    "ResponseTooLarge",
    "TLSError",
    "TransportError",
    "TransportStatistics",
    "WriteError",
]

_HOMES = {
    "ConnectError": "_errors",
    "ConnectTimeout": "_errors",
    "FastResponse": "_pool",
    "FastTransport": "_pool",
    "HotResponse": "_base",
    "HotTransport": "_base",
    "HttpPhases": "_phases",
    "HttpxResponse": "_httpx_adapter",
    "HttpxTransport": "_httpx_adapter",
    "ProxyError": "_errors",
    "ReadError": "_errors",
    "RemoteProtocolError": "_errors",
    "ResponseTimeout": "_errors",
    "ResponseTooLarge": "_errors",
    "TLSError": "_errors",
    "TransportError": "_errors",
    "TransportStatistics": "_statistics",
    "WriteError": "_errors",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{home}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
