"""The runtime: starts the actors, wires them together, and is the handle users call.

This is the one module of ``runtime/`` that starts tasks. Three nested nurseries encode the
shutdown order: the Supervisor (front) stops first and lets every call in flight end; then the
providers, the RateLimiter and the TokenLedger see their mailboxes close and return; last, local
services (the in-process simulator) are cancelled.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from functools import partial
from typing import TYPE_CHECKING, Any, cast

import attrs
import trio

from sluice.actors._provider import ProviderContext, run_provider
from sluice.actors._rate_limiter import RateLimiterHandle, run_rate_limiter
from sluice.actors._restart import run_restarting
from sluice.actors._supervisor import SupervisorPeers, run_supervisor
from sluice.actors._tell import MAILBOX_BUFFER, put, take
from sluice.actors._token_ledger import TokenLedgerHandle, run_token_ledger

from ._config import RuntimeConfig, config_from_env
from ._cursor import AsyncEventCursor
from ._errors import ConfigError, RuntimeClosed, SluiceError
from ._exception_groups import sole_failure
from ._ledger.setup import LedgerSetup, open_ledger
from ._limits.cost import estimate_cost
from ._mail import (
    Call,
    EventBatch,
    KeyStatistics,
    LedgerMsg,
    LedgerTotals,
    ProviderMsg,
    RateLimiterMsg,
    Submit,
    SupervisorMsg,
)
from ._messages import ChatRequest, ChatResult, Deadlines, Message, split_model
from ._record import Record
from ._retry_budget import RetryBudget
from ._routing import DeploymentStatistics, Routing, breaker_mark, slow_mark
from .providers._codec import provider_codec
from .providers._registry import ResolvedProvider, resolve_provider

if TYPE_CHECKING:
    import httpx

    from ._cache import ResponseCache
    from ._capabilities import ToolCapabilities
    from ._ledger.store import LedgerStore
    from ._limits.store import QuotaStore
    from ._observe.metrics import Metrics
    from ._observe.observer import Observer
    from ._observe.records import Hooks
    from ._routing import SharedMarks
    from ._tools.preparation import Prepared
    from .simulator._config import SimulatorConfig
    from .transport._base import HotTransport
    from .transport._phases import HttpPhases

__all__ = [
    "CallStream",
    "MapOutcome",
    "MapOutcomes",
    "ProviderHealth",
    "Runtime",
    "RuntimeStatistics",
    "open_runtime",
]

_SIM_URL_WITH_TRANSPORT = "http://sim.invalid/v1"
_DRAIN_POLL = 0.05
_GAUGES_EVERY = 5.0

_SCRAPE_WAIT = 0.25
"""Seconds a scrape waits for fresh statistics before it shows the last snapshot: the
RateLimiter answers between admissions, and one may be waiting on a quota store that does not
answer."""


class CallStream(AsyncEventCursor):
    """The consumer's end of one call: iterate it for events; then read ``result`` or ``error``.

    Created by :meth:`Runtime.stream`, never directly. Leaving the ``async with`` block early
    abandons the call: its HTTP request is cancelled and nothing else is disturbed.
    """

    def __init__(
        self,
        call_id: str,
        receive: trio.MemoryReceiveChannel[EventBatch],
        on_result: Callable[[ChatResult], None] | None = None,
    ) -> None:
        super().__init__(call_id)
        self._receive = receive
        self._on_result = on_result
        """Told the result when ``Completed`` arrives (the response cache stores it)."""

    async def _next_batch(self) -> EventBatch | None:
        receive = self._receive
        try:
            batch = await take(receive)
        except trio.EndOfChannel:
            return self._arrived(None)
        # Take whatever else has arrived too: one wake-up for a burst of batches.
        while True:
            try:
                more = receive.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel):
                break
            batch = [*batch, *more]
        return self._arrived(batch)

    def _completed(self, result: ChatResult) -> None:
        if self._on_result is not None:
            self._on_result(result)

    async def next_events(self) -> EventBatch | None:
        """The next events that arrived together (what one or more network reads decoded);
        None once the call has ended (``result`` or ``error`` is then set).

        For relays that write one message per burst (the gateway, the asyncio and blocking
        doors); do not mix with iteration.
        """
        return await self._next_batch()


@attrs.frozen(repr=False)
class RuntimeStatistics(Record):
    """A snapshot of the runtime: what is in flight and what each quota key holds.

    After every call has ended, every count here is zero: anything else is a leak.
    """

    calls_in_flight: int
    attempts_in_flight: Mapping[str, int]
    """Per provider."""
    quotas: Mapping[str, KeyStatistics]
    retry_budget_available: float
    breakers: Mapping[str, str]
    """Per provider: ``closed``, ``open`` or ``half_open``."""
    groups: Mapping[str, tuple[DeploymentStatistics, ...]] = attrs.field(factory=dict)
    """Per model group used so far: its deployments, in the configured order."""


@attrs.frozen(repr=False)
class ProviderHealth(Record):
    """Whether new calls to one provider can go out now, and why not."""

    provider: str
    usable: bool
    """Its breaker lets attempts through and none of its quota keys is cooling down."""
    breaker: str
    """``closed``, ``open`` or ``half_open`` (``closed`` without a breaker)."""
    cooldown_left: float
    """Seconds until its longest cooldown (after a 429, or an exhausted quota) ends."""
    last_error: str | None
    """The class and message of its last failed attempt."""
    last_error_age: float | None
    """Seconds since then."""


@attrs.frozen(repr=False)
class MapOutcome(Record):
    """One finished request of :meth:`Runtime.map`: exactly one of ``result`` and ``error``."""

    index: int
    """Position of the request in the input."""
    request: ChatRequest
    result: ChatResult | None
    error: SluiceError | None


class MapOutcomes:
    """The outcomes of :meth:`Runtime.map`, in completion order: ``async for o in outcomes``."""

    def __init__(self, receive: trio.MemoryReceiveChannel[MapOutcome]) -> None:
        self._receive = receive

    def __aiter__(self) -> MapOutcomes:
        return self

    async def __anext__(self) -> MapOutcome:
        try:
            return await take(self._receive)
        except trio.EndOfChannel:
            raise StopAsyncIteration from None

    async def next_batch(self) -> list[MapOutcome] | None:
        """The next outcome and every other one already there (one wake-up for a burst);
        None once every request has its outcome. For the front doors, which pass outcomes to
        another event loop or thread in batches."""
        receive = self._receive
        try:
            batch = [await take(receive)]
        except trio.EndOfChannel:
            return None
        while True:
            try:
                batch.append(receive.receive_nowait())
            except (trio.WouldBlock, trio.EndOfChannel):
                return batch


class _Providers:
    """Starts one ProviderActor per backend on first use, in the infrastructure nursery."""

    def __init__(self, rt: Runtime, infra: trio.Nursery, services: trio.Nursery) -> None:
        self._rt = rt
        self._infra = infra
        self._services = services
        self._lock = trio.Lock()
        self._started: dict[str, tuple[ResolvedProvider, trio.MemorySendChannel[ProviderMsg]]] = {}
        self._contexts: dict[str, ProviderContext] = {}
        self._sim_url: str | None = None

    async def get(self, name: str) -> tuple[ResolvedProvider, trio.MemorySendChannel[ProviderMsg]]:
        found = self._started.get(name)
        if found is not None:
            return found
        async with self._lock:
            found = self._started.get(name)
            if found is None:
                found = self._started[name] = await self._start(name)
            return found

    async def _start(
        self, name: str
    ) -> tuple[ResolvedProvider, trio.MemorySendChannel[ProviderMsg]]:
        rt = self._rt
        spec = resolve_provider(name, rt.config, rt._environ)
        codec = provider_codec(spec)
        base_url = spec.base_url
        if base_url is None:
            base_url, spec = await self._local_server(spec)
        limits = rt.config.reply_limits
        transport, owned = _hot_transport(spec, rt._transport, limits.head_timeout)
        ctx = ProviderContext(
            spec,
            base_url,
            transport,
            codec,
            rt._limiter,
            rt._ledger,
            limits=limits,
            observer=rt._observer,
        )
        self._contexts[name] = ctx
        send, inbox = trio.open_memory_channel[ProviderMsg](MAILBOX_BUFFER)
        await self._infra.start(_provider_task, ctx, inbox, owned, name=f"provider {name}")
        rt._closers.append(send.close)
        return spec, send

    def in_flight(self) -> dict[str, int]:
        return {name: ctx.in_flight[0] for name, ctx in self._contexts.items()}

    def names(self) -> list[str]:
        return list(self._started)

    def started(self) -> dict[str, tuple[ResolvedProvider, trio.MemorySendChannel[ProviderMsg]]]:
        return dict(self._started)

    def reload(self) -> None:
        """Resolve every started provider again from the runtime's (new) config.

        Its actor, mailbox and connection pool stay; new calls get the new settings (limits,
        deadlines, breaker), and each attempt from now on, also of calls already in flight,
        sends with the new key, headers and URL. A provider the config no longer defines
        stops taking new calls; the calls it holds finish.

        Raises:
            ConfigError: a provider cannot be resolved (then nothing was changed).
        """
        rt = self._rt
        fresh: dict[str, ResolvedProvider | None] = {}
        for name in self._started:
            try:
                fresh[name] = resolve_provider(name, rt.config, rt._environ)
            except ConfigError:
                if name in rt.config.providers:
                    raise
                fresh[name] = None  # no longer defined
        for name, spec in fresh.items():
            if spec is None:
                del self._started[name]
                continue
            old, mailbox = self._started[name]
            if spec.base_url is None:  # served here: as the server serves it
                spec = attrs.evolve(
                    spec,
                    base_url=old.base_url,
                    capabilities=old.capabilities,
                    model_capabilities=old.model_capabilities,
                )
            self._started[name] = (spec, mailbox)
            self._contexts[name].reload(spec)


    async def _local_server(self, spec: ResolvedProvider) -> tuple[str, ResolvedProvider]:
        """Where a provider without a base URL is served: by the given transport, else by
        this runtime's own in-process server, started on first need. With ``spec`` as that
        server serves it: its config may decide every model's tool capabilities."""
        if self._rt._transport is not None:
            return _SIM_URL_WITH_TRANSPORT, spec
        served = self._rt._simulator_config
        if self._sim_url is None:
            from sluice.simulator import serve_simulator

            port = await self._services.start(serve_simulator, served)
            self._sim_url = f"http://127.0.0.1:{port}/v1"
        if served.served_capabilities is not None:
            spec = attrs.evolve(
                spec, capabilities=served.served_capabilities, model_capabilities={}
            )
        return self._sim_url, spec


def _hot_transport(
    spec: ResolvedProvider,
    given: httpx.AsyncBaseTransport | HotTransport | None,
    head_timeout: float | None = None,
) -> tuple[HotTransport, bool]:
    """The transport a provider sends through, and whether the provider owns (closes) it.

    A given httpx transport (tests use ``httpx.MockTransport``) goes behind the httpx adapter;
    a given hot transport is used as it is and stays the caller's to close.
    """
    from sluice.transport import FastTransport, HttpxTransport

    if given is not None and hasattr(given, "handle_async_request"):
        import httpx  # only here: the fast path does not load httpx at all

        assert isinstance(given, httpx.AsyncBaseTransport)

        client = httpx.AsyncClient(
            transport=given, timeout=httpx.Timeout(None, connect=spec.connect_timeout)
        )
        return HttpxTransport(client), True
    if given is not None:
        return given, False
    if spec.transport == "httpx":
        return HttpxTransport(
            max_connections=spec.max_connections, connect_timeout=spec.connect_timeout
        ), True
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


def _merge(base: Deadlines, override: Deadlines) -> Deadlines:
    return Deadlines(
        total=override.total if override.total is not None else base.total,
        first_token=override.first_token if override.first_token is not None else base.first_token,
        idle=override.idle if override.idle is not None else base.idle,
    )


class Runtime:
    """The handle to a running sluice: submit calls here. Created by :func:`open_runtime`."""

    def __init__(
        self,
        config: RuntimeConfig,
        *,
        supervisor: trio.MemorySendChannel[SupervisorMsg],
        limiter: RateLimiterHandle,
        ledger: TokenLedgerHandle,
        transport: httpx.AsyncBaseTransport | HotTransport | None,
        environ: Mapping[str, str] | None,
        simulator_config: SimulatorConfig,
        observer: Observer | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.config = config
        self._observer = observer
        self._draining = False
        self.metrics_port: int | None = None
        self._trims = [0]
        """How many times the memory trimmer has run (see :mod:`._memory`)."""
        """The port of the metrics endpoint, once it listens (``config.metrics.port``)."""
        self._supervisor = supervisor
        self._limiter = limiter
        self._ledger = ledger
        self._transport = transport
        self._environ = environ
        self._simulator_config = simulator_config
        self._ids = itertools.count(1)
        self._closers: list[Any] = []
        self._peers: SupervisorPeers | None = None
        self._providers: _Providers | None = None
        self._cache: ResponseCache | None = None
        """Opened with the runtime when the config enables it, else by the first call that
        opts in (``response_cache=True``)."""
        self._cache_by_default = config.cache.enabled
        self._routing = Routing(config.groups, rng or random.Random())
        """Model groups' routing state; the Supervisor reports attempts' ends to it."""
        self._group_specs: dict[str, tuple[ResolvedProvider, ...]] = {}
        self._group_names: dict[str, tuple[tuple[str, str, str | None], ...]] = {}
        """Per group, what a shared store knows each deployment by (see _shared_names)."""

    async def _route(
        self, model: str
    ) -> tuple[ResolvedProvider, trio.MemorySendChannel[ProviderMsg]]:
        assert self._providers is not None
        return await self._providers.get(split_model(model)[0])

    async def start_provider(self, model: str) -> None:
        """Internal, for sluice's load tester: start the actor of the provider that serves
        ``model`` (``provider:model``) now, rather than on its first call: its codec loaded,
        its transport made, the in-process simulator serving.

        Raises:
            ConfigError: the model names an unknown provider, or one without a key.
        """
        await self._route(model)

    def resolve_provider(self, name: str) -> ResolvedProvider:
        """Internal, for the gateway: provider ``name`` as this runtime resolves it now (from
        its config and the environment it was given), whether or not it has started.

        Raises:
            ConfigError: no provider has that name, or it has no key.
        """
        return resolve_provider(name, self.config, self._environ)

    @property
    def transport(self) -> httpx.AsyncBaseTransport | HotTransport | None:
        """The transport every provider sends through instead of its own (``open_runtime``'s
        ``transport``); None when each provider makes its own."""
        return self._transport

    @property
    def simulator_config(self) -> SimulatorConfig:
        """Internal, for the provider batch lane: the config of the simulator this runtime
        serves in-process providers (``sim`` without a base URL) with."""
        return self._simulator_config

    def _tool_capabilities(self, spec: ResolvedProvider, model: str) -> ToolCapabilities:
        """What ``spec``'s backend can do with tools for ``model`` (no provider prefix).

        The registry's capabilities for the provider and model (a builtin's known defaults and
        per-model rules; at a custom ``base_url``, or for a custom provider, what its protocol's
        servers are assumed to do; for one served in-process, what its server says), then the
        model's entry in the config (``providers.NAME.models.MODEL.tools``).
        """
        caps = spec.tool_capabilities(model)
        user = self.config.providers.get(spec.name)
        entry = user.models.get(model) if user is not None else None
        return caps.merged(entry.tools if entry is not None else None)

    def _prepare(self, request: ChatRequest, spec: ResolvedProvider) -> Prepared | None:
        """``request`` prepared for ``spec``'s backend; None when it has nothing to do with
        tools (it is then sent as it is, and its replies are not finalized).

        Raises:
            ConfigError: the request's tools or ``tool_choice`` cannot be used.
        """
        if (
            not request.tools
            and request.tool_choice is None
            and request.parallel_tool_calls is None
        ):
            return None
        from ._tools.preparation import prepare  # only calls with tools load it

        caps = self._tool_capabilities(spec, split_model(request.model)[1])
        try:
            return prepare(request, caps, request.tool_options)
        except ConfigError as exc:
            raise ConfigError(f"{request.model}: {exc}") from None

    async def _submit(
        self, request: ChatRequest, *, quiet: bool = False, phases: HttpPhases | None = None
    ) -> tuple[CallStream, Call | None]:
        """Start ``request``: its stream, and the call (None when the response cache answered;
        the stream then already holds the replay). ``phases``: see :meth:`_stream`."""
        if ":" in request.model:
            return await self._start(request, quiet, phases=phases)
        placed, group, failover = await self._place_in_group(request)
        submitted = False
        try:
            stream, call = await self._start(placed, quiet, group, failover, phases)
            submitted = call is not None
            return stream, call
        finally:
            if not submitted:  # the Supervisor never got it: it will not report its end
                self._routing.finished(group, placed.model, None, None, trio.current_time())

    async def _start(
        self,
        request: ChatRequest,
        quiet: bool,
        group: str | None = None,
        failover: int = 0,
        phases: HttpPhases | None = None,
    ) -> tuple[CallStream, Call | None]:
        assert self._providers is not None
        provider_name, model = split_model(request.model)
        spec, mailbox = await self._providers.get(provider_name)
        call_id = f"c{next(self._ids)}"
        on_result = None
        use_cache = request.response_cache
        if use_cache or (use_cache is None and self._cache_by_default):
            cache = self._cache or await self._open_cache()
            try:
                key = cache.key(request, spec)  # the caller's request, never a prepared one
            except TypeError:
                key = None  # extra_body holds something without a JSON form: not cached
            if key is not None:
                hit = cache.get(key, call_id)
                if hit is not None:
                    return _replayed(hit, quiet), None
                on_result = cache.storer(key)
        prepared = self._prepare(request, spec)
        if prepared is not None:
            request = prepared.request
        deadlines = _merge(spec.deadlines, request.deadlines)
        now = trio.current_time()
        if self._draining:
            raise RuntimeClosed("the runtime is draining: it takes no new calls")
        send, receive = trio.open_memory_channel[EventBatch](self.config.stream_buffer)
        call = Call(
            call_id=call_id,
            request=request,
            provider=spec,
            provider_mailbox=mailbox,
            model=model,
            events=send,
            submitted_at=now,
            deadline=now + deadlines.total if deadlines.total is not None else math.inf,
            first_token_timeout=deadlines.first_token,
            idle_timeout=deadlines.idle,
            cost=estimate_cost(request, spec.rate_limit.expected_output_tokens),
            quiet=quiet,
            prepared=prepared,
            group=group,
            failover=failover,
            phases=phases,
        )
        try:
            await put(self._supervisor, Submit(call))
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            send.close()
            receive.close()
            raise RuntimeClosed("the runtime has stopped; open a new one") from exc
        if self._observer is not None:
            self._observer.call_started(call)
        return CallStream(call_id, receive, on_result), call

    async def _place_in_group(self, request: ChatRequest) -> tuple[ChatRequest, str, int]:
        """``request`` for model group ``request.model``, sent to the deployment its strategy
        chooses with the group's other deployments as failover targets ahead of the request's
        own fallbacks; the group's name; how many deployments lead the chain.

        Raises:
            ConfigError: no group has that name (a bare name is not ``provider:model``).
        """
        name = request.model
        group = self.config.groups.get(name)
        if group is None:
            known = ", ".join(repr(g) for g in sorted(self.config.groups)) or "none is configured"
            raise ConfigError(
                f"model {name!r} is neither 'provider:model' (e.g. 'openai:gpt-4o-mini') nor a "
                f"model group (groups: {known})"
            )
        routing = self._routing
        specs = self._group_specs.get(name)
        if specs is None:
            assert self._providers is not None
            found = [
                (await self._providers.get(split_model(d.model)[0]))[0] for d in group.deployments
            ]
            # Another call may have made the router while this one waited for the providers.
            specs = self._group_specs.setdefault(name, tuple(found))
            if name not in routing.routers:
                routing.add(name, [spec.rate_limit for spec in specs])
        models = [split_model(d.model)[1] for d in group.deployments]
        peers = self._peers
        now = trio.current_time()

        shared = routing.shared
        names = self._shared_names(name, specs, models) if shared is not None else ()

        def blocked(i: int) -> bool:
            if peers is not None and peers.breaker_open(specs[i], models[i], now):
                return True
            if shared is None:
                return False
            # What other processes know: a cooldown, a slow mark, a breaker they opened.
            quota_key, slow, breaker = names[i]
            if shared.cooling(quota_key, now) > 0 or shared.avoided(slow, now) > 0:
                return True
            return breaker is not None and shared.avoided(breaker, now) > 0

        order = routing.order(name, request, now, blocked)
        return _routed(request, order), name, len(order)

    def _shared_names(
        self, group: str, specs: tuple[ResolvedProvider, ...], models: list[str]
    ) -> tuple[tuple[str, str, str | None], ...]:
        """Per deployment of ``group``, the names a shared store knows it by: its quota key,
        its slow mark and its breaker's mark (None without a breaker). Made once per group,
        like the group's provider specs."""
        names = self._group_names.get(group)
        if names is None:
            peers = self._peers
            deployments = self.config.groups[group].deployments
            made = []
            for spec, model, deployment in zip(specs, models, deployments, strict=True):
                breaker = peers.breaker_key(spec, model) if peers is not None else None
                made.append(
                    (
                        spec.quota_key(model),
                        slow_mark(deployment.model),
                        None if breaker is None else breaker_mark(breaker),
                    )
                )
            names = self._group_names[group] = tuple(made)
        return names

    async def _open_cache(self) -> ResponseCache:
        from ._cache import ResponseCache  # only a runtime that caches loads the cache

        try:
            cache = await ResponseCache.open(self.config.cache)
        except OSError as exc:
            raise ConfigError(f"cache.path: {exc}") from None
        if self._cache is not None:  # another call opened it meanwhile
            cache.close()
            return self._cache
        self._cache = cache
        return cache

    @property
    def cache(self) -> ResponseCache | None:
        """The response cache (``statistics()``, ``clear()``); None while no call used it."""
        return self._cache

    @asynccontextmanager
    async def stream(
        self,
        request: ChatRequest | str,
        messages: str | Iterable[Message] | None = None,
        **fields: Any,
    ) -> AsyncIterator[CallStream]:
        """Submit one call and stream its events.

        ``request`` is a :class:`ChatRequest`, or a ``provider:model`` string with ``messages``
        and any other ChatRequest field as keywords. A request answered from the response
        cache streams its stored reply's deltas, then ``Completed``.

        Raises:
            ConfigError: the model names an unknown provider, or one without a key.
        """
        stream, call = await self._submit(as_request(request, messages, fields))
        try:
            with stream._receive:
                yield stream
        finally:
            self._ended(call, stream)

    @asynccontextmanager
    async def stream_with_phases(
        self, request: ChatRequest, phases: HttpPhases | None = None
    ) -> AsyncIterator[CallStream]:
        """Internal, for sluice's load tester: :meth:`stream`, and with ``phases`` the
        transport notes each attempt's HTTP phases there (connect, time to headers, receive,
        connection reused; the last attempt's stay). Not for users: only sluice's own
        transport fills it in, and a call answered from the response cache leaves it empty.
        (Its body is :meth:`stream`'s, not a wrapper around it: one generator less per
        ordinary call.)"""
        stream, call = await self._submit(request, phases=phases)
        try:
            with stream._receive:
                yield stream
        finally:
            self._ended(call, stream)

    def _ended(self, call: Call | None, stream: CallStream) -> None:
        """The consumer is done with ``call`` (None: answered from the cache): stop whatever
        still runs for it and tell the observer how it ended."""
        if call is not None:
            call.abandon()
            if self._observer is not None:
                self._observer.call_ended(call, stream.result, stream.error)

    async def chat(
        self,
        request: ChatRequest | str,
        messages: str | Iterable[Message] | None = None,
        **fields: Any,
    ) -> ChatResult:
        """Run one call to its end and return the result.

        Raises:
            CallError: the call failed (after whatever retries the policy allowed).
            ConfigError: the model names an unknown provider, or one without a key.
        """
        stream, call = await self._submit(as_request(request, messages, fields), quiet=True)
        try:
            with stream._receive:
                return await stream.wait()
        finally:
            self._ended(call, stream)

    @asynccontextmanager
    async def map(
        self,
        requests: Iterable[ChatRequest] | AsyncIterable[ChatRequest],
        *,
        max_in_flight: int = 256,
    ) -> AsyncIterator[MapOutcomes]:
        """Run many calls, at most ``max_in_flight`` at once; yield outcomes as they finish.

        Requests are pulled from ``requests`` only as slots free up, so a huge or endless
        input is never held in memory. Every request pulled gets exactly one outcome, unless
        the consumer leaves the block early, which cancels the calls still running.
        """
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be at least 1")
        # Room for every call in flight: a finished call hands over its outcome and frees its
        # slot without waiting for the consumer; the slots bound the memory.
        send, receive = trio.open_memory_channel[MapOutcome](max_in_flight)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._feed, requests, send, max_in_flight)
            with receive:
                yield MapOutcomes(receive)
            nursery.cancel_scope.cancel(reason="the consumer of Runtime.map left")

    async def _feed(
        self,
        requests: Iterable[ChatRequest] | AsyncIterable[ChatRequest],
        send: trio.MemorySendChannel[MapOutcome],
        max_in_flight: int,
    ) -> None:
        slots = trio.Semaphore(max_in_flight)
        index = 0
        async with send, trio.open_nursery() as calls:

            async def start(request: ChatRequest) -> None:
                nonlocal index
                try:
                    slots.acquire_nowait()
                except trio.WouldBlock:
                    await slots.acquire()
                calls.start_soon(self._one, index, request, send.clone(), slots)
                index += 1

            # Two plain loops rather than one async generator over both kinds: a generator
            # left unfinished by a cancelled map would be finalized by the garbage collector.
            if isinstance(requests, AsyncIterable):
                async for request in requests:
                    await start(request)
            else:
                for request in requests:
                    await start(request)

    async def _one(
        self,
        index: int,
        request: ChatRequest,
        send: trio.MemorySendChannel[MapOutcome],
        slots: trio.Semaphore,
    ) -> None:
        # The slot is held until the outcome is handed over, so a slow consumer holds back
        # new calls: at most max_in_flight running plus max_in_flight waiting to be taken.
        try:
            with send:  # a plain close: `async with` would add a checkpoint per call
                try:
                    outcome = MapOutcome(index, request, await self.chat(request), None)
                except SluiceError as exc:
                    outcome = MapOutcome(index, request, None, exc)
                try:
                    await put(send, outcome)
                except trio.BrokenResourceError:
                    pass  # the consumer left
        finally:
            slots.release()

    async def statistics(self) -> RuntimeStatistics:
        """What is in flight now, per actor (see :class:`RuntimeStatistics`)."""
        assert self._providers is not None and self._peers is not None
        now = trio.current_time()
        peers = self._peers
        return RuntimeStatistics(
            calls_in_flight=peers.in_flight[0],
            attempts_in_flight=self._providers.in_flight(),
            quotas=await self._limiter.statistics(),
            retry_budget_available=peers.budget.available(now),
            breakers={name: b.state(now) for name, b in peers.breakers.items()},
            groups=self._routing.statistics(
                now, lambda p, m: peers.breaker_state(self._group_spec(p), m, now)
            ),
        )

    def _group_spec(self, provider: str) -> ResolvedProvider:
        for specs in self._group_specs.values():
            for spec in specs:
                if spec.name == provider:
                    return spec
        raise KeyError(provider)

    @property
    def metrics(self) -> Metrics | None:
        """The Prometheus metrics (``.registry``), when ``config.metrics`` enables them."""
        return self._observer.metrics if self._observer is not None else None

    async def render_metrics(self) -> bytes:
        """The metrics in Prometheus' text format, gauges as of now (for a ``/metrics``
        endpoint of one's own, such as a gateway's). Never waits long: when the actors do not
        answer within :data:`_SCRAPE_WAIT` (one may be waiting on a quota store that is down),
        the gauges are the last snapshot's, the windows' ages growing.

        Raises:
            ConfigError: metrics are not enabled (``RuntimeConfig(metrics=...)``).
        """
        metrics = self.metrics
        if metrics is None:
            raise ConfigError("metrics are off: enable them with RuntimeConfig(metrics=...)")
        if self._peers is not None and self._providers is not None:
            with trio.move_on_after(_SCRAPE_WAIT):
                try:
                    metrics.gauges.update(await self.statistics())
                except (RuntimeClosed, trio.ClosedResourceError):
                    pass  # shutting down: the last gauges stand
        return metrics.render()

    def hook_statistics(self) -> dict[str, int]:
        """Hook records ``dropped`` (queue full) and hook calls ``failed`` (raised) so far."""
        hooks = self._observer.hooks if self._observer is not None else None
        if hooks is None:
            return {"dropped": 0, "failed": 0}
        return {"dropped": hooks.dropped, "failed": hooks.failed}

    async def drain(self, timeout: float | None = None) -> bool:  # noqa: ASYNC109 (the API)
        """Stop admitting new calls and wait until every call in flight has ended.

        New calls fail with :class:`RuntimeClosed` from now on (the runtime stays open for
        statistics, metrics and the ledger). Returns True once nothing is in flight, False if
        ``timeout`` seconds passed first (the calls left keep running).
        """
        assert self._peers is not None
        self._draining = True
        with trio.move_on_after(math.inf if timeout is None else timeout):
            # The Supervisor owns the count; polling it keeps the Supervisor untouched.
            while self._peers.in_flight[0]:  # noqa: ASYNC110
                await trio.sleep(_DRAIN_POLL)
            return True
        return False

    @property
    def draining(self) -> bool:
        return self._draining

    async def health(self) -> dict[str, ProviderHealth]:
        """Per provider started so far: whether new calls can go out now, and why not."""
        if self._providers is None or self._peers is None:
            return {}
        now = trio.current_time()
        quotas = await self._limiter.statistics()
        last = self._observer.last_errors if self._observer is not None else {}
        found: dict[str, ProviderHealth] = {}
        for name in sorted({*self._providers.names(), *self._peers.breakers}):
            breaker = self._peers.breakers.get(name)
            state = breaker.state(now) if breaker is not None else "closed"
            cooldown = max(
                (
                    max(ks.cooldown_left, ks.exhausted_left)
                    for key, ks in quotas.items()
                    if key == name or key.startswith(name + ":")
                ),
                default=0.0,
            )
            error = last.get(name)
            found[name] = ProviderHealth(
                provider=name,
                usable=state != "open" and cooldown <= 0,
                breaker=state,
                cooldown_left=cooldown,
                last_error=error[1] if error is not None else None,
                last_error_age=now - error[0] if error is not None else None,
            )
        return found

    async def reload(self, config: RuntimeConfig) -> None:
        """Take a new config without dropping a call in flight.

        Swapped: provider entries (keys, headers, base URLs, limits, deadlines, breakers,
        models), default deadlines and the stream buffer. New calls use the new config at
        once; each attempt from now on, also of calls in flight, sends with the new key (so a
        rotated key is used by the next retry). Not swapped, because running actors hold
        them: the retry policy, the ledger, the cache, metrics and tracing settings, and a
        provider's protocol and connection pool.

        Raises:
            ConfigError: a provider of the new config cannot be resolved (nothing changed).
        """
        assert self._providers is not None
        old = self.config
        self.config = config
        try:
            self._providers.reload()
        except ConfigError:
            self.config = old
            raise
        await self._limiter.relimit(
            {name: spec.rate_limit for name, (spec, _) in self._providers.started().items()}
        )

    @property
    def ledger(self) -> TokenLedgerHandle:
        """The TokenLedger: ``snapshot(by=..., since=..., until=...)``, ``totals()``,
        ``flush()``, ``budgets()`` and the runtime's ``job``."""
        return self._ledger

    async def ledger_totals(self) -> dict[str, LedgerTotals]:
        """Calls, tokens and cost so far per ``provider:model``: what the ledger's store
        holds (summed by the store) and what this runtime has not written to it yet;
        ``ledger.snapshot`` groups any other way."""
        totals: dict[str, LedgerTotals] = await self._ledger.totals()
        return totals


def _routed(request: ChatRequest, order: tuple[str, ...]) -> ChatRequest:
    """``request`` sent to ``order[0]`` with the rest of ``order`` ahead of its own fallbacks.

    A copy with two fields replaced, not ``attrs.evolve`` (which runs every converter and
    validator of the request again, about 19 µs, most of a model group's cost per call) nor
    ``copy.copy`` (15 µs): the values are ``provider:model`` strings the config checked.
    """
    routed = object.__new__(ChatRequest)
    for name in _REQUEST_FIELDS:
        object.__setattr__(routed, name, getattr(request, name))
    object.__setattr__(routed, "model", order[0])
    object.__setattr__(routed, "fallbacks", (*order[1:], *request.fallbacks))
    return routed


_REQUEST_FIELDS = tuple(a.name for a in attrs.fields(ChatRequest))


def _replayed(hit: ChatResult, quiet: bool) -> CallStream:
    """A stream that holds a cache hit's events, ready to be read."""
    from ._cache import replay_events

    send, receive = trio.open_memory_channel[EventBatch](1)
    send.send_nowait(replay_events(hit, quiet=quiet))
    send.close()
    return CallStream(hit.call_id, receive)


def as_request(
    request: ChatRequest | str, messages: str | Iterable[Message] | None, fields: Mapping[str, Any]
) -> ChatRequest:
    """The request that ``chat(request, messages, **fields)`` and ``stream(...)`` mean: a
    :class:`ChatRequest` with ``messages`` and ``fields`` replaced, or one built from a
    ``provider:model`` string. For the doors too, which build it on the caller's side.

    Raises:
        TypeError: a model string came without messages.
    """
    if isinstance(request, ChatRequest):
        changes: dict[str, Any] = dict(fields)
        if messages is not None:
            changes["messages"] = messages
        return attrs.evolve(request, **changes) if changes else request
    if messages is None:
        raise TypeError("give the messages (or a prompt string) after the model")
    return ChatRequest(model=request, messages=messages, **fields)


@asynccontextmanager
async def open_runtime(
    config: RuntimeConfig | None = None,
    *,
    transport: httpx.AsyncBaseTransport | HotTransport | None = None,
    rng: random.Random | None = None,
    environ: Mapping[str, str] | None = None,
    simulator: SimulatorConfig | None = None,
    catch_bugs: bool = True,
    quota_store: QuotaStore | None = None,
    ledger_store: LedgerStore | None = None,
    hooks: Hooks | None = None,
    tracer_provider: Any = None,
) -> AsyncIterator[Runtime]:
    """Start the actors and yield the :class:`Runtime`; stop them all when the block ends.

    Args:
        config: defaults to the file named by ``SLUICE_CONFIG``, else built-in defaults.
        transport: what every provider sends through instead of its own: an httpx transport
            (tests use ``httpx.MockTransport`` or the simulator's ``mock_transport``), or a
            hot-path transport (``sluice.transport.FastTransport`` over in-memory streams).
        rng: the source of every random choice (jitter); seed it for repeatable runs.
        environ: where API keys are looked up; defaults to ``os.environ``.
        simulator: a ``SimulatorConfig`` for the in-process simulator behind ``sim:`` models.
        catch_bugs: a bug while supervising a call fails only that call (``InternalError``);
            tests turn this off so bugs surface as themselves.
        quota_store: where the RateLimiter keeps windows and cooldowns (in memory by default;
            a shared store lets several processes share one account's limits).
        ledger_store: where the TokenLedger keeps its rows across runs, instead of the SQLite
            file ``config.ledger`` names (see :mod:`sluice._ledger.setup`).
        hooks: callbacks told about every finished call and attempt, off the hot path
            (:class:`sluice._observe.Hooks`).
        tracer_provider: the OpenTelemetry tracer provider to trace with when
            ``config.tracing`` is enabled (default: the global one).

    Raises:
        ActorCrashed: an actor crashed more often than its restart limit allows.

    On a normal exit, calls still running are finished before the block returns.

    With ``config.store`` (or ``$SLUICE_STORE``) naming a Redis URL and no ``quota_store``
    given, quotas, cooldowns and budgets are shared through that Redis (see
    :mod:`sluice._limits.redis_store`).
    """
    config = config if config is not None else config_from_env()
    if quota_store is None:
        from ._limits.shared import store_url

        if store_url(config, environ) is not None:
            from ._limits.shared import open_quota_store

            async with open_quota_store(config, environ) as shared, open_runtime(
                config,
                transport=transport,
                rng=rng,
                environ=environ,
                simulator=simulator,
                catch_bugs=catch_bugs,
                quota_store=shared,
                ledger_store=ledger_store,
                hooks=hooks,
                tracer_provider=tracer_provider,
            ) as shared_rt:
                yield shared_rt
            return
    # Everything from the ledger on is inside the try: whatever fails to build after the
    # ledger opened (the observer, say) still closes its file or connection.
    ledger_parts: LedgerSetup | None = None
    rt: Runtime | None = None
    try:
        # A Redis quota store: every process's spend also goes there (the book must know
        # at creation that a store drains it).
        mirror = getattr(quota_store, "ledger_mirror", None)
        ledger_parts = await open_ledger(
            config.ledger, ledger_store, mirror=mirror() if mirror is not None else None
        )
        rng = rng if rng is not None else random.Random()
        if simulator is None:
            from sluice.simulator import SimulatorConfig

            simulator = SimulatorConfig()
        limiter_send, limiter_inbox = trio.open_memory_channel[RateLimiterMsg](MAILBOX_BUFFER)
        ledger_send, ledger_inbox = trio.open_memory_channel[LedgerMsg](MAILBOX_BUFFER)
        supervisor_send, supervisor_inbox = trio.open_memory_channel[SupervisorMsg](MAILBOX_BUFFER)
        from ._observe.observer import build_observer  # loaded when a runtime opens, not on import

        observer = build_observer(
            config, ledger_parts.book, ledger_parts.store, hooks, tracer_provider
        )
        limiter = RateLimiterHandle(
            limiter_send, on_admitted=observer.admitted if observer.metrics is not None else None
        )
        ledger = TokenLedgerHandle(ledger_send, ledger_parts.book.job, ledger_parts.budgets)
        rt = Runtime(
            config,
            supervisor=supervisor_send,
            limiter=limiter,
            ledger=ledger,
            transport=transport,
            environ=environ,
            simulator_config=simulator,
            observer=observer,
            rng=rng,
        )
        if hasattr(quota_store, "avoided"):  # a shared store: routing sees other processes
            rt._routing.shared = cast("SharedMarks", quota_store)
        on_restart = observer.actor_restarted
        if config.cache.enabled:
            await rt._open_cache()
        async with trio.open_nursery() as services:
            await _start_services(rt, observer, services)
            async with trio.open_nursery() as infra:
                await infra.start(
                    partial(run_restarting, on_restart=on_restart),
                    "rate limiter",
                    run_rate_limiter,
                    limiter_inbox,
                    rng,
                    quota_store,
                    itertools.count(1),
                    ledger_parts.budgets,
                    name="rate limiter",
                )
                await infra.start(
                    partial(run_restarting, on_restart=on_restart),
                    "token ledger",
                    run_token_ledger,
                    ledger_inbox,
                    ledger_parts.book,
                    ledger_parts.store,
                    ledger_parts.flush_interval,
                    name="token ledger",
                )
                rt._providers = _Providers(rt, infra, services)
                budget = RetryBudget(
                    config.retry.budget_ratio,
                    config.retry.budget_min_per_second,
                    config.retry.budget_interval,
                )
                peers = rt._peers = SupervisorPeers(
                    limiter,
                    ledger,
                    config.retry,
                    rng,
                    rt._route,
                    budget,
                    catch_bugs=catch_bugs,
                    prepare=rt._prepare,
                    routing=rt._routing,
                )
                async with trio.open_nursery() as front:
                    await front.start(run_supervisor, peers, supervisor_inbox, name="supervisor")
                    with supervisor_send:
                        yield rt
                for close in rt._closers:
                    close()
                limiter_send.close()
                ledger_send.close()
            if observer.hooks is not None:
                observer.hooks.close()
                with trio.move_on_after(observer.hooks.hooks.drain_timeout):
                    await observer.hooks.done.wait()
            services.cancel_scope.cancel(reason="the runtime is shutting down")
    except BaseExceptionGroup as group:
        # Nurseries wrap every exception in a group; at the public edge one failure should be
        # itself (a user's own exception, a CallError, ActorCrashed), never a group of one.
        leaf = sole_failure(group)
        if leaf is None:
            raise
        raise leaf from None
    finally:
        if rt is not None and rt._cache is not None:
            rt._cache.close()
        if ledger_parts is not None:
            with trio.move_on_after(5, shield=True):
                await ledger_parts.aclose()


async def _start_services(rt: Runtime, observer: Observer, services: trio.Nursery) -> None:
    """The housekeeping and observability tasks the config asks for: the memory trimmer, the
    hook runner, the metrics endpoint, and the watcher that logs breaker and cooldown changes
    (when ``sluice`` logs at INFO)."""
    if rt.config.trim_memory_every is not None:
        from ._memory import trim_memory_forever

        services.start_soon(
            trim_memory_forever, rt.config.trim_memory_every, rt._trims, name="memory trim"
        )
    if observer.hooks is not None:
        services.start_soon(observer.hooks.run, name="hooks")
    if observer.metrics is not None:
        services.start_soon(_refresh_gauges, rt, name="metrics gauges")
    metrics = rt.config.metrics
    if metrics.port is not None:
        from ._observe.server import serve_metrics

        rt.metrics_port = await services.start(
            serve_metrics, rt.render_metrics, metrics.host, metrics.port, name="metrics endpoint"
        )
    if observer.logs_changes():
        from ._observe.logs import watch_changes

        services.start_soon(watch_changes, rt.health, name="health watcher")


async def _refresh_gauges(rt: Runtime) -> None:
    """Keep the gauges' snapshot at most :data:`_GAUGES_EVERY` seconds old, so that a
    synchronous ``rt.metrics.render()`` (a scraper of one's own) shows recent gauges."""
    metrics = rt.metrics
    assert metrics is not None
    while True:
        await trio.sleep(_GAUGES_EVERY)
        if rt._peers is not None and rt._providers is not None:
            try:
                metrics.gauges.update(await rt.statistics())
            except (RuntimeClosed, trio.ClosedResourceError):
                return  # shutting down: the actors have stopped
