"""A crashed RateLimiter keeps its windows and cooldowns: the quota store belongs to
``open_runtime``, not to one run of the actor (issue 31).

Virtual time over ``httpx.MockTransport``: two OpenAI-style servers note when each request
arrives. The RateLimiter is crashed for real, through the ``rng`` the runtime is given: the
first spread it draws after a cooldown (on provider ``b``) raises, while provider ``a`` has a
full window and a cooldown of its own.
"""

from __future__ import annotations

import random

import httpx
import orjson
import trio

import sluice
from sluice import ProviderConfig, RateLimitConfig, RetryConfig, RuntimeConfig, Secret, WindowLimit

from .helpers import virtual_deadline

LIMIT, PER = 3, 2.0
"""Provider ``a``'s window: at most 3 requests in any 2 s."""
A_PAUSE = 6.0
"""The Retry-After of ``a``'s 429 (its third request, at 0 s)."""


class CrashingRandom(random.Random):
    """The runtime's rng; the first ``uniform`` draw (the RateLimiter's post-cooldown spread,
    the only caller) raises, as a bug in the actor would."""

    def __init__(self) -> None:
        super().__init__(0)
        self.crashed_at: float | None = None

    def uniform(self, a: float, b: float) -> float:
        if self.crashed_at is None:
            self.crashed_at = trio.current_time()
            raise RuntimeError("injected rate limiter crash")
        return super().uniform(a, b)


def _reply() -> httpx.Response:
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m"}
    events = [
        {**chunk, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "ok"}}]},
        {
            **chunk,
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
        },
    ]
    body = b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in events) + b"data: [DONE]\n\n"
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)


def _too_many(seconds: float) -> httpx.Response:
    return httpx.Response(
        429,
        headers={"retry-after": f"{seconds:g}"},
        json={"error": {"message": "slow down", "type": "rate_limit_error"}},
    )


def servers(arrivals: dict[str, list[float]]) -> httpx.MockTransport:
    """``a`` answers its third request with a 429 asking for ``A_PAUSE`` s, ``b`` its first
    with one asking for 1 s; everything else streams a short reply. Arrival times are noted
    per host."""

    def handler(request: httpx.Request) -> httpx.Response:
        host = request.url.host.removesuffix(".test")
        seen = arrivals.setdefault(host, [])
        seen.append(trio.current_time())
        if host == "a" and len(seen) == 3:
            return _too_many(A_PAUSE)
        if host == "b" and len(seen) == 1:
            return _too_many(1.0)
        return _reply()

    return httpx.MockTransport(handler)


def _provider(name: str, limits: RateLimitConfig) -> ProviderConfig:
    return ProviderConfig(
        protocol="openai", base_url=f"http://{name}.test/v1", api_key=Secret("k"), rate_limit=limits
    )


@virtual_deadline(60)
async def test_a_crashed_rate_limiter_keeps_windows_and_cooldowns(autojump_clock, caplog):
    window = RateLimitConfig(windows=(WindowLimit(dimension="requests", limit=LIMIT, per=PER),))
    one_pending = RateLimitConfig(max_pending=1)
    config = RuntimeConfig(
        providers={"a": _provider("a", window), "b": _provider("b", one_pending)},
        retry=RetryConfig(jitter=0.0),
    )
    arrivals: dict[str, list[float]] = {}
    rng = CrashingRandom()
    async with sluice.open_runtime(config, transport=servers(arrivals), rng=rng) as rt:
        start = trio.current_time()
        requests = [sluice.ChatRequest(model="a:m", messages=f"a{i}") for i in range(6)]
        requests += [sluice.ChatRequest(model="b:m", messages=f"b{i}") for i in range(2)]
        async with rt.map(requests, max_in_flight=len(requests)) as outcomes:
            results = [o async for o in outcomes]
    assert all(o.result is not None for o in results), [o.error for o in results]
    assert rng.crashed_at is not None, "the rate limiter never crashed"
    assert "the rate limiter actor crashed; restarting it" in caplog.text
    crash = rng.crashed_at - start
    at_a = [t - start for t in arrivals["a"]]
    # The crash came while a's window was full (three arrivals at 0) and a's pause ran.
    assert at_a[:3] == [0.0, 0.0, 0.0]
    assert 0 < crash < PER < A_PAUSE
    # No window of PER seconds ever held more than LIMIT arrivals, across the restart.
    assert max(sum(t <= u < t + PER for u in at_a) for t in at_a) <= LIMIT, at_a
    # The pause a's 429 asked for at 0 s held after the crash: nothing arrived inside it.
    assert [t for t in at_a if 0 < t < A_PAUSE] == [], at_a
    assert len(at_a) == 7  # six calls and the retry of the one that met the 429
