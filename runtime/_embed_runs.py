"""``Runtime.embed`` and ``Runtime.embed_many``: the runtime's embedding methods, kept out of
:mod:`sluice._runtime` in :class:`EmbedMethods`, a base class of
:class:`~sluice._runtime.Runtime`.

``embed`` prepares the call (:func:`sluice._embed_calls.prepare_embed_call`), hands it to the
Supervisor and waits for its one end, exactly as ``Runtime.chat`` does for a chat call.

The embedding layer (requests, packing, codecs) is imported by the methods themselves, so a
runtime that never embeds never loads it.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import trio

from ._errors import RuntimeClosed, SluiceError

if TYPE_CHECKING:
    import itertools
    from collections.abc import AsyncIterable, AsyncIterator, Iterable

    from ._cache import ResponseCache
    from ._config import RuntimeConfig
    from ._embed_many import EmbedOutcomes
    from ._embeddings import EmbedRequest, EmbedResult
    from ._mail import SupervisorMsg
    from ._observe.observer import Observer
    from ._prepare import GroupPlacement
    from ._startup import Providers

__all__ = ["EmbedMethods"]


class EmbedMethods:
    """The embedding methods of :class:`~sluice._runtime.Runtime` (which sets every attribute
    declared here)."""

    config: RuntimeConfig
    _providers: Providers | None
    _groups: GroupPlacement
    _supervisor: trio.MemorySendChannel[SupervisorMsg]
    _observer: Observer | None
    _ids: itertools.count[int]
    _draining: bool
    _cache: ResponseCache | None
    _cache_by_default: bool

    if TYPE_CHECKING:

        async def _open_cache(self) -> ResponseCache:
            """The runtime's response cache, opened on first use (``Runtime`` defines it)."""
            ...

    async def embed(
        self, request: EmbedRequest | str, input: str | Iterable[str] | None = None, **fields: Any
    ) -> EmbedResult:
        """Embed every input of one request in one call to the provider, through the same
        quotas, retries, breakers, fallbacks, ledger and response cache as a chat call.

        ``request`` is an :class:`~sluice.EmbedRequest`, or a ``provider:model`` string with
        ``input`` (a string or a list of strings) and any other EmbedRequest field as keywords.
        The result has one vector per input, in order, as floats.

        Raises:
            CallError: the call failed (after whatever retries the policy allowed);
                :class:`~sluice.BadRequest` at once when the provider has no embeddings.
            ConfigError: the model names an unknown provider, or one without a key.
            RuntimeClosed: the runtime is draining or has stopped.
        """
        from sluice.actors._tell import put

        from ._embed_calls import as_embed_request, prepare_embed_call, wait_embedded
        from ._embeddings import EmbedResult
        from ._mail import Submit

        embed = as_embed_request(request, input, fields)
        assert self._providers is not None
        cache = None
        use_cache = embed.response_cache
        if use_cache or (use_cache is None and self._cache_by_default):
            cache = self._cache or await self._open_cache()
        call_id = f"c{next(self._ids)}"
        made = await prepare_embed_call(
            embed,
            call_id,
            start=self._providers.routes,
            groups=self._groups,
            cache=cache,
            draining=self._draining,
        )
        if isinstance(made, EmbedResult):
            return made
        call = made.call
        result: EmbedResult | None = None
        error: SluiceError | None = None
        try:
            with made.events:
                try:
                    await put(self._supervisor, Submit(call))
                except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                    call.events.close()
                    self._groups.release(call.group, call.request.model)
                    raise RuntimeClosed("the runtime has stopped; open a new one") from exc
                except BaseException:
                    self._groups.release(call.group, call.request.model)
                    raise
                try:
                    result = await wait_embedded(made.events, call_id)
                except SluiceError as exc:
                    error = exc
                    raise
        finally:
            call.abandon()
            if self._observer is not None:
                self._observer.embed_ended(call, result, error)
        if made.store is not None:
            made.store(result)
        return result

    @asynccontextmanager
    async def embed_many(
        self,
        texts: Iterable[str] | AsyncIterable[str],
        *,
        model: str,
        batch_size: int | None = None,
        max_in_flight: int = 4,
        **fields: Any,
    ) -> AsyncIterator[EmbedOutcomes]:
        """Embed many inputs, packed into as few requests as the provider takes; yield every
        input's outcome in input order.

        Each request holds at most ``batch_size`` inputs (default: as many as the provider
        takes in one request, e.g. 2048 for OpenAI, 100 for Gemini; see
        :class:`~sluice.EmbedLimits`) and no more estimated tokens than one request, or one
        window of the provider's token quota, may carry. At most ``max_in_flight`` requests
        run at once, and inputs are read from ``texts`` (any iterable or async iterable of
        strings) only as far ahead as they hold, so a corpus of any size streams through in
        bounded memory. ``fields`` are :class:`~sluice.EmbedRequest`'s (``dimensions``,
        ``encoding_format``, ``tag``, ``fallbacks``, ...); ``priority`` defaults to
        ``"batch"``, so requests wait out outages rather than fail.

        A request that fails (after its retries) gives each of its inputs an
        :class:`EmbedOutcome` with the error; the others go on. Leaving the block early
        cancels the requests still running.

        Raises:
            ConfigError: the model names an unknown provider, or one without a key.
            BadRequest: the provider has no embeddings.
        """
        from ._embed_many import EmbedCounts, EmbedOutcome, EmbedOutcomes, feed_embed_many
        from ._embed_packing import Packer
        from ._embeddings import EmbedRequest

        if max_in_flight < 1:
            raise ValueError("max_in_flight must be at least 1")
        if batch_size is not None and batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        fields.setdefault("priority", "batch")
        template = EmbedRequest(model=model, input=(), **fields)
        max_inputs, max_tokens = await self._request_limits(model, batch_size)
        counts = EmbedCounts()
        send, receive = trio.open_memory_channel[list[EmbedOutcome]](1)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                feed_embed_many,
                self.embed,
                texts,
                template,
                Packer(max_inputs, max_tokens),
                max_in_flight,
                send,
                counts,
            )
            with receive:
                yield EmbedOutcomes(receive, counts)
            nursery.cancel_scope.cancel(reason="the consumer of Runtime.embed_many left")

    async def _request_limits(self, model: str, batch_size: int | None) -> tuple[int, int | None]:
        """``(inputs, tokens)`` per request for ``model``: the tightest over a group's
        deployments (see :func:`sluice._embed_packing.request_limits`).

        Raises:
            ConfigError: the model names an unknown provider or group, or a provider without
                a key.
            BadRequest: the (first) provider has no embeddings.
        """
        from ._embed_packing import request_limits
        from ._prepare import model_target
        from ._protocols import codec_for
        from .providers._embedding import (
            FALLBACK_BATCH,
            embed_limits,
            embedding_codec,
            no_embeddings,
        )

        assert self._providers is not None
        target = model_target(model, self._groups.routing.groups)
        routes = await self._providers.routes(target.providers)
        first = routes[0][0]
        if embedding_codec(codec_for(first.protocol)) is None:
            raise no_embeddings(first.name, first.protocol)
        inputs: int | None = None
        tokens: int | None = None
        for (spec, _), name in zip(routes, target.models, strict=True):
            limits = embed_limits(spec, self.config.providers.get(spec.name), name)
            n, t = request_limits(limits, spec.rate_limit, batch_size, FALLBACK_BATCH)
            inputs = n if inputs is None else min(inputs, n)
            if t is not None:
                tokens = t if tokens is None else min(tokens, t)
        assert inputs is not None
        return inputs, tokens
