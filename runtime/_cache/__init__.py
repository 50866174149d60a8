"""The response cache: identical requests answered without asking the provider again.

Off by default; turn it on for a runtime with ``RuntimeConfig(cache=CacheConfig(enabled=True))``
(``path=`` adds a SQLite file that keeps results across runs), or for one call with
``ChatRequest(response_cache=True)``; ``response_cache=False`` opts one call out.

* :mod:`.key` -- the key: a stable hash of what shapes the answer (pure);
* :mod:`.memory` -- a bounded LRU with a time to live (pure);
* :mod:`.response` -- :class:`ResponseCache`, what the runtime consults at submit, and the
  events a hit replays;
* :mod:`.sqlite` -- the optional file (loaded only when a path is configured).
"""

from __future__ import annotations

from .key import request_key as request_key
from .memory import LruCache as LruCache
from .memory import LruStatistics as LruStatistics
from .response import CacheStatistics as CacheStatistics
from .response import ResponseCache as ResponseCache
from .response import replay_events as replay_events

__all__ = [
    "CacheStatistics",
    "LruCache",
    "LruStatistics",
    "ResponseCache",
    "replay_events",
    "request_key",
]
