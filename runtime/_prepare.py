"""Call preparation: the one path from a :class:`ChatRequest` to the :class:`Call` the
Supervisor takes.

:func:`prepare_call` runs the steps in this order, each once, each a function of what the
steps before it made; every module a step uses is entered once and returns before the next
step, and none calls back into the runtime (tests/test_prepare_path.py traces this):

1. **model** (:func:`model_target`): ``provider:model``, or a model group's deployments
   (``sluice._messages.split_model``).
2. **providers**: the target's providers, each actor started on first use (``start``, which
   the runtime gives: ``sluice._startup.Providers.routes``).
3. **placement** (:meth:`GroupPlacement.place`, groups only): the deployments a breaker holds
   shut (the Supervisor's breakers, a shared store's marks), then the group's strategy
   (``sluice._routing.Routing.order``) picks the deployment; the rest lead the fallbacks.
4. **cache** (:func:`cache_lookup`, when the request uses the cache): a hit ends the path.
5. **capabilities and tools** (:func:`prepare_tools`): what the backend can do with tools for
   the model (``sluice.providers._registry``), then the request's tools prepared for it
   (``sluice._tools.preparation``).
6. **deadlines** (:func:`deadlines`): the provider's, then the request's.
7. **cost** (``sluice._limits.cost.estimate_cost``): the reservation each attempt asks for.
8. **call**: the call's event channel and the :class:`~sluice._mail.Call`.

Only placement changes state (the router counts the call on its deployment); every exit of
the path that does not hand back a call releases that count.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import attrs
import trio

from ._errors import ConfigError, RuntimeClosed
from ._limits.cost import estimate_cost
from ._mail import Call, EventSink, ProviderMailbox, SupervisorMsg
from ._messages import ChatRequest, ChatResult, split_model
from ._record import Record
from ._routing import Routing, breaker_mark, slow_mark

if TYPE_CHECKING:
    from collections.abc import Awaitable, Mapping

    from sluice.actors._supervisor_peers import SupervisorPeers

    from ._cache import ResponseCache
    from ._config import ModelGroup
    from ._mail import EventBatch  # noqa: TC004 (only a type here: a stream's loads it)
    from ._messages import Deadlines
    from ._startup import Providers
    from ._streams import CallStream, Followed
    from ._tools.preparation import Prepared
    from .providers._registry import ResolvedProvider
    from .transport._phases import HttpPhases


__all__ = [
    "GroupPlacement",
    "Placed",
    "Ready",
    "SubmitNow",
    "Target",
    "cache_lookup",
    "deadlines",
    "model_target",
    "prepare_call",
    "prepare_for",
    "prepare_tools",
]

Route = tuple["ResolvedProvider", ProviderMailbox]


@attrs.frozen(eq=False, repr=False)
class Target(Record):
    """Where a request's model points: one ``provider:model``, or a model group's
    deployments (in the group's order)."""

    group: str | None
    providers: tuple[str, ...]
    models: tuple[str, ...]
    """Each deployment's model name without the provider prefix."""


@attrs.frozen(eq=False, repr=False)
class Placed(Record):
    """A request placed on one of its target's deployments."""

    request: ChatRequest
    """The request as it goes out: for a group, sent to the chosen deployment with the group's
    others ahead of its own fallbacks."""
    index: int
    """The chosen deployment's position in the target."""
    failover: int = 0
    """How many of the request's models are deployments of the group."""


@attrs.frozen(eq=False, repr=False)
class Ready(Record):
    """A call to hand to the Supervisor, and the consumer's end of its event channel."""

    call: Call
    events: trio.MemoryReceiveChannel[EventBatch] | None
    """None for a call submitted with an ``end`` of its own (a quiet call)."""
    on_result: Callable[[ChatResult], None] | None
    """Stores the result in the response cache; None when the call is not cached."""


def model_target(model: str, groups: Mapping[str, ModelGroup]) -> Target:
    """Step 1: what ``model`` names.

    Raises:
        ConfigError: it is neither ``provider:model`` nor a configured group's name.
    """
    if ":" in model:
        provider, name = split_model(model)
        return Target(None, (provider,), (name,))
    group = groups.get(model)
    if group is None:
        known = ", ".join(repr(g) for g in sorted(groups)) or "none is configured"
        raise ConfigError(
            f"model {model!r} is neither 'provider:model' (e.g. 'openai:gpt-4o-mini') nor a "
            f"model group (groups: {known})"
        )
    split = [split_model(d.model) for d in group.deployments]
    return Target(model, tuple(p for p, _ in split), tuple(m for _, m in split))


class GroupPlacement:
    """Model groups' placement (step 3) and what it keeps between calls: the routers
    (:class:`~sluice._routing.Routing`, which the Supervisor also tells when a call moves or
    ends) and, per group, the names a shared store knows each deployment by. Used by the
    caller tasks only, in trio's one thread."""

    def __init__(self, routing: Routing, peers: SupervisorPeers | None = None) -> None:
        self.routing = routing
        self.peers = peers
        """The Supervisor's breakers: a deployment whose breaker is open is placed last."""
        self._names: dict[str, tuple[tuple[str, str, str | None], ...]] = {}

    def place(self, request: ChatRequest, target: Target, routes: tuple[Route, ...]) -> Placed:
        """``request`` sent to the deployment of ``target.group`` that its strategy chooses,
        the group's other deployments ahead of the request's own fallbacks (the router counts
        the call on the chosen one: :meth:`release` undoes that)."""
        name = target.group
        if name is None:
            return Placed(request, 0)
        specs = tuple(spec for spec, _ in routes)
        now = trio.current_time()
        blocked = self._blocked(name, specs, target.models, now)
        routing = self.routing
        if name not in routing.routers:
            routing.add(name, [spec.rate_limit for spec in specs])
        order = routing.order(name, request, now, blocked.__contains__)
        chosen = routing.routers[name].index(order[0])
        return Placed(_routed(request, order), chosen, len(order))

    def release(self, group: str | None, model: str) -> None:
        """The call placed on ``model`` of ``group`` never reached the Supervisor (which
        otherwise reports its end): uncount it."""
        if group is not None:
            self.routing.finished(group, model, None, None, trio.current_time())

    def _blocked(
        self, group: str, specs: tuple[ResolvedProvider, ...], models: tuple[str, ...], now: float
    ) -> frozenset[int]:
        """The deployments to place last: an open breaker here, or what other processes know
        through a shared store (a cooldown, a slow mark, a breaker they opened). Worked out
        before the router is asked, so that the router never calls back here."""
        peers, shared = self.peers, self.routing.shared
        found: set[int] = set()
        if peers is not None:
            found = {i for i, spec in enumerate(specs) if peers.breaker_open(spec, models[i], now)}
        if shared is not None:
            names = self._shared_names(group, specs, models)
            for i, (quota_key, slow, breaker) in enumerate(names):
                if (
                    shared.cooling(quota_key, now) > 0
                    or shared.avoided(slow, now) > 0
                    or (breaker is not None and shared.avoided(breaker, now) > 0)
                ):
                    found.add(i)
        return frozenset(found)

    def _shared_names(
        self, group: str, specs: tuple[ResolvedProvider, ...], models: tuple[str, ...]
    ) -> tuple[tuple[str, str, str | None], ...]:
        """Per deployment of ``group``, the names a shared store knows it by: its quota key,
        its slow mark and its breaker's mark (None without a breaker). Made once per group."""
        names = self._names.get(group)
        if names is None:
            peers = self.peers
            deployments = self.routing.groups[group].deployments
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
            names = self._names[group] = tuple(made)
        return names


def cache_lookup(
    cache: ResponseCache, request: ChatRequest, spec: ResolvedProvider, call_id: str
) -> tuple[ChatResult | None, str | None]:
    """Step 4: the cached result of the caller's ``request`` sent to ``spec`` (None on a
    miss), and the key to store its result under (None: it has no JSON form, not cached)."""
    try:
        key = cache.key(request, spec)  # the caller's request, never a prepared one
    except TypeError:
        return None, None  # extra_body holds something without a JSON form
    return cache.get(key, call_id), key


def prepare_tools(request: ChatRequest, spec: ResolvedProvider, model: str) -> Prepared | None:
    """Step 5: ``request`` prepared for what ``model`` of ``spec``'s backend can do with tools
    (:meth:`~sluice.providers._registry.ResolvedProvider.tool_capabilities`: the registry's
    capabilities, then the config's entry for the model); None when it has nothing to do with
    tools (it is then sent as it is, and its replies are not finalized).

    Raises:
        ConfigError: the request's tools or ``tool_choice`` cannot be used.
    """
    if not request.tools and request.tool_choice is None and request.parallel_tool_calls is None:
        return None
    caps = spec.tool_capabilities(model)
    from ._tools.preparation import prepare  # only calls with tools load it

    try:
        return prepare(request, caps, request.tool_options)
    except ConfigError as exc:
        raise ConfigError(f"{request.model}: {exc}") from None


def prepare_for(request: ChatRequest, spec: ResolvedProvider) -> Prepared | None:
    """:func:`prepare_tools` for a ``provider:model`` request: the Supervisor's preparer when
    a call falls back to another model."""
    return prepare_tools(request, spec, split_model(request.model)[1])


def deadlines(
    base: Deadlines, override: Deadlines, now: float
) -> tuple[float, float | None, float | None]:
    """Step 6: the call's absolute total deadline (``inf`` for none), first-token timeout and
    idle timeout: the request's where it sets them, else the provider's."""
    total = override.total if override.total is not None else base.total
    first = override.first_token if override.first_token is not None else base.first_token
    idle = override.idle if override.idle is not None else base.idle
    return (now + total if total is not None else math.inf), first, idle


async def prepare_call(
    request: ChatRequest,
    call_id: str,
    *,
    start: Callable[[tuple[str, ...]], Awaitable[tuple[Route, ...]]],
    groups: GroupPlacement,
    cache: ResponseCache | None,
    stream_buffer: int,
    draining: bool,
    quiet: bool = False,
    phases: HttpPhases | None = None,
    end: EventSink | None = None,
) -> Ready | ChatResult:
    """The call ``request`` becomes (see the module's docstring for the steps), or the cached
    answer. ``cache``: the response cache when this request uses it. ``end``: where a quiet
    call's final batch goes, instead of an event channel made here.

    Raises:
        ConfigError: the model names no provider or group, a provider without a key, or tools
            the backend cannot use.
        RuntimeClosed: the runtime is draining (a cache hit is still answered).
    """
    target = model_target(request.model, groups.routing.groups)
    routes = await start(target.providers)
    placed = groups.place(request, target, routes)
    try:
        spec, mailbox = routes[placed.index]
        model = target.models[placed.index]
        request = placed.request
        on_result = None
        if cache is not None:
            hit, key = cache_lookup(cache, request, spec, call_id)
            if hit is not None:
                groups.release(target.group, request.model)
                return hit  # the cached result: no call is made
            on_result = cache.storer(key) if key is not None else None
        prepared = prepare_tools(request, spec, model)
        if draining:
            raise RuntimeClosed("the runtime is draining: it takes no new calls")
        now = trio.current_time()
        deadline, first_token, idle = deadlines(spec.deadlines, request.deadlines, now)
        sent = prepared.request if prepared is not None else request
        cost = estimate_cost(sent, spec.rate_limit.expected_output_tokens)
        send: EventSink
        receive: trio.MemoryReceiveChannel[EventBatch] | None
        if end is None:
            # A stream's (whose Queued and Admitted events load the union it is made from).
            from ._mail import EventBatch

            send, receive = trio.open_memory_channel[EventBatch](stream_buffer)
        else:
            send, receive = end, None
    except BaseException:
        groups.release(target.group, placed.request.model)
        raise
    call = Call(
        call_id=call_id,
        request=sent,
        provider=spec,
        provider_mailbox=mailbox,
        model=model,
        events=send,
        submitted_at=now,
        deadline=deadline,
        first_token_timeout=first_token,
        idle_timeout=idle,
        cost=cost,
        quiet=quiet,
        prepared=prepared,
        group=target.group,
        failover=placed.failover,
        phases=phases,
    )
    return Ready(call, receive, on_result)


def _routed(request: ChatRequest, order: tuple[str, ...]) -> ChatRequest:
    """``request`` sent to ``order[0]`` with the rest of ``order`` ahead of its own fallbacks.

    A copy with two fields replaced, not ``attrs.evolve``, which runs every converter and
    validator of the request again (see benchmarks/README.md): the values are
    ``provider:model`` strings the config checked.
    """
    routed = object.__new__(ChatRequest)
    for name in _REQUEST_FIELDS:
        object.__setattr__(routed, name, getattr(request, name))
    object.__setattr__(routed, "model", order[0])
    object.__setattr__(routed, "fallbacks", (*order[1:], *request.fallbacks))
    return routed


_REQUEST_FIELDS = tuple(a.name for a in attrs.fields(ChatRequest))


# ---- submitting without waiting, for sluice's load tester --------------------------------------
# Its load tester hands a due request to the runtime from a trio instrument's hook, between two
# task steps (``sluice._jobs.loadtest.handover``). A hook runs outside any task and cannot wait,
# so it may submit only when the ordinary submission (``Runtime.stream_with_phases``: this
# path, then the Supervisor's mailbox) ends in its first step. Nothing here is for users.


class SubmitNow:
    """The load tester's submission without waiting (:class:`~sluice._runtime.Runtime` sets
    every attribute declared here)."""

    _providers: Providers | None
    _groups: GroupPlacement
    _supervisor: trio.MemorySendChannel[SupervisorMsg]

    if TYPE_CHECKING:

        def _caches(self, request: ChatRequest) -> bool: ...

        def _ended(self, call: Call | None, stream: CallStream) -> None: ...

        async def _start(
            self,
            request: ChatRequest,
            *,
            cache: ResponseCache | None,
            quiet: bool,
            phases: HttpPhases | None = None,
            end: EventSink | None = None,
            bound: Callable[[Call], None] | None = None,
        ) -> Ready | ChatResult: ...

    def submits_at_once(self, request: ChatRequest) -> bool:
        """True when submitting ``request`` now cannot wait: not through the response cache
        (opening it, looking it up), every provider it may go to started already, and room in
        the Supervisor's mailbox (or its task waiting for mail). A model that cannot be routed
        gives False: the ordinary submission reports it."""
        providers, groups = self._providers, self._groups
        if providers is None or self._caches(request):
            return False
        try:
            names = model_target(request.model, groups.routing.groups).providers
        except Exception:  # the ordinary submission raises it to its caller
            return False
        if not all(providers.spec(name) is not None for name in names):
            return False
        mail = self._supervisor.statistics()
        return mail.tasks_waiting_receive > 0 or mail.current_buffer_used < mail.max_buffer_size

    async def submit_followed(
        self, request: ChatRequest, phases: HttpPhases | None, end: Followed
    ) -> Call | None:
        """Submit ``request`` as a streamed call whose batches go straight to ``end`` (the
        load tester's follower, which reads each batch in the step of the task that puts it):
        no event channel, and no step of the consumer's per batch. None, submitting nothing,
        when it goes through the response cache (:meth:`Runtime.stream_with_phases` then).
        End it with :meth:`end_followed`."""
        if self._caches(request):
            return None
        made = await self._start(
            request, cache=None, quiet=False, phases=phases, end=end, bound=end.bind
        )
        assert isinstance(made, Ready)
        return made.call

    def submit_followed_now(
        self, request: ChatRequest, phases: HttpPhases | None, end: Followed
    ) -> Call:
        """:meth:`submit_followed` in this step, without a checkpoint: callable where no
        task runs (a trio instrument's hook), and only when :meth:`submits_at_once` said
        True just before. Raises what the submission raises."""
        coro = self.submit_followed(request, phases, end)
        try:
            coro.send(None)
        except StopIteration as done:
            call: Call | None = done.value
            assert call is not None  # submits_at_once said no cache
            return call
        coro.close()
        raise RuntimeError("a submission that could not wait waited")

    def end_followed(self, call: Call, end: Followed) -> None:
        """The consumer is done with ``call`` and its follower ``end``
        (:meth:`submit_followed`), on every exit path: ``end`` takes no more batches and the
        call is ended, as :meth:`Runtime.stream_with_phases` ends its own on leaving."""
        end.leave()
        self._ended(call, end)
