"""Pure admission arithmetic: durations, learned limits, cost estimates, adaptive limits."""

import pytest

from sluice._limits.adaptive import AdaptiveLimit
from sluice._limits.cost import Cost, estimate_cost, estimate_prompt_tokens
from sluice._limits.headers import Learned, learned_limits, parse_duration
from sluice._messages import ChatRequest, Message, Tool, Usage


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("6ms", 0.006),
        ("20s", 20.0),
        ("1m30s", 90.0),
        ("1h2m3.5s", 3723.5),
        ("0s", 0.0),
        ("2.5", 2.5),
        ("", None),
        ("soon", None),
        ("-3", None),
        ("5s4", None),
        ("m", None),
        (None, None),
    ],
)
def test_parse_duration(text, seconds):
    assert parse_duration(text) == seconds


def test_learned_limits_openai_and_anthropic():
    headers = {
        "x-ratelimit-limit-requests": "500",
        "x-ratelimit-remaining-requests": "499",
        "x-ratelimit-reset-requests": "120ms",
        "x-ratelimit-limit-tokens": "30000",
        "x-ratelimit-remaining-tokens": "29000",
        "x-ratelimit-reset-tokens": "2s",
        "anthropic-ratelimit-input-tokens-limit": "40000",
        "anthropic-ratelimit-input-tokens-remaining": "39000",
        "anthropic-ratelimit-input-tokens-reset": "2026-01-01T00:01:00Z",
    }
    assert learned_limits(headers, wall_now=1767225600.0) == [
        Learned("requests", 500, 499, 0.12),
        Learned("total_tokens", 30000, 29000, 2.0),
        Learned("input_tokens", 40000, 39000, 60.0),
    ]
    assert learned_limits({"content-type": "text/plain"}, 0.0) == []


def test_cost_estimate_counts_text_tools_and_the_output_reservation():
    request = ChatRequest(
        model="sim:x",
        messages=[Message.system("a" * 40), Message.user("b" * 400)],
        tools=[Tool(name="lookup", description="find things")],
        max_tokens=300,
    )
    prompt = estimate_prompt_tokens(request)
    assert 110 <= prompt <= 160
    assert estimate_cost(request, expected_output=1024) == Cost(1, prompt, 300)
    no_limit = ChatRequest(model="sim:x", messages="hi")
    assert estimate_cost(no_limit, expected_output=1024).output_tokens == 1024
    assert Cost.from_usage(Usage(input_tokens=5, output_tokens=7)).total_tokens == 12


def test_adaptive_limit_aimd():
    limit = AdaptiveLimit(cap=10)
    assert limit.current == 10
    limit.on_congestion(admitted_at=1.0, now=2.0)
    assert limit.current == 5
    limit.on_congestion(admitted_at=1.5, now=2.5)  # admitted before the decrease: ignored
    assert limit.current == 5
    limit.on_congestion(admitted_at=3.0, now=4.0)
    assert limit.current == 2
    for _ in range(200):
        limit.on_success()
    assert limit.current == 10  # never above the cap
    limit.on_cooldown()
    assert limit.current == 1
