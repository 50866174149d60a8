"""Times a provider writes (a date-form ``Retry-After``, Anthropic's RFC 3339 resets) are read
against the reply's ``Date`` header, not our clock alone (issue 30: a client clock an hour slow
turned a 5 s wait into 3604 s). The pure functions directly, then a call through the runtime
under virtual time over httpx.MockTransport with the client's wall clock an hour slow."""

from __future__ import annotations

import time
from email.utils import formatdate

import httpx
import orjson
import pytest
import trio

import sluice
from sluice import ProviderConfig, RateLimitConfig, RuntimeConfig, Secret
from sluice._limits.headers import (
    UNDATED_WAIT_CAP,
    http_date,
    learned_limits,
    reset_wait,
    wait_until,
)
from sluice._protocols.http_errors import parse_retry_after, provider_wait

from .helpers import virtual_deadline

SERVED = 1_800_000_000.0
"""The provider's clock when it answers (a whole second, as ``Date`` has no fractions)."""
HOUR = 3600.0


def http(ts: float) -> str:
    return formatdate(ts, usegmt=True)


def rfc3339(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


# -- pure ------------------------------------------------------------------------------------


def test_http_dates_in_every_form_and_nothing_else():
    assert http_date("Fri, 15 Jan 2027 08:00:00 GMT") == SERVED
    assert http_date(http(SERVED)) == SERVED
    assert http_date("Fri, 15 Jan 2027 08:00:00 -0000") == SERVED  # no zone: GMT
    assert http_date("Friday, 15-Jan-27 08:00:00 GMT") == SERVED  # RFC 850
    for junk in (None, "", "soon", "5", "Fri, 99 Foo 2027"):
        assert http_date(junk) is None


@pytest.mark.parametrize("skew", [-HOUR, -5.0, 0.0, 7.0, HOUR])
def test_a_date_counts_from_the_reply_date_whatever_our_clock_says(skew):
    wall_now = SERVED + skew
    headers = {"date": http(SERVED), "retry-after": http(SERVED + 5)}
    assert wait_until(SERVED + 5, headers, wall_now) == 5.0
    assert parse_retry_after(headers, wall_now) == 5.0
    assert provider_wait(headers, b"", wall_now) == 5.0
    assert parse_retry_after({**headers, "retry-after": http(SERVED - 3)}, wall_now) == 0.0


def test_without_a_date_header_our_clock_counts_but_only_up_to_a_cap():
    assert wait_until(SERVED + 5, {}, SERVED) == 5.0
    assert wait_until(SERVED + 5, {}, SERVED - HOUR) == UNDATED_WAIT_CAP
    assert wait_until(SERVED + 5, {}, SERVED + HOUR) == 0.0
    # A Date that is not a date is no Date.
    assert wait_until(SERVED + 5, {"date": "yesterday"}, SERVED - HOUR) == UNDATED_WAIT_CAP
    assert parse_retry_after({"retry-after": http(SERVED + 30)}, SERVED) == 30.0
    # Seconds are seconds: no clock involved, no cap.
    assert parse_retry_after({"retry-after": "600", "date": http(SERVED)}, 0.0) == 600.0


@pytest.mark.parametrize("skew", [-HOUR, 0.0, HOUR])
def test_anthropic_resets_count_from_the_reply_date(skew):
    headers = {
        "date": http(SERVED),
        "anthropic-ratelimit-requests-limit": "50",
        "anthropic-ratelimit-requests-remaining": "0",
        "anthropic-ratelimit-requests-reset": rfc3339(SERVED + 5),
        "anthropic-ratelimit-tokens-limit": "40000",
        "anthropic-ratelimit-tokens-remaining": "39000",
        "anthropic-ratelimit-tokens-reset": rfc3339(SERVED + 2),
    }
    wall_now = SERVED + skew
    learned = {x.dimension: x.reset for x in learned_limits(headers, wall_now)}
    assert learned == {"requests": 5.0, "total_tokens": 2.0}
    assert reset_wait(headers, wall_now) == 5.0
    assert provider_wait(headers, b"", wall_now) == 5.0
    undated = {k: v for k, v in headers.items() if k != "date"}
    assert reset_wait(undated, SERVED - HOUR) == UNDATED_WAIT_CAP


# -- through the runtime, virtual time ---------------------------------------------------------

COMPLETION = {
    "id": "c",
    "object": "chat.completion",
    "created": 0,
    "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}}],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}
MESSAGE = {
    "id": "msg",
    "type": "message",
    "role": "assistant",
    "model": "m",
    "content": [{"type": "text", "text": "ok"}],
    "stop_reason": "end_turn",
    "usage": {"input_tokens": 1, "output_tokens": 1},
}


def provider_that_refuses_once(protocol: str, start: float) -> httpx.MockTransport:
    """A provider whose clock reads ``SERVED`` plus the trio time since ``start``: its first
    reply is a 429 saying to come back 5 s after its ``Date`` (a date-form ``Retry-After``
    for OpenAI, an exhausted requests limit's RFC 3339 reset for Anthropic); later ones
    answer."""
    calls = 0

    async def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        now = SERVED + (trio.current_time() - start)
        headers = {"date": http(now)}
        if calls > 1:
            body = COMPLETION if protocol == "openai" else MESSAGE
            return httpx.Response(200, headers=headers, json=body)
        error: dict[str, object]
        if protocol == "openai":
            headers["retry-after"] = http(now + 5)
            error = {"error": {"message": "slow down", "type": "requests", "code": None}}
        else:
            headers["anthropic-ratelimit-requests-remaining"] = "0"
            headers["anthropic-ratelimit-requests-reset"] = rfc3339(now + 5)
            error = {"type": "error", "error": {"type": "rate_limit_error", "message": "slow"}}
        return httpx.Response(429, headers=headers, content=orjson.dumps(error))

    return httpx.MockTransport(handler)


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
@virtual_deadline(60)
async def test_a_client_an_hour_slow_waits_the_five_seconds_the_provider_asked(
    autojump_clock, monkeypatch, protocol
):
    start = trio.current_time()
    monkeypatch.setattr(time, "time", lambda: SERVED - HOUR + (trio.current_time() - start))
    quota = RateLimitConfig(cooldown_jitter=0.0)
    provider = ProviderConfig(
        protocol=protocol, base_url="http://up.test/v1", api_key=Secret("k"), rate_limit=quota
    )
    config = RuntimeConfig(providers={"up": provider})
    transport = provider_that_refuses_once(protocol, start)
    async with sluice.open_runtime(config, transport=transport) as rt:
        result = await rt.chat(sluice.ChatRequest(model="up:m", messages="hi", stream=False))
        took = trio.current_time() - start
    assert result.text == "ok"
    assert took == 5.0
