"""Generation parameters: merged provider -> model -> call, mapped per protocol."""

import logging

import orjson
import pytest

from sluice._messages import ChatRequest
from sluice._protocols import codec_for
from sluice.providers._params import apply_params, map_params, merge_params


def test_later_layers_win_and_nested_mappings_merge():
    provider = {
        "temperature": 0.2,
        "max_tokens": 4096,
        "thinking": {"type": "enabled", "budget": 1},
    }
    model = {"temperature": 0.7, "thinking": {"budget": 2048}, "stop": ["a"]}
    call = {"stop": ["b", "c"], "thinking": {"type": "disabled"}}
    assert merge_params(provider, model, call) == {
        "temperature": 0.7,
        "max_tokens": 4096,
        "thinking": {"type": "disabled", "budget": 2048},
        "stop": ["b", "c"],  # lists replace, never concatenate
    }


def test_a_none_replaces_and_merging_never_mutates_its_inputs():
    provider = {"max_tokens": 4096, "options": {"num_ctx": 8192}}
    model = {"max_tokens": None}
    merged = merge_params(provider, model, None, {})
    assert merged == {"max_tokens": None, "options": {"num_ctx": 8192}}
    merged["options"]["num_ctx"] = 1
    assert provider == {"max_tokens": 4096, "options": {"num_ctx": 8192}}
    assert merge_params() == {}


@pytest.mark.parametrize(
    ("protocol", "expected"),
    [
        ("openai", {"top_k": 40, "frequency_penalty": 0.5, "reasoning_effort": "low"}),
        ("anthropic", {"top_k": 40, "reasoning_effort": "low"}),
        (
            "gemini",
            {
                "generationConfig": {"topK": 40, "frequencyPenalty": 0.5},
                "reasoning_effort": "low",
            },
        ),
        ("ollama", {"options": {"top_k": 40, "frequency_penalty": 0.5}, "reasoning_effort": "low"}),
    ],
)
def test_parameters_map_to_each_protocols_names(protocol, expected):
    params = {"top_k": 40, "frequency_penalty": 0.5, "reasoning_effort": "low"}
    assert map_params(params, protocol) == expected


def test_rejected_parameters_are_dropped_with_a_debug_log(caplog):
    caplog.set_level(logging.DEBUG, logger="sluice.providers._params")
    assert map_params({"top_k": 3, "seed": 1}, "anthropic", drop=frozenset({"top_k"})) == {}
    text = caplog.text
    assert "top_k dropped: the provider rejects it" in text
    assert "seed dropped: the anthropic protocol has none" in text


def test_apply_params_fills_unset_request_fields_beneath_the_call():
    request = ChatRequest(model="p:m", messages="hi", temperature=0.0)
    out = apply_params(
        request,
        "openai",
        provider={"temperature": 0.9, "max_tokens": 100, "stop": ["x"], "user": "svc"},
        model={"max_tokens": 200},
    )
    assert out.temperature == 0.0  # the call set it (to zero)
    assert out.max_tokens == 200
    assert out.stop == ("x",)
    assert out.extra_body == {"user": "svc"}


def test_apply_params_keeps_the_calls_extra_body_on_top():
    request = ChatRequest(
        model="p:m", messages="hi", extra_body={"generationConfig": {"topK": 5}, "x": None}
    )
    out = apply_params(request, "gemini", provider={"top_k": 40, "top_p": 0.5, "x": 1})
    assert out.top_p == 0.5
    assert out.extra_body == {"generationConfig": {"topK": 5}, "x": None}
    body = orjson.loads(
        codec_for("gemini").build_request(out, base_url="http://g", api_key=None).body
    )
    assert body["generationConfig"] == {"topP": 0.5, "topK": 5}
    assert "x" not in body


def test_apply_params_drops_rejected_fields_from_every_layer():
    request = ChatRequest(model="p:m", messages="hi", seed=3, extra_body={"top_k": 1, "keep": 2})
    out = apply_params(request, "openai", provider={"seed": 9}, drop=frozenset({"seed", "top_k"}))
    assert out.seed is None
    assert out.extra_body == {"keep": 2}


def test_apply_params_returns_the_request_itself_when_nothing_changes():
    request = ChatRequest(model="p:m", messages="hi")
    assert apply_params(request, "openai") is request
    assert apply_params(request, "openai", provider={}, model=None) is request


def test_max_tokens_from_params_reaches_each_wire_name():
    request = ChatRequest(model="p:m", messages="hi")
    for protocol, path in [
        ("openai", ("max_tokens",)),
        ("anthropic", ("max_tokens",)),
        ("gemini", ("generationConfig", "maxOutputTokens")),
        ("ollama", ("options", "num_predict")),
    ]:
        out = apply_params(request, protocol, provider={"max_tokens": 77})
        body = orjson.loads(
            codec_for(protocol).build_request(out, base_url="http://h/v1", api_key=None).body
        )
        for part in path:
            body = body[part]
        assert body == 77, protocol
