"""``Runtime.embed`` and ``Runtime.embed_many``: the runtime's embedding methods, kept out of
:mod:`sluice._runtime` in :class:`EmbedMethods`, a base class of
:class:`~sluice._runtime.Runtime`.

``embed`` prepares the call (:func:`sluice._embed_calls.prepare_embed_call`), hands it to the
Supervisor and waits for its one end, exactly as ``Runtime.chat`` does for a chat call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import trio

from sluice.actors._tell import put

from ._embed_calls import as_embed_request, prepare_embed_call, wait_embedded
from ._embeddings import EmbedResult
from ._errors import RuntimeClosed, SluiceError
from ._mail import Submit

if TYPE_CHECKING:
    import itertools
    from collections.abc import Iterable

    from ._cache import ResponseCache
    from ._embeddings import EmbedRequest
    from ._mail import SupervisorMsg
    from ._observe.observer import Observer
    from ._prepare import GroupPlacement
    from ._startup import Providers

__all__ = ["EmbedMethods"]


class EmbedMethods:
    """The embedding methods of :class:`~sluice._runtime.Runtime` (which sets every attribute
    declared here)."""

    _providers: Providers | None
    _groups: GroupPlacement
    _supervisor: trio.MemorySendChannel[SupervisorMsg]
    _observer: Observer | None
    _ids: itertools.count[int]
    _draining: bool
    _cache: ResponseCache | None
    _cache_by_default: bool

    async def _open_cache(self) -> ResponseCache:
        raise NotImplementedError  # Runtime's

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
