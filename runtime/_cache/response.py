"""The response cache: a final result stored under its request's key, replayed on a hit.

What is stored: the final result of a call that succeeded, keyed by the caller's own request
(:func:`~sluice._cache.key.request_key`), never the prepared or corrected form the backend was
sent. Failed calls, streams the consumer left before the end, and the attempts a tool-call
correction replaced never reach the cache, since only a ``Completed`` result is offered to it;
a result with nothing in it (an empty reply, or one a content filter stopped) is not stored
either, so a hiccup is not replayed forever.

What a hit is: the stored reply with this call's id, ``cached=True``, zero usage and zero
attempts. It costs no quota (the RateLimiter never sees it) and is not written to the ledger,
which counts what providers were asked and billed; :meth:`ResponseCache.statistics` counts
hits. Results are frozen all the way down, so one stored value is safely shared by every hit.

Time: entries expire on the wall clock (``time.time``), because a file keeps them across runs,
where trio's clock starts afresh.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, TypeVar

import attrs
import trio

from .._events import CallEvent, Completed, ReasoningDelta, TextDelta, signature_events
from .._messages import ChatResult, Timings, Usage
from .._record import Record
from .._tools.streaming import whole_call_deltas
from .key import embed_key, request_key
from .memory import LruCache

if TYPE_CHECKING:
    from collections.abc import Callable

    from .._config import CacheConfig
    from .._embeddings import EmbedRequest, EmbedResult
    from .._messages import ChatRequest
    from ..providers._registry import ResolvedProvider
    from .sqlite import SQLiteCacheStore

__all__ = ["CacheStatistics", "ResponseCache", "replay_events"]

R = TypeVar("R", "ChatResult", "EmbedResult")


@attrs.frozen(kw_only=True, repr=False)
class CacheStatistics(Record):
    """What the response cache holds and has done since the runtime started."""

    entries: int
    """Results in memory."""
    max_entries: int
    hits: int
    """Calls answered from the cache (memory or file)."""
    file_hits: int
    """Of ``hits``, those found only in the file."""
    misses: int
    stores: int
    """Results stored."""
    skipped: int
    """Results not stored because they held nothing (an empty or filtered reply)."""
    evictions: int
    """Results dropped from memory to stay within ``max_entries``."""
    expirations: int
    """Results found expired in memory."""


def _storable(result: ChatResult) -> bool:
    if result.finish_reason == "content_filter":
        return False
    return bool(result.message.text.strip() or result.message.tool_calls)


class ResponseCache:
    """Results by request key, in a bounded LRU in memory, optionally backed by a file.

    Create one with :meth:`open`; the runtime owns it (``Runtime.cache``).
    """

    def __init__(
        self,
        config: CacheConfig,
        *,
        store: SQLiteCacheStore | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self._memory: LruCache[ChatResult | EmbedResult] = LruCache(
            config.max_entries, config.ttl
        )
        self._store = store
        self._clock = clock
        self._hits = self._file_hits = self._misses = self._stores = self._skipped = 0

    @classmethod
    async def open(
        cls, config: CacheConfig, *, clock: Callable[[], float] = time.time
    ) -> ResponseCache:
        """A cache as ``config`` says; its file (if any) is opened in a worker thread.

        Raises:
            OSError: the file cannot be opened.
        """
        store = None
        if config.path is not None:
            from .sqlite import SQLiteCacheStore  # only a cache with a file loads sqlite3

            path = config.path
            store = await trio.to_thread.run_sync(
                lambda: SQLiteCacheStore.open(
                    path, ttl=config.ttl, max_stored=config.max_stored, now=clock()
                )
            )
        return cls(config, store=store, clock=clock)

    @staticmethod
    def key(request: ChatRequest, provider: ResolvedProvider) -> str:
        """The key of the caller's ``request`` when sent to ``provider``'s backend (its
        configured parameters and base URL are part of the question)."""
        model = request.model.partition(":")[2]
        params = {"provider": provider.params, "model": provider.model_params.get(model, {})}
        return request_key(request, params=params, base_url=provider.base_url)

    def get(self, key: str, call_id: str) -> ChatResult | None:
        """The stored result for ``key``, as call ``call_id``'s result; None on a miss."""
        found = self._find(key, ChatResult)
        return None if found is None else attrs.evolve(found, call_id=call_id)

    def _find(self, key: str, kind: type[R]) -> R | None:
        """What is stored under ``key`` if it is a ``kind`` (counted as a hit or a miss)."""
        now = self._clock()
        found = self._memory.get(key, now)
        if found is None and self._store is not None:
            found = self._store.get(key, now, kind)
            if found is not None:
                self._file_hits += 1
                self._memory.put(key, found, now)
        if not isinstance(found, kind):
            self._misses += 1
            return None
        self._hits += 1
        return found

    def get_embed(
        self, request: EmbedRequest, model: str, provider: ResolvedProvider, call_id: str
    ) -> tuple[EmbedResult | None, str | None]:
        """The cached result of embedding ``request`` with ``model`` (``provider:model``) of
        ``provider`` as call ``call_id``'s (None on a miss), and the key to store its result
        under (None: its ``extra_body`` has no JSON form, so it is not cached)."""
        from .._embeddings import EmbedResult

        try:
            key = embed_key(request, model=model, base_url=provider.base_url)
        except TypeError:
            return None, None
        found = self._find(key, EmbedResult)
        return (None if found is None else attrs.evolve(found, call_id=call_id)), key

    def put_embed(self, key: str, result: EmbedResult) -> None:
        """Store an embedding ``result`` under ``key`` as every later hit returns it: its
        vectors, ``cached=True``, no usage and no attempts."""
        stored = attrs.evolve(
            result, call_id="", usage=Usage(), attempts=0, timings=Timings(), cached=True
        )
        now = self._clock()
        self._memory.put(key, stored, now)
        if self._store is not None:
            self._store.put(key, stored, now)
        self._stores += 1

    def embed_storer(self, key: str) -> Callable[[EmbedResult], None]:
        """A callback that stores an embedding result under ``key``."""
        return lambda result: self.put_embed(key, result)

    def put(self, key: str, result: ChatResult) -> None:
        """Store ``result`` under ``key`` as every later hit will return it, unless it holds
        nothing worth replaying."""
        if not _storable(result):
            self._skipped += 1
            return
        stored = attrs.evolve(
            result,
            call_id="",
            usage=Usage(),
            attempts=0,
            corrections=0,
            timings=Timings(),
            cached=True,
        )
        now = self._clock()
        self._memory.put(key, stored, now)
        if self._store is not None:
            self._store.put(key, stored, now)
        self._stores += 1

    def storer(self, key: str) -> Callable[[ChatResult], None]:
        """A callback that stores a result under ``key`` (given to the call's stream)."""
        return lambda result: self.put(key, result)

    def delete(self, key: str) -> None:
        self._memory.delete(key)
        if self._store is not None:
            self._store.delete(key)

    def clear(self) -> None:
        """Forget every result, in memory and in the file."""
        self._memory.clear()
        if self._store is not None:
            self._store.clear()

    def statistics(self) -> CacheStatistics:
        lru = self._memory.statistics()
        return CacheStatistics(
            entries=lru.entries,
            max_entries=lru.max_entries,
            hits=self._hits,
            file_hits=self._file_hits,
            misses=self._misses,
            stores=self._stores,
            skipped=self._skipped,
            evictions=lru.evictions,
            expirations=lru.expirations,
        )

    def close(self) -> None:
        """Close the file (results already stored stay in it)."""
        if self._store is not None:
            self._store.close()


def replay_events(result: ChatResult, *, quiet: bool) -> list[CallEvent]:
    """The events a hit delivers: the reply's deltas as one streamed attempt would carry them
    (reasoning, text, each tool call whole), then ``Completed``; only ``Completed`` for a
    quiet consumer (``chat``, ``map``). No ``Queued``/``Admitted``/``FirstToken``: nothing was
    admitted or sent; no ``UsageReported``: nothing was used."""
    call_id = result.call_id
    done = Completed(call_id, result)
    if quiet:
        return [done]
    events: list[CallEvent] = []
    message = result.message
    if message.reasoning:
        events.append(ReasoningDelta(call_id, message.reasoning))
    events.extend(signature_events(call_id, message))
    if message.text:
        events.append(TextDelta(call_id, message.text))
    events.extend(whole_call_deltas(call_id, message.tool_calls))
    events.append(done)
    return events
