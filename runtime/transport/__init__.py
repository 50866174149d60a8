"""The hot-path HTTP transports: what the ProviderActor sends requests through.

* :class:`FastTransport` (:mod:`.pool`): sluice's own trio-native HTTP/1.1 client, the default.
* :class:`HttpxTransport` (:mod:`.httpx_adapter`): the same interface over ``httpx.AsyncClient``,
  the fallback for what the fast one does not cover (HTTP/2, SOCKS or HTTPS proxies, custom
  auth flows), and a baseline to compare against.

Both implement :class:`HotTransport` (:mod:`.base`) and raise only :class:`TransportError` and
its subclasses (:mod:`.errors`). Importing this package is cheap: each name is imported from
its module on first use, so neither the HTTP code nor httpx loads until a transport is asked for.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .base import HotResponse as HotResponse
    from .base import HotTransport as HotTransport
    from .errors import ConnectError as ConnectError
    from .errors import ConnectTimeout as ConnectTimeout
    from .errors import ProxyError as ProxyError
    from .errors import ReadError as ReadError
    from .errors import RemoteProtocolError as RemoteProtocolError
    from .errors import ResponseTimeout as ResponseTimeout
    from .errors import ResponseTooLarge as ResponseTooLarge
    from .errors import TLSError as TLSError
    from .errors import TransportError as TransportError
    from .errors import WriteError as WriteError
    from .httpx_adapter import HttpxResponse as HttpxResponse
    from .httpx_adapter import HttpxTransport as HttpxTransport
    from .pool import FastResponse as FastResponse
    from .pool import FastTransport as FastTransport
    from .pool import TransportStatistics as TransportStatistics

__all__ = [
    "ConnectError",
    "ConnectTimeout",
    "FastResponse",
    "FastTransport",
    "HotResponse",
    "HotTransport",
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
    "ConnectError": "errors",
    "ConnectTimeout": "errors",
    "FastResponse": "pool",
    "FastTransport": "pool",
    "HotResponse": "base",
    "HotTransport": "base",
    "HttpxResponse": "httpx_adapter",
    "HttpxTransport": "httpx_adapter",
    "ProxyError": "errors",
    "ReadError": "errors",
    "RemoteProtocolError": "errors",
    "ResponseTimeout": "errors",
    "ResponseTooLarge": "errors",
    "TLSError": "errors",
    "TransportError": "errors",
    "TransportStatistics": "pool",
    "WriteError": "errors",
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
