"""A fake LLM server speaking OpenAI chat completions and Anthropic messages (and their batch
APIs): the ``sim:`` provider, our test target, a load target.

One request-handling core (:class:`SimulatorApp`, built from a :class:`SimulatorConfig`) with
two front ends: a real HTTP/1.1 server (:func:`serve_simulator`, :func:`run_simulator`) and an
``httpx.MockTransport`` (:func:`mock_transport`) for socket-free tests under trio's MockClock.
Faults are scripted, sent per request in an ``x-sim-fault`` header, or drawn at random
(:mod:`.directives` lists them); quotas (``rpm``, ``tpm``) answer 429 and report themselves in
``x-ratelimit-*`` headers.

A refused connection is not something a server can simulate: to test it, point the client at
a port nothing listens on, for example one the OS just handed out and that was closed again::

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # http://127.0.0.1:{port}/v1 now refuses connections

Importing this package is cheap: each name is imported from its module on first use, so h11
and httpx load only when the server or the transport is asked for.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._app import Headers as Headers
    from ._app import SimResponse as SimResponse
    from ._app import SimulatedDisconnect as SimulatedDisconnect
    from ._app import SimulatedReset as SimulatedReset
    from ._app import SimulatorApp as SimulatorApp
    from ._batch_core import BatchStats as BatchStats
    from ._config import SimulatorConfig as SimulatorConfig
    from ._directives import Directive as Directive
    from ._directives import parse_directive as parse_directive
    from ._server import Draining as Draining
    from ._server import run_simulator as run_simulator
    from ._server import serve_connection as serve_connection
    from ._server import serve_simulator as serve_simulator
    from ._transport import mock_transport as mock_transport

__all__ = [
    "BatchStats",
    "Directive",
    "Draining",
    "Headers",
    "SimResponse",
    "SimulatedDisconnect",
    "SimulatedReset",
    "SimulatorApp",
    "SimulatorConfig",
    "mock_transport",
    "parse_directive",
    "run_simulator",
    "serve_connection",
    "serve_simulator",
]

_HOMES = {
    "BatchStats": "_batch_core",
    "Headers": "_app",
    "Draining": "_server",
    "Directive": "_directives",
    "SimResponse": "_app",
    "SimulatedDisconnect": "_app",
    "SimulatedReset": "_app",
    "SimulatorApp": "_app",
    "SimulatorConfig": "_config",
    "parse_directive": "_directives",
    "run_simulator": "_server",
    "serve_connection": "_server",
    "serve_simulator": "_server",
    "mock_transport": "_transport",
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
