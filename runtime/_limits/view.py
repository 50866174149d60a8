"""What a process knows of a shared store's windows without asking it: the last answer per key.

The windows of a shared store live on its server, and statistics (the window gauges, the batch
progress line) must never wait for it: a scrape while the server is down answers at once.
:class:`WindowViews` keeps, per quota key this process uses, the use and limit of each window as
the server last reported them, and when. The store feeds it from every admission's answer and
from a periodic read of the keys it has not heard of lately (:meth:`WindowViews.stale`);
readers get the values and their age without a round trip. An answer is kept as the script's
string and parsed only when read, so an admission pays for no parsing. It holds only keys the
store was asked about and drops each one when the store forgets the key, so its size follows
the RateLimiter's keys.
"""

from __future__ import annotations

from typing import Any

import attrs

__all__ = ["WindowViews", "parse_usage"]


def parse_usage(text: str) -> dict[str, tuple[int, int]]:
    """The script's usage string (``dimension:period:used:limit``, comma-separated) as
    ``{"dimension/period": (used, limit)}``, named as the in-memory store names its windows."""
    found: dict[str, tuple[int, int]] = {}
    for part in text.split(","):
        if part:
            dimension, period, used, limit = part.split(":")
            found[f"{dimension}/{float(period):g}s"] = (int(float(used)), int(float(limit)))
    return found


@attrs.define
class _Seen:
    specs: list[Any]
    """The key's configured windows, as the script takes them."""
    usage: str = ""
    """The windows as the script last reported them (see :func:`parse_usage`)."""
    at: float | None = None
    """When the server last reported the windows (None: not yet)."""


class WindowViews:
    """The last known windows of each key in use, with when they were known."""

    __slots__ = ("_keys",)

    def __init__(self) -> None:
        self._keys: dict[str, _Seen] = {}

    def use(self, key: str, specs: list[Any]) -> None:
        """``key`` is asked about with these windows: keep (or start) its view."""
        seen = self._keys.get(key)
        if seen is None:
            self._keys[key] = _Seen(specs)
        else:
            seen.specs = specs

    def note(self, key: str, usage: str, now: float) -> None:
        """The server reported ``key``'s windows (a usage string) asked for at ``now``. A key
        no longer in use (forgotten while the answer was on its way) stays out, and so does a
        report asked for before the one the view holds (reads and admissions overlap)."""
        seen = self._keys.get(key)
        if seen is not None and (seen.at is None or now >= seen.at):
            seen.usage = usage
            seen.at = now

    def stale(self, now: float, every: float, most: int) -> list[tuple[str, list[Any]]]:
        """(key, specs) of at most ``most`` keys not reported for ``every`` seconds, those
        never reported first, then the oldest: the next read to send."""
        due = [
            (seen.at is not None, seen.at or 0.0, key, seen.specs)
            for key, seen in self._keys.items()
            if seen.at is None or now - seen.at >= every
        ]
        due.sort(key=lambda item: item[:2])
        return [(key, specs) for _, _, key, specs in due[:most]]

    def usage(self, key: str) -> dict[str, tuple[int, int]]:
        """The key's windows as last reported (empty before the first report)."""
        seen = self._keys.get(key)
        return parse_usage(seen.usage) if seen is not None else {}

    def age(self, key: str, now: float) -> float:
        """Seconds since the key's windows were reported (0 before the first report: there is
        nothing to be old)."""
        seen = self._keys.get(key)
        if seen is None or seen.at is None:
            return 0.0
        return max(0.0, now - seen.at)

    def forget(self, key: str) -> None:
        self._keys.pop(key, None)

    def __len__(self) -> int:
        return len(self._keys)
