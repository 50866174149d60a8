"""Log lines of notable events, and a JSON formatter for them.

Calls and attempts log where they end (:mod:`.observer`); actor restarts where they happen
(:mod:`sluice.actors._restart`). Breaker and cooldown changes are seen by a watcher task that
compares :meth:`Runtime.health` once a second, so the actors that own them stay untouched.
Messages name providers, models, call ids and error classes; never a key.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import orjson
import trio

from sluice._errors import RuntimeClosed

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping

    from sluice._runtime import ProviderHealth

__all__ = ["JsonFormatter", "watch_changes"]

log = logging.getLogger("sluice.health")

_WATCH_INTERVAL = 1.0
_STANDARD = frozenset(vars(logging.makeLogRecord({})))


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``ts``, ``level``, ``logger``, ``msg``, any ``extra`` fields,
    and ``exc`` with the traceback when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and key not in ("message", "asctime"):
                out[key] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(out, default=str).decode()


async def watch_changes(
    health: Callable[[], Awaitable[Mapping[str, ProviderHealth]]],
    interval: float = _WATCH_INTERVAL,
) -> None:
    """Log each provider's breaker changes and cooldowns as they begin and end; forever."""
    before: Mapping[str, ProviderHealth] = {}
    while True:
        await trio.sleep(interval)
        try:
            now = await health()
        except (RuntimeClosed, trio.ClosedResourceError):
            return  # the runtime is shutting down
        for name, h in now.items():
            old = before.get(name)
            old_state = old.breaker if old is not None else "closed"
            if h.breaker != old_state:
                log.warning("%s: circuit breaker %s -> %s", name, old_state, h.breaker)
            cooling = old is not None and old.cooldown_left > 0
            if h.cooldown_left > 0 and not cooling:
                log.warning("%s: cooling down for %.1f s after a rate limit", name, h.cooldown_left)
            elif cooling and h.cooldown_left <= 0:
                log.info("%s: cooldown over", name)
        before = now
