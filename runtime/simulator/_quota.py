"""Server-side quotas: requests and tokens per minute over a sliding window. Pure.

The caller passes the time (trio's clock in the app), so the window is exact under a
``MockClock``. A request is charged when it is admitted, with its prompt tokens plus the
tokens of the reply the simulator planned for it; a refused request costs nothing.

The state is reported the way OpenAI does, in ``x-ratelimit-*`` headers on every response:
limit, remaining and reset, where reset is the time until the window is back to its initial
state (``0s`` when empty), written as a duration (``1s``, ``6ms``, ``1m0s``). Anthropic's
``anthropic-ratelimit-*`` family carries the same numbers with resets as RFC 3339 times.
"""

from __future__ import annotations

import collections
import math
import time

__all__ = ["QuotaWindow", "format_duration"]


def format_duration(seconds: float) -> str:
    """``seconds`` as OpenAI writes its resets: ``0s``, ``6ms``, ``1.5s``, ``1m0s``, ``2m3.25s``.

    Below one second, whole milliseconds rounded up; otherwise at most three decimals.
    """
    if seconds <= 0:
        return "0s"
    if seconds < 1:
        return f"{math.ceil(round(seconds * 1000, 6))}ms"
    minutes, rest = divmod(round(seconds, 3), 60)
    text = f"{rest:.3f}".rstrip("0").rstrip(".") + "s"
    return f"{int(minutes)}m{text}" if minutes else text


class QuotaWindow:
    """Requests-per-window and tokens-per-window limits over one sliding window.

    Args:
        rpm: requests allowed in any window; None for no limit.
        tpm: tokens allowed in any window; None for no limit.
        window: the window's length in seconds (a minute).
    """

    def __init__(self, *, rpm: int | None, tpm: int | None, window: float = 60.0) -> None:
        self.rpm = rpm
        self.tpm = tpm
        self.window = window
        self._admitted: collections.deque[tuple[float, int]] = collections.deque()
        self._tokens = 0

    def _expire(self, now: float) -> None:
        admitted = self._admitted
        while admitted and admitted[0][0] + self.window <= now:
            self._tokens -= admitted.popleft()[1]

    def admit(self, now: float, tokens: int) -> tuple[float, str] | None:
        """Charge a request of ``tokens`` at ``now`` if both limits allow it.

        Returns:
            None when admitted; otherwise the seconds until it would be and the limit that
            refused it (``"requests"`` or ``"tokens"``, the one with the longer wait). A request
            larger than the whole token limit never fits; it is told to wait a full window.
        """
        self._expire(now)
        admitted = self._admitted
        refusal: tuple[float, str] | None = None
        if self.rpm is not None and len(admitted) >= self.rpm:
            refusal = (admitted[len(admitted) - self.rpm][0] + self.window - now, "requests")
        if self.tpm is not None and self._tokens + tokens > self.tpm:
            wait = self.window
            if tokens <= self.tpm:
                excess = self._tokens + tokens - self.tpm
                for at, spent in admitted:
                    excess -= spent
                    if excess <= 0:
                        wait = at + self.window - now
                        break
            if refusal is None or wait > refusal[0]:
                refusal = (wait, "tokens")
        if refusal is not None:
            return refusal
        admitted.append((now, tokens))
        self._tokens += tokens
        return None

    def headers(self, now: float) -> list[tuple[bytes, bytes]]:
        """OpenAI's ``x-ratelimit-{limit,remaining,reset}-{requests,tokens}`` for the set limits."""
        out: list[tuple[bytes, bytes]] = []
        for name, limit, used, reset in self._report(now):
            out.append((b"x-ratelimit-limit-" + name, b"%d" % limit))
            out.append((b"x-ratelimit-remaining-" + name, b"%d" % max(0, limit - used)))
            out.append((b"x-ratelimit-reset-" + name, format_duration(reset).encode()))
        return out

    def anthropic_headers(self, now: float, wall_now: float) -> list[tuple[bytes, bytes]]:
        """``anthropic-ratelimit-{requests,tokens}-{limit,remaining,reset}``, resets as RFC 3339
        times counted from ``wall_now``."""
        out: list[tuple[bytes, bytes]] = []
        for name, limit, used, reset in self._report(now):
            prefix = b"anthropic-ratelimit-" + name
            when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(math.ceil(wall_now + reset)))
            out.append((prefix + b"-limit", b"%d" % limit))
            out.append((prefix + b"-remaining", b"%d" % max(0, limit - used)))
            out.append((prefix + b"-reset", when.encode()))
        return out

    def _report(self, now: float) -> list[tuple[bytes, int, int, float]]:
        self._expire(now)
        admitted = self._admitted
        reset = admitted[-1][0] + self.window - now if admitted else 0.0
        report = []
        if self.rpm is not None:
            report.append((b"requests", self.rpm, len(admitted), reset))
        if self.tpm is not None:
            report.append((b"tokens", self.tpm, self._tokens, reset))
        return report
