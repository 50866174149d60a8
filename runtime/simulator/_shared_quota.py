"""The simulator's server-side quota kept in Redis, so several simulator processes behave as
one provider account (``sluice sim --rpm N --store redis://...``).

Admission goes through the same :class:`~sluice._limits.redis_store.RedisQuotaStore` script
clients use, under its own key, on the Redis server's clock: at most ``rpm`` requests and
``tpm`` tokens (prompt plus planned reply) in any 60 s, across every process sharing the
store. A refused request costs nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._limits.cost import Cost
from .._limits.store import Reservation, TooLarge, WindowSpec
from .._limits.store_epoch import HistoryLost

if TYPE_CHECKING:
    from .._limits.redis_store import RedisQuotaStore

__all__ = ["SharedServerQuota"]

_WINDOW = 60.0


class SharedServerQuota:
    """``admit`` as :meth:`~sluice.simulator._quota.QuotaWindow.admit` does, through Redis."""

    def __init__(
        self, store: RedisQuotaStore, *, rpm: int | None, tpm: int | None, key: str = "sim"
    ) -> None:
        self.store = store
        self.key = key
        specs = []
        if rpm is not None:
            specs.append(WindowSpec("requests", rpm, _WINDOW))
        if tpm is not None:
            specs.append(WindowSpec("total_tokens", tpm, _WINDOW))
        self.specs = tuple(specs)
        self._dimension = "requests" if rpm is not None else "tokens"

    async def admit(self, tokens: int) -> tuple[float, str] | None:
        """None when admitted; else the seconds to wait and the limit that refused it.

        Raises:
            StoreUnavailable: Redis did not answer.
        """
        try:
            got = await self.store.reserve(self.key, self.specs, Cost(1, tokens, 0), 0.0)
        except HistoryLost:  # Redis came back empty: the account's window starts afresh
            got = await self.store.reserve(self.key, self.specs, Cost(1, tokens, 0), 0.0)
        if isinstance(got, Reservation):
            return None
        if isinstance(got, TooLarge):
            return _WINDOW, "tokens"
        assert isinstance(got, float)
        return got, self._dimension
