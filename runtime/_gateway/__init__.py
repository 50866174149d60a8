"""``sluice serve``: an OpenAI- and Anthropic-compatible HTTP gateway in front of one runtime.

* :mod:`.http`: the HTTP/1.1 server on trio with its limits and graceful drain; it reads
  heads with :mod:`.request_head` and chunked bodies with :mod:`.chunked`;
* :mod:`.json_body`: request bodies as JSON, nesting bounded;
* :mod:`.app`: routes, virtual-key checks, translation into ``ChatRequest`` and back;
* :mod:`.openai_wire`, :mod:`.anthropic_wire`: the two client wire formats;
* :mod:`.vkeys`: virtual keys (hashed tokens with quotas, a budget and allowed models);
* :mod:`.run`: :func:`serve`, :func:`open_gateway`, and ``--workers`` on one port.

Not loaded by ``import sluice``; ``sluice.serve`` loads it on first use.
"""

from .app import Gateway, GatewaySettings
from .http import Request, Responder, Server, ServerLimits
from .run import open_gateway, serve, serve_workers
from .vkeys import KeyRing, VirtualKey, issue_key, revoke_key

__all__ = [
    "Gateway",
    "GatewaySettings",
    "KeyRing",
    "Request",
    "Responder",
    "Server",
    "ServerLimits",
    "VirtualKey",
    "issue_key",
    "open_gateway",
    "revoke_key",
    "serve",
    "serve_workers",
]
