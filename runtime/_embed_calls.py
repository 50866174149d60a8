"""An embedding call's way through the actors a chat call takes.

An embedding call is a :class:`~sluice._mail.Call` whose ``embed`` holds the
:class:`~sluice._embeddings.EmbedRequest`, and whose ``request`` is a *carrier*: a
:class:`~sluice._messages.ChatRequest` without messages that holds the fields both kinds share
(model and fallbacks, tag, priority, deadlines, failure mode, ``max_wait``, retry visibility).
The Supervisor, the retry policy, the breakers and model groups read only those, so they route,
admit, retry and fail it over exactly as a chat call, and the chat path pays nothing for it.
What differs lives here:

* the reservation: the inputs' estimated tokens, no output (:func:`embed_cost`); the
  RateLimiter settles it with the provider's count, the ledger books it at the model's price;
* the model: the carrier's model is where the call goes now (a fallback, a group's
  deployment), and :func:`embed_for` sends the inputs there;
* the result: built by :func:`embed_result` from the winning attempt and ended with
  :class:`~sluice._events.Embedded` in place of ``Completed``, which :func:`wait_embedded` reads;
* the preparation (:func:`prepare_embed_call`): the same steps as a chat call's
  (:mod:`sluice._prepare`), with the response cache keyed on the inputs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import attrs
import trio

from ._call_result import call_timings
from ._embeddings import EmbedOutput, EmbedRequest, EmbedResult
from ._errors import BadRequest, RuntimeClosed
from ._events import Embedded, Failed
from ._limits.cost import Cost
from ._mail import Call, EventBatch, ProviderMailbox
from ._messages import ChatRequest, Usage
from ._prepare import GroupPlacement, deadlines, model_target
from .providers._embedding import embedding_codec, no_embeddings

if TYPE_CHECKING:
    from ._cache import ResponseCache
    from ._errors import SluiceError
    from ._mail import AttemptSucceeded
    from .providers._registry import ResolvedProvider

__all__ = [
    "EmbedReady",
    "as_embed_request",
    "carrier",
    "embed_cost",
    "embed_for",
    "embed_result",
    "estimate_input_tokens",
    "prepare_embed_call",
    "wait_embedded",
]

Route = tuple["ResolvedProvider", ProviderMailbox]

_CHARS_PER_TOKEN = 4


def as_embed_request(
    request: EmbedRequest | str, input: str | Iterable[str] | None, fields: Mapping[str, Any]
) -> EmbedRequest:
    """The request ``embed(request, input, **fields)`` means: an :class:`EmbedRequest` with
    ``input`` and ``fields`` replaced, or one built from a ``provider:model`` string.

    Raises:
        TypeError: a model string came without input.
    """
    if isinstance(request, EmbedRequest):
        changes: dict[str, Any] = dict(fields)
        if input is not None:
            changes["input"] = input
        return attrs.evolve(request, **changes) if changes else request
    if input is None:
        raise TypeError("give the input (a string or a list of strings) after the model")
    return EmbedRequest(model=request, input=input, **fields)


def estimate_input_tokens(text: str) -> int:
    """A quick estimate of one input's tokens (about four characters a token, at least one):
    what admission reserves and what ``embed_many`` packs requests by."""
    return max(1, -(-len(text) // _CHARS_PER_TOKEN))


def embed_cost(request: EmbedRequest) -> Cost:
    """The reservation for one attempt: one request and the inputs' estimated tokens; an
    embedding generates nothing, so no output tokens."""
    return Cost(1, sum(estimate_input_tokens(text) for text in request.input), 0)


def carrier(request: EmbedRequest) -> ChatRequest:
    """The chat-shaped request that carries ``request``'s routing fields through the actors.

    ``max_tokens=0`` says there is no output: a spending budget has nothing to guess or cap.
    """
    return ChatRequest(
        model=request.model,
        messages=(),
        max_tokens=0,
        stream=False,
        tag=request.tag,
        priority=request.priority,
        deadlines=request.deadlines,
        fallbacks=request.fallbacks,
        failure_mode=request.failure_mode,
        max_wait=request.max_wait,
        retry_visible=request.retry_visible,
        response_cache=request.response_cache,
    )


def embed_for(call: Call) -> EmbedRequest:
    """What ``call``'s attempt sends: its embedding request, to the model its carrier names
    now (the Supervisor moves the carrier to a fallback or another deployment)."""
    request = call.embed
    assert request is not None
    model = call.request.model
    return request if request.model == model else attrs.evolve(request, model=model)


def embed_result(
    call: Call,
    route: Call,
    outcome: AttemptSucceeded,
    *,
    attempts: int,
    models_tried: tuple[str, ...],
    admitted_at: float,
) -> EmbedResult:
    """The call's result from its winning attempt (the Supervisor's, for ``Call.embed``)."""
    output = outcome.output
    assert isinstance(output, EmbedOutput)
    return EmbedResult(
        call_id=call.call_id,
        provider=route.provider.name,
        model=route.model,
        vectors=output.vectors,
        # A provider that counts nothing (Gemini) is booked at the admission estimate, as the
        # ProviderActor tells the ledger; the result says the same, not zero.
        usage=output.usage if output.usage is not None else Usage(route.cost.input_tokens),
        attempts=attempts,
        timings=call_timings(call, outcome, admitted_at, trio.current_time()),
        request_id=outcome.request_id or output.response_id,
        models_tried=models_tried,
    )


@attrs.frozen(eq=False)
class EmbedReady:
    """An embedding call to hand to the Supervisor, and the consumer's end of its events."""

    call: Call
    events: trio.MemoryReceiveChannel[EventBatch]
    store: Callable[[EmbedResult], None] | None
    """Stores the result in the response cache; None when the call is not cached."""


async def prepare_embed_call(
    request: EmbedRequest,
    call_id: str,
    *,
    start: Callable[[tuple[str, ...]], Awaitable[tuple[Route, ...]]],
    groups: GroupPlacement,
    cache: ResponseCache | None,
    draining: bool,
) -> EmbedReady | EmbedResult:
    """The call ``request`` becomes, or the cached result: the steps of
    :func:`sluice._prepare.prepare_call` (model, providers, placement, cache, deadlines, cost,
    call) for an embedding.

    Raises:
        ConfigError: the model names no provider or group, or a provider without a key.
        BadRequest: the chosen provider's protocol has no embeddings.
        RuntimeClosed: the runtime is draining (a cache hit is still answered).
    """
    if not request.input:
        raise BadRequest("an embedding request needs at least one input")
    target = model_target(request.model, groups.routing.groups)
    routes = await start(target.providers)
    carried = carrier(request)
    placed = groups.place(carried, target, routes)
    try:
        spec, mailbox = routes[placed.index]
        model = target.models[placed.index]
        carried = placed.request
        if not _has_embeddings(spec):
            raise no_embeddings(spec.name, spec.protocol)
        store = None
        if cache is not None:
            hit, key = cache.get_embed(request, carried.model, spec, call_id)
            if hit is not None:
                groups.release(target.group, carried.model)
                return hit
            store = cache.embed_storer(key) if key is not None else None
        if draining:
            raise RuntimeClosed("the runtime is draining: it takes no new calls")
        now = trio.current_time()
        deadline, first_token, idle = deadlines(spec.deadlines, request.deadlines, now)
        send, receive = trio.open_memory_channel[EventBatch](1)
    except BaseException:
        groups.release(target.group, carried.model)
        raise
    call = Call(
        call_id=call_id,
        request=carried,
        provider=spec,
        provider_mailbox=mailbox,
        model=model,
        events=send,
        submitted_at=now,
        deadline=deadline,
        first_token_timeout=first_token,
        idle_timeout=idle,
        cost=embed_cost(request),
        quiet=True,
        group=target.group,
        failover=placed.failover,
        embed=request,
    )
    return EmbedReady(call, receive, store)


def _has_embeddings(spec: ResolvedProvider) -> bool:
    """Whether ``spec``'s protocol's codec has embeddings (checked before admission, so a
    call that cannot be sent costs no quota)."""
    from ._protocols import codec_for

    return embedding_codec(codec_for(spec.protocol)) is not None


async def wait_embedded(
    receive: trio.MemoryReceiveChannel[EventBatch], call_id: str
) -> EmbedResult:
    """The embedding call's result, from its events (only the last event matters: the call
    is quiet).

    Raises:
        SluiceError: the call failed, or ended without a result (the runtime stopped).
    """
    error: SluiceError | None = None
    while True:
        try:
            batch = await receive.receive()
        except trio.EndOfChannel:
            break
        last = batch[-1] if batch else None
        if isinstance(last, Embedded):
            return last.result
        if isinstance(last, Failed):
            error = last.error
    raise error or RuntimeClosed(f"call {call_id} ended without a result")
