"""Wrong types are refused where they are written, with the field's name; OpenAI-shaped input
is accepted and converted once."""

from __future__ import annotations

import pytest

from sluice import ChatRequest, Message, Tool
from sluice._config import ProviderConfig, config_from_env, load_config
from sluice._errors import ConfigError
from sluice._messages import ImagePart, TextPart, ToolCall, ToolResultPart
from sluice.providers import _plugins as plugins
from sluice.providers._definition import ProviderDefinition

# --- ChatRequest ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "error", "message"),
    [
        ({"temperature": "hot"}, TypeError, "ChatRequest.temperature: expected a number, got str"),
        ({"top_p": True}, TypeError, "ChatRequest.top_p: expected a number, got bool"),
        ({"max_tokens": 10.5}, TypeError, "ChatRequest.max_tokens: expected an integer"),
        ({"seed": "1"}, TypeError, "ChatRequest.seed: expected an integer, got str '1'"),
        ({"stream": "yes"}, TypeError, "ChatRequest.stream: expected a bool"),
        ({"parallel_tool_calls": 1}, TypeError, "ChatRequest.parallel_tool_calls"),
        ({"tag": 7}, TypeError, "ChatRequest.tag: expected a string"),
        ({"priority": "urgent"}, ValueError, "ChatRequest.priority: expected one of"),
        ({"on_partial": "retry"}, ValueError, "ChatRequest.on_partial: expected one of"),
        ({"stop": ["\n", 3]}, TypeError, r"ChatRequest.stop\[1\]: expected a string"),
        ({"fallbacks": [None]}, TypeError, r"ChatRequest.fallbacks\[0\]: expected a string"),
        ({"extra_body": [1]}, TypeError, "ChatRequest.extra_body: expected a mapping"),
        ({"messages": 5}, TypeError, "ChatRequest.messages: expected a string or a list"),
        ({"messages": [3]}, TypeError, r"ChatRequest.messages\[0\]: expected a Message or"),
        (
            {"messages": [{"role": "robot", "content": "x"}]},
            ConfigError,
            r"ChatRequest.messages\[0\].role: expected 'system'",
        ),
        ({"tools": "f"}, TypeError, "ChatRequest.tools: expected a list of tools"),
        ({"tools": [print]}, TypeError, r"ChatRequest.tools\[0\]: expected a Tool or"),
        (
            {"tools": [{"type": "function", "function": {"name": 3}}]},
            ConfigError,
            r"ChatRequest.tools\[0\].function.name: expected a string",
        ),
    ],
)
def test_chat_request_refuses_wrong_types_naming_the_field(fields, error, message):
    fields.setdefault("messages", "hi")
    with pytest.raises(error, match=message):
        ChatRequest(model="sim:sim-small", **fields)


def test_chat_request_keeps_right_types():
    request = ChatRequest(
        model="sim:sim-small",
        messages="hi",
        temperature=0,
        top_p=0.5,
        max_tokens=5,
        seed=1,
        stop="\n",
        parallel_tool_calls=False,
    )
    assert (request.temperature, request.stop) == (0, ("\n",))


def test_chat_request_takes_openai_messages_and_tools():
    request = ChatRequest(
        model="sim:sim-small",
        messages=[
            {"role": "system", "content": "be brief"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "what is this?"},
                    {"type": "image_url", "image_url": {"url": "https://x.example/a.png"}},
                ],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "look", "arguments": '{"at": "a"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "a cat"},
            Message.user("and now?"),
        ],
        tools=[
            {
                "type": "function",
                "function": {
                    "name": "look",
                    "description": "Look at a thing.",
                    "parameters": {"type": "object", "properties": {"at": {"type": "string"}}},
                },
            },
            Tool(name="other"),
        ],
    )
    system, user, assistant, tool, last = request.messages
    assert system == Message.system("be brief")
    assert user.content == (
        TextPart("what is this?"),
        ImagePart(url="https://x.example/a.png"),
    )
    assert assistant.content == (ToolCall(id="call_1", name="look", arguments='{"at": "a"}'),)
    assert tool.content == (ToolResultPart(tool_call_id="call_1", content="a cat"),)
    assert last == Message.user("and now?")
    assert [t.name for t in request.tools] == ["look", "other"]
    assert request.tools[0].parameters["properties"] == {"at": {"type": "string"}}


# --- config -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            {"providers": {"x": {"base_url": "http://h/v1", "drop_params": "temperature"}}},
            r"expected a list of strings, got the string 'temperature' .*"
            r"@ \$\.providers\['x'\]\.drop_params",
        ),
        (
            {"retry": {"fallback_on": "Overloaded"}},
            r"expected a list of strings, got the string 'Overloaded' .*@ \$\.retry\.fallback_on",
        ),
        (
            {"providers": {"x": {"base_url": "http://h", "rate_limit": {"windows": "60"}}}},
            r"expected a list of WindowLimit, got the string '60'",
        ),
        ({"providers": {"x": {"base_url": 42}}}, r"base_url: '42' is not an http"),
        ({"providers": {"x": {"base_url": "ftp://h/v1"}}}, r"base_url: 'ftp://h/v1' is not"),
        ({"providers": {"x": {"base_url": "http:///v1"}}}, r"with a host"),
        (
            {"providers": {"x": {"base_url": "http://h", "api_key_env": "_"}}},
            r"api_key_env: '_' is not an environment variable name",
        ),
        (
            {"providers": {"x": {"base_url": "http://h", "api_key_env": "MY-KEY"}}},
            r"api_key_env: 'MY-KEY' is not an environment variable name",
        ),
    ],
)
def test_config_refuses_wrong_types_with_the_path(config, message):
    with pytest.raises(ConfigError, match=message):
        load_config(config)


def test_env_overrides_split_a_list_at_commas():
    config = config_from_env(
        {
            "SLUICE_PROVIDERS__X__BASE_URL": "http://127.0.0.1:9/v1",
            "SLUICE_PROVIDERS__X__DROP_PARAMS": "seed, top_p",
            "SLUICE_RETRY__FALLBACK_ON": "Overloaded",
            "SLUICE_PROVIDERS__X__DISPLAY_NAME": "a, b",
        }
    )
    assert config.providers["x"].drop_params == {"seed", "top_p"}
    assert config.providers["x"].display_name == "a, b"  # a string field stays whole
    assert config.retry.fallback_on == ("Overloaded",)
    with pytest.raises(ConfigError, match=r"got the string 'seed'.*environment overrides"):
        config_from_env(
            {
                "SLUICE_PROVIDERS__X__BASE_URL": "http://h",
                "SLUICE_PROVIDERS__X__DROP_PARAMS": '"seed"',
            }
        )


def test_base_url_from_code_is_checked_too():
    with pytest.raises(ValueError, match="base_url: 'localhost:8000' is not an http"):
        ProviderConfig(base_url="localhost:8000")


def test_a_plugins_key_env_string_is_refused_not_split_into_letters():
    # The bug: "ACME_KEY" became ("A", "C", "M", "E", "_", ...) and "_" read the shell's $_.
    with pytest.raises(ValueError, match=r"got the string 'ACME_KEY'.* @ \$\.key_env"):
        plugins._structure(
            {
                "id": "acme",
                "display_name": "Acme",
                "base_url": "https://a.example/v1",
                "key_env": "ACME_KEY",
            }
        )
    with pytest.raises(ValueError, match="key_env: expected a list of environment variable"):
        ProviderDefinition(
            id="acme",
            display_name="Acme",
            base_url="https://a.example/v1",
            key_env="ACME_KEY",  # type: ignore[arg-type]
        )
    with pytest.raises(ValueError, match="'_' is not an environment variable name"):
        ProviderDefinition(
            id="acme", display_name="Acme", base_url="https://a.example/v1", key_env=("_",)
        )
    good = plugins._structure(
        {
            "id": "acme",
            "display_name": "Acme",
            "base_url": "https://a.example/v1",
            "key_env": ["ACME_KEY"],
        }
    )
    assert good.key_env == ("ACME_KEY",)


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("http://127.0.0.1:8000/v1", None),
        ("https://[::1]:8443", None),
        ("http://h:0/v1", "its port is not in 1-65535"),
        ("http://h:70000/v1", "its port is not in 1-65535"),
        ("localhost:8000", "is not an http:// or https:// URL with a host"),
        ("file:///etc/passwd", "is not an http:// or https:// URL with a host"),
    ],
)
def test_base_urls_are_http_with_a_host_and_a_real_port(url, problem):
    from sluice._checks import http_url_problem

    found = http_url_problem(url)
    if problem is None:
        assert found is None
    else:
        assert found is not None and problem in found


@pytest.mark.parametrize(
    "fields",
    [{"parallel_tool_calls": 1}, {"response_cache": 0}, {"priority": 1}, {"stream": 1}],
)
def test_a_value_equal_to_a_right_one_is_still_the_wrong_type(fields):
    with pytest.raises((TypeError, ValueError), match=r"ChatRequest\."):
        ChatRequest(model="sim:sim-small", messages="hi", **fields)


def test_number_subclasses_pass_the_full_check():
    class Half(float):
        pass

    assert ChatRequest(model="sim:sim-small", messages="hi", temperature=Half(0.5)).temperature
