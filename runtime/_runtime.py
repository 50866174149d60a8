"""The runtime: starts the actors, wires them together, and is the handle users call.

:class:`Runtime` owns the actors' handles and exposes the API; a call goes through the
preparation path (:mod:`sluice._prepare`) once and then to the Supervisor, and each provider's
actor is started on first use by :mod:`sluice._startup`. Three nested nurseries encode the
shutdown order (:func:`open_runtime`): the Supervisor (front) stops first and lets every call in
flight end; then the providers, the RateLimiter and the TokenLedger see their mailboxes close and
return; last, local services (the in-process simulator, the metrics endpoint) are cancelled.
"""

from __future__ import annotations

import itertools
import math
import random
from contextlib import asynccontextmanager
from functools import partial
from typing import TYPE_CHECKING, Any, cast

import attrs
import trio

from sluice.actors._doors import SupervisorDoor
from sluice.actors._limiter_handle import LimiterTray
from sluice.actors._rate_limiter import RateLimiterHandle, run_rate_limiter
from sluice.actors._restart import run_restarting
from sluice.actors._supervisor import run_supervisor
from sluice.actors._supervisor_peers import SupervisorPeers
from sluice.actors._tell import MAILBOX_BUFFER, put
from sluice.actors._token_ledger import LedgerTray, TokenLedgerHandle, run_token_ledger

from ._call_result import outcome_of
from ._config import RuntimeConfig, config_from_env
from ._embed_runs import EmbedMethods
from ._errors import ConfigError, RuntimeClosed, SluiceError
from ._exception_groups import sole_failure
from ._ledger.setup import LedgerSetup, open_ledger
from ._limits.store import MemoryQuotaStore
from ._mail import (
    Call,
    EventSink,
    LedgerMsg,
    LedgerTotals,
    RateLimiterMsg,
    Submit,
    SupervisorMsg,
)
from ._memory import TrimCount
from ._messages import ChatRequest, ChatResult, Message, as_request
from ._prepare import GroupPlacement, Ready, SubmitNow, prepare_call, prepare_for
from ._reply import FinalReply
from ._retry_budget import RetryBudget
from ._routing import Routing
from ._runtime_status import StatusMethods
from ._services import start_services
from ._startup import Providers, ProviderWiring
from .providers._registry import ResolvedProvider, resolve_provider

if TYPE_CHECKING:
    from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Mapping

    import httpx

    from ._cache import ResponseCache
    from ._ledger.store import LedgerStore
    from ._limits.store import QuotaStore
    from ._mail import EventBatch
    from ._observe.records import Hooks
    from ._routing import SharedMarks
    from ._snapshots import ProviderHealth, RuntimeStatistics
    from ._streams import CallStream, MapOutcome, MapOutcomes
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

_DRAIN_POLL = 0.05


def __getattr__(name: str) -> Any:
    # The snapshot types load when first asked for: a program that never reads statistics or
    # health never loads them. So do the streams' (a program that only chats never streams).
    if name in ("ProviderHealth", "RuntimeStatistics"):
        from . import _snapshots

        return getattr(_snapshots, name)
    if name in ("CallStream", "MapOutcome", "MapOutcomes"):
        from . import _streams

        return getattr(_streams, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class Runtime(EmbedMethods, StatusMethods, SubmitNow):
    """The handle to a running sluice: submit calls here. Created by :func:`open_runtime`.
    Its embedding methods live in :mod:`sluice._embed_runs`, its views of the running state in
    :mod:`sluice._runtime_status`, the load tester's submission in :mod:`sluice._prepare`."""

    def __init__(
        self,
        config: RuntimeConfig,
        *,
        supervisor: trio.MemorySendChannel[SupervisorMsg],
        wiring: ProviderWiring,
        rng: random.Random | None = None,
    ) -> None:
        self.config = config
        self._wiring = wiring
        self._observer = wiring.observer
        self._draining = False
        self.metrics_port: int | None = None
        """The port of the metrics endpoint, once it listens (``config.metrics.port``)."""
        self._trims = TrimCount()
        """How many times the memory trimmer has run (see :mod:`._memory`)."""
        self._supervisor = supervisor
        self._submit_to = SupervisorDoor(supervisor)
        """Where calls are handed to the Supervisor (see :class:`SupervisorDoor`)."""
        self._limiter = wiring.limiter
        self._ledger = wiring.ledger
        self._ids = itertools.count(1)
        self._peers: SupervisorPeers | None = None
        self._providers: Providers | None = None
        """Provider startup (:mod:`sluice._startup`), made once the actors' nursery is open."""
        self._cache: ResponseCache | None = None
        """Opened with the runtime when the config enables it, else by the first call that
        opts in (``response_cache=True``)."""
        self._cache_by_default = config.cache.enabled
        self._groups = GroupPlacement(Routing(config.groups, rng or random.Random()))
        """Model groups' placement and routing state; the Supervisor reports calls' moves and
        ends to its ``routing``."""

    async def start_provider(self, model: str) -> None:
        """Internal, for sluice's load tester: start the actor of the provider that serves
        ``model`` (``provider:model``) now, rather than on its first call: its codec loaded,
        its transport made, the in-process simulator serving.

        Raises:
            ConfigError: the model names an unknown provider, or one without a key.
        """
        assert self._providers is not None
        await self._providers.route(model)

    def resolve_provider(self, name: str) -> ResolvedProvider:
        """Internal, for the gateway: provider ``name`` as this runtime resolves it now (from
        its config and the environment it was given), whether or not it has started.

        Raises:
            ConfigError: no provider has that name, or it has no key.
        """
        return resolve_provider(name, self.config, self._wiring.environ)

    @property
    def transport(self) -> httpx.AsyncBaseTransport | HotTransport | None:
        """The transport every provider sends through instead of its own (``open_runtime``'s
        ``transport``); None when each provider makes its own."""
        return self._wiring.transport

    @property
    def simulator_config(self) -> SimulatorConfig:
        """Internal, for the provider batch lane: the config of the simulator this runtime
        serves in-process providers (``sim`` without a base URL) with."""
        return self._wiring.simulator_config()

    async def _submit(
        self, request: ChatRequest, *, quiet: bool = False, phases: HttpPhases | None = None
    ) -> tuple[CallStream, Call | None, trio.MemoryReceiveChannel[EventBatch]]:
        """Start ``request``: its stream, the call (None when the response cache answered;
        the stream then already holds the replay) and the stream's channel, which the caller
        closes when it is done. ``phases``: see :meth:`stream_with_phases`.

        The request goes through the preparation path of :mod:`sluice._prepare` once, then to
        the Supervisor."""
        cache = None
        if self._caches(request):
            cache = self._cache or await self._open_cache()
        made = await self._start(request, cache=cache, quiet=quiet, phases=phases)
        from ._streams import CallStream, replayed  # loaded by the first stream
        if isinstance(made, ChatResult):  # the response cache answered
            stream, receive = replayed(made, quiet)
            return stream, None, receive
        assert made.events is not None
        return CallStream(made.call.call_id, made.events, made.on_result), made.call, made.events

    async def _submit_quiet(
        self, request: ChatRequest, end: EventSink, bound: Callable[[Call], None] | None
    ) -> Call | None:
        """Start ``request`` as a quiet call whose one final batch goes to ``end`` (no event
        channel); None, submitting nothing, when it uses the response cache (the ordinary way
        then: ``chat``). ``bound`` is told the call before the Supervisor can end it."""
        if self._caches(request):
            return None
        made = await self._start(request, cache=None, quiet=True, end=end, bound=bound)
        assert isinstance(made, Ready)
        return made.call

    def _caches(self, request: ChatRequest) -> bool:
        use_cache = request.response_cache
        return bool(use_cache) or (use_cache is None and self._cache_by_default)

    async def _start(
        self,
        request: ChatRequest,
        *,
        cache: ResponseCache | None,
        quiet: bool,
        phases: HttpPhases | None = None,
        end: EventSink | None = None,
        bound: Callable[[Call], None] | None = None,
    ) -> Ready | ChatResult:
        """Prepare ``request`` (:mod:`sluice._prepare`) and hand the call to the Supervisor;
        or the cached answer. ``bound`` is told the call before it is handed over: a full
        mailbox parks the hand-over, and the Supervisor may end the call (a breaker open,
        say) before this task runs again."""
        assert self._providers is not None and self._groups is not None
        call_id = f"c{next(self._ids)}"
        made = await prepare_call(
            request,
            call_id,
            start=self._providers.routes,
            groups=self._groups,
            cache=cache,
            stream_buffer=self.config.stream_buffer,
            draining=self._draining,
            quiet=quiet,
            phases=phases,
            end=end,
        )
        if isinstance(made, ChatResult):
            return made
        call = made.call
        if bound is not None:
            bound(call)
        try:
            await put(self._submit_to, Submit(call))
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            if made.events is not None:
                call.events.close()
                made.events.close()
            self._groups.release(call.group, call.request.model)
            raise RuntimeClosed("the runtime has stopped; open a new one") from exc
        except BaseException:
            self._groups.release(call.group, call.request.model)
            raise
        if self._observer is not None:
            self._observer.call_started(call)
        return made

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
        stream, call, receive = await self._submit(as_request(request, messages, fields))
        try:
            with receive:
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
        (:meth:`stream`'s body, not a wrapper around it: one generator less per call.)"""
        stream, call, receive = await self._submit(request, phases=phases)
        try:
            with receive:
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

    def _call_ended(self, call: Call, result: ChatResult | None, error: SluiceError | None) -> None:
        """A mapped call's outcome was handed over (or the map left it): tell the observer."""
        if self._observer is not None:
            self._observer.call_ended(call, result, error)

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
        request = as_request(request, messages, fields)
        end: FinalReply[EventBatch] = FinalReply()  # not FinalReply[...](): see sluice._reply
        call = await self._submit_quiet(request, end, None)
        if call is None:  # through the response cache
            stream, cached, receive = await self._submit(request, quiet=True)
            try:
                with receive:
                    return await stream.wait()
            finally:
                self._ended(cached, stream)
        # A quiet call: its one final batch comes in a one-shot reply, no event channel.
        result: ChatResult | None = None
        error: SluiceError | None = None
        try:
            try:
                batch: EventBatch = await end.receive()
            except trio.EndOfChannel:
                batch = ()
            result, error = outcome_of(batch, call.call_id)
        finally:
            end.leave()
            call.abandon()
            if self._observer is not None:
                self._observer.call_ended(call, result, error)
        if error is not None:
            raise error
        assert result is not None
        return result

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
        from ._streams import MapOutcome, MapOutcomes, feed_map  # loaded by the first map
        send, receive = trio.open_memory_channel[MapOutcome](max_in_flight)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                feed_map,
                self.chat,
                self._submit_quiet,
                self._call_ended,
                requests,
                send,
                max_in_flight,
            )
            with receive:
                yield MapOutcomes(receive)
            nursery.cancel_scope.cancel(reason="the consumer of Runtime.map left")

    async def _gauge_statistics(self) -> RuntimeStatistics | None:
        """:meth:`statistics`, or None before the actors run and once they have stopped."""
        if self._peers is None or self._providers is None:
            return None
        try:
            return await self.statistics()
        except (RuntimeClosed, trio.ClosedResourceError):
            return None

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
            while self._peers.in_flight.value:  # noqa: ASYNC110
                await trio.sleep(_DRAIN_POLL)
            return True
        return False

    @property
    def draining(self) -> bool:
        return self._draining

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
        await self._providers.reload(config)  # raises before it changes anything
        self.config = config
        await self._limiter.relimit(self._providers.rate_limits())

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
    async with _quota_store(config, environ, quota_store) as store, _running(
        config,
        store,
        transport=transport,
        rng=rng if rng is not None else random.Random(),
        environ=environ,
        simulator=simulator,
        catch_bugs=catch_bugs,
        ledger_store=ledger_store,
        hooks=hooks,
        tracer_provider=tracer_provider,
    ) as rt:
        yield rt


@asynccontextmanager
async def _quota_store(
    config: RuntimeConfig, environ: Mapping[str, str] | None, given: QuotaStore | None
) -> AsyncIterator[QuotaStore]:
    """The quota store the RateLimiter keeps windows and cooldowns in: the one given, else the
    shared one the config's store URL names (opened here, closed after everything else), else
    a memory store. The runtime's, not the RateLimiter's: every restart of the RateLimiter is
    handed this one, so a crash keeps windows and cooldowns."""
    if given is None:
        from ._limits.shared import store_url

        if store_url(config, environ) is not None:
            from ._limits.shared import open_quota_store

            async with open_quota_store(config, environ) as shared:
                yield shared if shared is not None else MemoryQuotaStore()
            return
    yield given if given is not None else MemoryQuotaStore()


@attrs.frozen(eq=False, repr=False)
class _Mailboxes:
    """Both ends of the mailboxes of the actors ``open_runtime`` starts itself."""

    limiter: tuple[
        trio.MemorySendChannel[RateLimiterMsg], trio.MemoryReceiveChannel[RateLimiterMsg]
    ]
    ledger: tuple[trio.MemorySendChannel[LedgerMsg], trio.MemoryReceiveChannel[LedgerMsg]]
    supervisor: tuple[
        trio.MemorySendChannel[SupervisorMsg], trio.MemoryReceiveChannel[SupervisorMsg]
    ]


@asynccontextmanager
async def _running(
    config: RuntimeConfig,
    quota_store: QuotaStore,
    *,
    transport: httpx.AsyncBaseTransport | HotTransport | None,
    rng: random.Random,
    environ: Mapping[str, str] | None,
    simulator: SimulatorConfig | None,
    catch_bugs: bool,
    ledger_store: LedgerStore | None,
    hooks: Hooks | None,
    tracer_provider: Any,
) -> AsyncIterator[Runtime]:
    """The runtime over ``quota_store``, its actors running (see :func:`open_runtime`)."""
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
        mail = _Mailboxes(
            trio.open_memory_channel[RateLimiterMsg](MAILBOX_BUFFER),
            trio.open_memory_channel[LedgerMsg](MAILBOX_BUFFER),
            trio.open_memory_channel[SupervisorMsg](MAILBOX_BUFFER),
        )
        from ._observe.observer import build_observer  # loaded when a runtime opens, not on import

        observer = build_observer(
            config, ledger_parts.book, ledger_parts.store, hooks, tracer_provider
        )
        limiter = RateLimiterHandle(
            mail.limiter[0],
            on_admitted=observer.admitted if observer.metrics is not None else None,
            tray=LimiterTray(),
        )
        ledger = TokenLedgerHandle(
            mail.ledger[0], ledger_parts.book.job, ledger_parts.budgets, tray=LedgerTray()
        )
        wiring = ProviderWiring(limiter, ledger, transport, environ, simulator, observer)
        rt = Runtime(config, supervisor=mail.supervisor[0], wiring=wiring, rng=rng)
        if hasattr(quota_store, "avoided"):  # a shared store: routing sees other processes
            rt._groups.routing.shared = cast("SharedMarks", quota_store)
        if config.cache.enabled:
            await rt._open_cache()
        async with trio.open_nursery() as services:
            rt.metrics_port = await start_services(
                config, observer, services, rt._trims, rt._gauge_statistics, rt
            )
            async with _actors(rt, mail, ledger_parts, quota_store, rng, catch_bugs, services):
                yield rt
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


@asynccontextmanager
async def _actors(
    rt: Runtime,
    mail: _Mailboxes,
    ledger_parts: LedgerSetup,
    quota_store: QuotaStore,
    rng: random.Random,
    catch_bugs: bool,
    services: trio.Nursery,
) -> AsyncIterator[None]:
    """The actors, in two nurseries: the infrastructure (RateLimiter, TokenLedger, and the
    providers, started there on first use), then the front (the Supervisor), which stops first
    and lets every call in flight end before the others' mailboxes close."""
    config = rt.config
    assert rt._observer is not None
    on_restart = rt._observer.actor_restarted
    limiter_send, limiter_inbox = mail.limiter
    ledger_send, ledger_inbox = mail.ledger
    supervisor_inbox = mail.supervisor[1]
    async with trio.open_nursery() as infra:
        await infra.start(
            partial(run_restarting, on_restart=on_restart),
            "rate limiter",
            partial(run_rate_limiter, tray=rt._limiter.tray),
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
            partial(run_token_ledger, tray=rt._ledger.tray),
            ledger_inbox,
            ledger_parts.book,
            ledger_parts.store,
            ledger_parts.flush_interval,
            name="token ledger",
        )
        providers = rt._providers = Providers(config, rt._wiring, infra, services)
        budget = RetryBudget(
            config.retry.budget_ratio,
            config.retry.budget_min_per_second,
            config.retry.budget_interval,
        )
        peers = rt._peers = rt._groups.peers = SupervisorPeers(
            rt._limiter,
            rt._ledger,
            config.retry,
            rng,
            providers.route,
            budget,
            catch_bugs=catch_bugs,
            prepare=prepare_for,
            routing=rt._groups.routing,
        )
        async with trio.open_nursery() as front:
            door = rt._submit_to
            await front.start(
                partial(run_supervisor, door=door), peers, supervisor_inbox, name="supervisor"
            )
            try:
                yield
            finally:
                door.close()
        providers.close()
        limiter_send.close()
        ledger_send.close()
