"""Which batch API a provider has, and its backend, reached as the realtime lane reaches it.

:func:`backend_for` resolves the provider exactly as a call does (:meth:`Runtime.resolve_provider`:
the config, the key from the config, the environment or the key store), builds its codec (its
quirks and parameters), and sends through the runtime's transport when it was given one
(``open_runtime(transport=...)``, as tests do), else through a transport of the provider's
own kind (``transport = "fast" | "httpx"``), opened for each control call and closed after it:
a backend holds no connection between calls, so nothing is left open whatever the engine's
exit path. A provider served in-process (``sim`` without a base URL) gets a simulator of its
own, built from the runtime's simulator config and reached without sockets.

Which builtin providers have which API is :attr:`ProviderDefinition.batch_api`; a custom
provider (one the config defines) has none.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from ..._messages import ChatRequest
from ..._redact import secrets_of
from ...providers._codec import provider_codec
from .control import Control

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable
    from contextlib import AbstractAsyncContextManager

    import httpx

    from ..._protocols.base import Codec
    from ..._runtime import Runtime
    from ...providers._registry import ResolvedProvider
    from ...transport._base import HotTransport
    from .backend import BatchBackend

__all__ = ["backend_for", "control_headers"]

_LOCAL_URL = "http://sim.invalid/v1"


def backend_for(rt: Runtime, provider: str) -> BatchBackend | None:
    """The batch backend of ``provider`` (a name, without a model), or None when it has no
    batch API (its lines then run on the realtime lane).

    Raises:
        ConfigError: no provider has that name, or it has no key.
    """
    spec = rt.resolve_provider(provider)
    api = spec.definition.batch_api if spec.definition is not None else None
    if api is None:
        return None
    codec = provider_codec(spec)
    base_url, transport = _reach(rt, spec)
    control = Control(
        base_url=base_url,
        headers=control_headers(spec, codec, base_url),
        transport=transport,
        codec=codec,
        retry=rt.config.retry,
        secrets=secrets_of(spec.api_key, spec.headers),
    )
    expected = spec.rate_limit.expected_output_tokens
    if api == "anthropic":
        from .anthropic import AnthropicBatchBackend

        return AnthropicBatchBackend(control, codec)
    from .openai import OpenAIBatchBackend

    return OpenAIBatchBackend(control, codec, expected_output_tokens=expected)


def control_headers(
    spec: ResolvedProvider, codec: Codec, base_url: str
) -> tuple[tuple[str, str], ...]:
    """The headers a call to ``spec`` sends (user agent, protocol version, the key where the
    provider wants it, the provider's own headers), as its codec builds them for a call, less
    the body's ``content-type`` and ``accept``."""
    probe = codec.build_request(
        ChatRequest(model=f"{spec.name}:probe", messages="ping", stream=False),
        base_url=base_url,
        api_key=spec.api_key.reveal() if spec.api_key else None,
        headers=spec.headers,
    )
    return tuple((n, v) for n, v in probe.headers if n not in ("content-type", "accept"))


def _reach(
    rt: Runtime, spec: ResolvedProvider
) -> tuple[str, Callable[[], AbstractAsyncContextManager[HotTransport]]]:
    """Where ``spec``'s batch API is, and how one control call gets a transport to it."""
    given = rt.transport
    if given is not None:
        return spec.base_url or _LOCAL_URL, _shared(_hot(given))
    if spec.base_url is None:
        from ...simulator import SimulatorApp, mock_transport

        app = SimulatorApp(rt.simulator_config)
        return _LOCAL_URL, _shared(_hot(mock_transport(app)))
    return spec.base_url, _own(spec)


def _hot(given: httpx.AsyncBaseTransport | HotTransport) -> HotTransport:
    """``given`` as a hot transport: an httpx one behind the adapter, used as it is."""
    if hasattr(given, "handle_async_request"):
        import httpx

        from ...transport import HttpxTransport

        assert isinstance(given, httpx.AsyncBaseTransport)
        return HttpxTransport(httpx.AsyncClient(transport=given, timeout=None))
    return given


def _shared(transport: HotTransport) -> Callable[[], AbstractAsyncContextManager[HotTransport]]:
    """Every call through ``transport``, which stays open (it is the runtime's, or a
    socket-free simulator's)."""

    @contextlib.asynccontextmanager
    async def use() -> AsyncIterator[HotTransport]:
        yield transport

    return use


def _own(spec: ResolvedProvider) -> Callable[[], AbstractAsyncContextManager[HotTransport]]:
    """A transport of ``spec``'s kind for each call, closed after it."""
    from ...providers._operations import open_transport

    @contextlib.asynccontextmanager
    async def use() -> AsyncIterator[HotTransport]:
        import trio

        transport = open_transport(spec)
        try:
            yield transport
        finally:
            with trio.CancelScope(shield=True):
                await transport.aclose()

    return use
