"""Provider startup: from a provider's name to a running ProviderActor and its mailbox.

A provider's actor starts on its first use (a call, a fallback, a model group's placement,
the load tester's warm-up): its name is resolved against the registry and the config
(:func:`~sluice.providers._registry.resolve_provider`), a provider without a base URL is served
by the given transport or the runtime's in-process simulator, the transport is chosen (the one
given to ``open_runtime``, else sluice's own or httpx as the provider asks), and the actor runs
under the restarter in the runtime's infrastructure nursery. A reload resolves every started
provider again and tells each actor through its mailbox.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import attrs
import trio

from sluice.actors._doors import ProviderDoor
from sluice.actors._provider import run_provider
from sluice.actors._provider_context import ProviderContext
from sluice.actors._rate_limiter import RateLimiterHandle
from sluice.actors._restart import run_restarting
from sluice.actors._tell import MAILBOX_BUFFER, put
from sluice.actors._token_ledger import TokenLedgerHandle

from ._errors import ConfigError
from ._mail import ProviderMailbox, ProviderMsg
from ._messages import split_model
from .providers._codec import provider_codec
from .providers._registry import ResolvedProvider, resolve_provider

if TYPE_CHECKING:
    # Only types here, also in ProviderWiring's fields: httpx loads only when a transport of
    # its kind is given, the observer and the simulator when a runtime opens.
    import httpx  # noqa: TC004

    from ._config import RateLimitConfig, RuntimeConfig
    from ._observe.observer import Observer  # noqa: TC004
    from .simulator._config import SimulatorConfig  # noqa: TC004
    from .transport._base import HotTransport  # noqa: TC004

__all__ = ["Providers", "Route", "hot_transport"]

Route = tuple[ResolvedProvider, ProviderMailbox]
"""A provider's resolved settings and its actor's mailbox."""

_SIM_URL_WITH_TRANSPORT = "http://sim.invalid/v1"


@attrs.frozen(eq=False, repr=False)
class ProviderWiring:
    """What every ProviderActor is started with: the runtime's other actors and the sources of
    its settings (made once by ``open_runtime``)."""

    limiter: RateLimiterHandle
    ledger: TokenLedgerHandle
    transport: httpx.AsyncBaseTransport | HotTransport | None
    """What every provider sends through instead of its own (``open_runtime``'s ``transport``)."""
    environ: Mapping[str, str] | None
    """Where keys are looked up (None: ``os.environ``)."""
    simulator: SimulatorConfig | None
    """The in-process simulator's config, for providers without a base URL (None: its
    defaults, made on first need: a runtime without ``sim`` models never loads the
    simulator)."""
    observer: Observer | None = None

    def simulator_config(self) -> SimulatorConfig:
        """The simulator's config: the one given, else its defaults."""
        if self.simulator is not None:
            return self.simulator
        from sluice.simulator import SimulatorConfig

        return SimulatorConfig()


class Providers:
    """Starts one ProviderActor per backend on first use, in the infrastructure nursery, and
    keeps each started provider's settings and mailbox. Used by the caller tasks (in trio's one
    thread); one lock makes concurrent first uses start an actor once."""

    def __init__(
        self,
        config: RuntimeConfig,
        wiring: ProviderWiring,
        infra: trio.Nursery,
        services: trio.Nursery,
    ) -> None:
        self.config = config
        """The config providers are resolved from: the runtime's, swapped by :meth:`reload`."""
        self.wiring = wiring
        self._infra = infra
        self._services = services
        self._lock = trio.Lock()
        self._started: dict[str, Route] = {}
        self._contexts: dict[str, ProviderContext] = {}
        self._mailboxes: list[ProviderDoor] = []
        """Every mailbox opened, also of providers a reload dropped: closed at shutdown."""
        self._sim_url: str | None = None

    def resolve(self, name: str) -> ResolvedProvider:
        """Provider ``name`` as the current config and environment resolve it, started or not.

        Raises:
            ConfigError: no provider has that name, or it has no key.
        """
        return resolve_provider(name, self.config, self.wiring.environ)

    async def get(self, name: str) -> Route:
        """Provider ``name``'s settings and mailbox, its actor started first if it was not.

        Raises:
            ConfigError: no provider has that name, or it has no key.
        """
        found = self._started.get(name)
        if found is not None:
            return found
        async with self._lock:
            found = self._started.get(name)
            if found is None:
                found = self._started[name] = await self._start(name)
            return found

    async def routes(self, names: tuple[str, ...]) -> tuple[Route, ...]:
        """:meth:`get` for each of ``names`` (a model group's deployments), in order."""
        try:  # every call after the first: no Python frame per name
            return tuple(map(self._started.__getitem__, names))
        except KeyError:
            return tuple([await self.get(name) for name in names])

    async def route(self, model: str) -> Route:
        """The route of a ``provider:model`` string (the Supervisor's fallbacks).

        Raises:
            ConfigError: the model names an unknown provider, or one without a key.
        """
        return await self.get(split_model(model)[0])

    def in_flight(self) -> dict[str, int]:
        """Attempts running now, per started provider."""
        return {name: ctx.state.in_flight for name, ctx in self._contexts.items()}

    def spec(self, name: str) -> ResolvedProvider | None:
        """Started provider ``name``'s settings as last resolved; None if it has not started
        (or a reload dropped it)."""
        found = self._started.get(name)
        return None if found is None else found[0]

    def names(self) -> list[str]:
        return list(self._started)

    def rate_limits(self) -> dict[str, RateLimitConfig]:
        """Each started provider's ``rate_limit`` (for the RateLimiter's ``Relimit``)."""
        return {name: spec.rate_limit for name, (spec, _) in self._started.items()}

    def close(self) -> None:
        """Close every actor's mailbox: each finishes the attempts it holds and returns."""
        for mailbox in self._mailboxes:
            mailbox.close()

    async def reload(self, config: RuntimeConfig) -> None:
        """Resolve every started provider again from ``config``, and take it as the config.

        Each actor, its mailbox and its connection pool stay; new calls get the new settings
        (limits, deadlines, breaker), and the actor is told through its mailbox
        (:class:`~sluice._mail_rare.ReloadProvider`), so each attempt it starts from then on,
        also of calls already in flight, sends with the new key, headers and URL. A provider the
        config no longer defines stops taking new calls; the calls it holds finish.

        Raises:
            ConfigError: a provider cannot be resolved (then nothing was changed).
        """
        fresh: dict[str, ResolvedProvider | None] = {}
        for name in self._started:
            try:
                fresh[name] = resolve_provider(name, config, self.wiring.environ)
            except ConfigError:
                if name in config.providers:
                    raise
                fresh[name] = None  # no longer defined
        self.config = config
        from ._mail_rare import ReloadProvider  # loaded by the first reload

        for name, spec in fresh.items():
            old, mailbox = self._started[name]
            if spec is None:
                del self._started[name]
                continue
            if spec.base_url is None:  # served here: as the server serves it
                spec = attrs.evolve(
                    spec,
                    base_url=old.base_url,
                    capabilities=old.capabilities,
                    model_capabilities=old.model_capabilities,
                )
            self._started[name] = (spec, mailbox)
            try:
                await put(mailbox, ReloadProvider(spec))
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass  # the actor has stopped (the runtime is shutting down)

    async def _start(self, name: str) -> Route:
        spec = self.resolve(name)
        codec = provider_codec(spec)
        base_url = spec.base_url
        if base_url is None:
            base_url, spec = await self._local_server(spec)
        wiring = self.wiring
        limits = self.config.reply_limits
        transport, owned = hot_transport(spec, wiring.transport, limits.head_timeout)
        ctx = ProviderContext(
            spec,
            base_url,
            transport,
            codec,
            wiring.limiter,
            wiring.ledger,
            limits=limits,
            observer=wiring.observer,
        )
        self._contexts[name] = ctx
        send, inbox = trio.open_memory_channel[ProviderMsg](MAILBOX_BUFFER)
        await self._infra.start(_provider_task, ctx, inbox, owned, name=f"provider {name}")
        door = ProviderDoor(send, ctx.state)
        self._mailboxes.append(door)
        return spec, door

    async def _local_server(self, spec: ResolvedProvider) -> tuple[str, ResolvedProvider]:
        """Where a provider without a base URL is served: by the given transport, else by
        this runtime's own in-process server, started on first need. With ``spec`` as that
        server serves it: its config may decide every model's tool capabilities."""
        if self.wiring.transport is not None:
            return _SIM_URL_WITH_TRANSPORT, spec
        served = self.wiring.simulator_config()
        if self._sim_url is None:
            from sluice.simulator import serve_simulator

            port = await self._services.start(serve_simulator, served)
            self._sim_url = f"http://127.0.0.1:{port}/v1"
        if served.served_capabilities is not None:
            spec = attrs.evolve(
                spec, capabilities=served.served_capabilities, model_capabilities={}
            )
        return self._sim_url, spec


def hot_transport(
    spec: ResolvedProvider,
    given: httpx.AsyncBaseTransport | HotTransport | None,
    head_timeout: float | None = None,
) -> tuple[HotTransport, bool]:
    """The transport a provider sends through, and whether the provider owns (closes) it.

    A given httpx transport (tests use ``httpx.MockTransport``) goes behind the httpx adapter;
    a given hot transport is used as it is and stays the caller's to close.
    """
    # Each branch imports its own transport: httpx (which loads rich and click when they are
    # installed) is only for the httpx branches, never for a call on the fast transport.
    if given is not None and hasattr(given, "handle_async_request"):
        import httpx

        from sluice.transport import HttpxTransport

        assert isinstance(given, httpx.AsyncBaseTransport)

        client = httpx.AsyncClient(
            transport=given, timeout=httpx.Timeout(None, connect=spec.connect_timeout)
        )
        return HttpxTransport(client), True
    if given is not None:
        return given, False
    if spec.transport == "httpx":
        from sluice.transport import HttpxTransport

        return HttpxTransport(
            max_connections=spec.max_connections, connect_timeout=spec.connect_timeout
        ), True
    from sluice.transport import FastTransport

    return FastTransport(
        max_connections=spec.max_connections,
        connect_timeout=spec.connect_timeout,
        head_timeout=head_timeout,
    ), True


async def _provider_task(
    ctx: ProviderContext,
    inbox: trio.MemoryReceiveChannel[ProviderMsg],
    owned: bool,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    try:
        await run_restarting(
            f"provider {ctx.spec.name}",
            run_provider,
            inbox,
            ctx,
            on_restart=ctx.observer.actor_restarted if ctx.observer is not None else None,
            task_status=task_status,
        )
    finally:
        if owned:
            with trio.move_on_after(5, shield=True):
                await ctx.transport.aclose()
