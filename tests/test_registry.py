"""The provider registry: the builtin table, resolving a name against config, environment and
key store, custom providers, auth styles and quirks."""

import re
import subprocess
import sys

import attrs
import httpx
import orjson
import pytest

import sluice
from sluice import _capabilities as caps
from sluice._capabilities import CapabilityOverride
from sluice._config import ModelConfig, ProviderConfig, QuirksConfig, RuntimeConfig, Secret
from sluice._errors import ConfigError
from sluice._messages import ChatRequest, Message, ReasoningPart, TextPart, Tool
from sluice._protocols import codec_for
from sluice._protocols.openai import OpenAICodec
from sluice._protocols.quirks import NO_QUIRKS, RequestQuirks
from sluice.providers._builtins import BUILTIN_BY_ID, BUILTINS
from sluice.providers._codec import provider_codec
from sluice.providers._definition import ProviderDefinition, models
from sluice.providers._keys import KeyStore
from sluice.providers._plugins import PluginProviders
from sluice.providers._registry import BUILTIN_PROVIDERS, resolve_provider

SPEC_27 = [
    "qwenpaw-local",
    "ollama",
    "lmstudio",
    "openrouter",
    "modelscope",
    "dashscope",
    "aliyun-codingplan",
    "aliyun-codingplan-intl",
    "aliyun-tokenplan",
    "opencode",
    "openai",
    "azure-openai",
    "anthropic",
    "gemini",
    "deepseek",
    "kimi-cn",
    "kimi-intl",
    "minimax-cn",
    "minimax",
    "zhipu-cn",
    "zhipu-cn-codingplan",
    "zhipu-intl",
    "zhipu-intl-codingplan",
    "siliconflow-cn",
    "siliconflow-intl",
    "volcengine-cn",
    "volcengine-cn-codingplan",
]
EXTRA = ["groq", "together", "fireworks", "mistral", "xai", "vllm", "llamacpp", "sim"]
NO_PLUGINS = PluginProviders()
KEY = "sk-test-registry-0123456789abcdef"


@pytest.fixture(autouse=True)
def isolated_dirs(tmp_path, monkeypatch):
    """The platform directories (key store, config file) point into the test's own folder."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))


@pytest.fixture
def no_store(tmp_path):
    """A key store that does not exist (the user's real one is never consulted)."""
    return KeyStore(tmp_path / "keys.enc", tmp_path / "master.key", {})


def resolve(name, config=None, env=None, store=None, **kw):
    return resolve_provider(
        name,
        config or RuntimeConfig(),
        env if env is not None else {},
        plugins=NO_PLUGINS,
        key_store=store,
        **kw,
    )


def config_with(name, **fields):
    return RuntimeConfig(providers={name: ProviderConfig(**fields)})


# The table.


def test_builtins_hold_the_27_of_the_spec_in_order_and_the_extras():
    ids = [d.id for d in BUILTINS]
    assert ids[:27] == SPEC_27
    assert ids[27:] == EXTRA
    assert len(set(ids)) == len(ids) == 35


def test_the_builtins_table_builds_a_definition_when_first_looked_up():
    """``BUILTIN_BY_ID`` lists every id and alias (each id, then its aliases, in BUILTINS'
    order) without building a definition; a lookup builds that one alone, and the same
    object is handed out for it and its aliases ever after."""
    code = (
        "from sluice.providers import _builtins as b\n"
        "table = b.BUILTIN_BY_ID\n"
        "names = list(table)\n"
        "print(len(table._made), 'openai' in table, 'nope' in table)\n"
        "first = table['openai']\n"
        "print(len(table._made), table['openai'] is first, table.get('nope'))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True)
    assert done.stdout.split() == [b"0", b"True", b"False", b"1", b"True", b"None"]
    expected = [name for d in BUILTINS for name in (d.id, *d.aliases)]
    assert list(BUILTIN_BY_ID) == expected and len(BUILTIN_BY_ID) == len(expected)
    for d in BUILTINS:
        for name in (d.id, *d.aliases):
            assert name in BUILTIN_BY_ID and BUILTIN_BY_ID[name] is d
    with pytest.raises(KeyError):
        BUILTIN_BY_ID["nope"]


def test_every_builtin_is_well_formed():
    for d in BUILTINS:
        assert re.fullmatch(r"[a-z0-9][a-z0-9.-]*", d.id), d.id
        assert d.display_name
        assert d.protocol in ("openai", "anthropic", "gemini", "ollama")
        if d.base_url is not None:
            assert d.base_url.startswith(("https://", "http://")), d.id
            assert not d.base_url.endswith("/"), d.id
            assert d.local == d.base_url.startswith("http://"), d.id
        for url in d.regions.values():
            assert url.startswith("https://")
        if d.needs_key:
            assert d.key_env, d.id
        assert len({m.id for m in d.models}) == len(d.models), d.id


def test_protocols_base_urls_and_auth_styles_of_the_main_builtins():
    by_id = BUILTIN_BY_ID
    assert by_id["ollama"].protocol == "ollama"
    assert by_id["ollama"].base_url == "http://127.0.0.1:11434"  # native API, no /v1
    assert by_id["anthropic"].auth_style == "x-api-key"
    assert by_id["gemini"].auth_style == "x-goog-api-key"
    assert (by_id["gemini"].base_url or "").endswith("/v1beta")
    assert by_id["azure-openai"].auth_style == "api-key"
    assert by_id["minimax"].protocol == "anthropic"
    assert by_id["vllm"].quirks.omit_tool_choice == {"auto"}
    assert by_id["openai"].quirks.echo_reasoning_content is False
    assert by_id["deepseek"].quirks.echo_reasoning_content is True
    assert by_id["sim"].base_url is None
    assert set(by_id["dashscope"].regions) == {"intl", "us"}
    assert BUILTIN_PROVIDERS["copaw-local"] is by_id["qwenpaw-local"]


def test_capabilities_agree_with_the_tool_layer_presets():
    refuses_forcing = {"kimi-cn", "kimi-intl"}  # known to refuse a forced tool_choice
    for d in BUILTINS:
        if d.protocol == "openai" and d.id not in refuses_forcing:
            assert d.tool_capabilities == caps.capabilities_for(d.id), d.id
    for name in refuses_forcing:
        assert BUILTIN_BY_ID[name].tool_capabilities.tool_choice == {"auto", "none"}
    assert BUILTIN_BY_ID["minimax"].tool_capabilities == caps.ANTHROPIC
    assert BUILTIN_BY_ID["ollama"].tool_capabilities == caps.OLLAMA
    assert BUILTIN_BY_ID["gemini"].tool_capabilities == caps.GEMINI


def test_model_capability_rules_match_the_longest_suffix_and_only_at_the_own_server(no_store):
    """The simulator's ``...notools`` models are a rule on its registry entry, not a branch in
    the runtime; a rule holds only where the definition's capabilities do."""
    sim = resolve("sim", store=no_store)
    assert sim.tool_capabilities("sim-notools") == caps.WITHOUT_TOOLS
    assert sim.tool_capabilities("any-notools") == caps.WITHOUT_TOOLS
    assert sim.tool_capabilities("sim-small") == caps.FULL
    assert sim.tool_capabilities("notools-not-at-the-end") == caps.FULL
    elsewhere = resolve("sim", config_with("sim", base_url="http://127.0.0.1:9/v1"), store=no_store)
    assert elsewhere.tool_capabilities("sim-notools") == caps.WITHOUT_TOOLS  # its software's
    assert elsewhere.tool_capabilities("sim-small") == caps.FULL
    plain = caps.ToolCapabilities(parallel_calls=False)
    definition = ProviderDefinition(
        id="ruled",
        display_name="Ruled",
        base_url="https://ruled.example/v1",
        needs_key=False,
        capabilities=caps.OPENAI,
        model_capabilities={"-lite": plain, "-extra-lite": caps.WITHOUT_TOOLS},
    )
    assert definition.capabilities_for("m-lite") == plain
    assert definition.capabilities_for("m-extra-lite") == caps.WITHOUT_TOOLS  # longest wins
    assert definition.capabilities_for("m") == caps.OPENAI
    plugins = PluginProviders({"ruled": definition})
    own = resolve_provider("ruled", RuntimeConfig(), {}, plugins=plugins, key_store=no_store)
    assert own.tool_capabilities("m-lite") == plain
    elsewhere = resolve_provider(
        "ruled",
        config_with("ruled", base_url="http://127.0.0.1:9/v1"),
        {},
        plugins=plugins,
        key_store=no_store,
    )
    assert elsewhere.tool_capabilities("m-lite") == caps.OPENAI_COMPATIBLE_CUSTOM


def test_the_providers_tools_entry_overrides_its_capabilities_and_its_model_rules(no_store):
    """``providers.NAME.tools`` applies to every model of the provider, rules included, and a
    model's own entry still goes over it (the runtime applies that one per call)."""
    no_required = CapabilityOverride(tool_choice={"auto", "none", "specific"})
    local = resolve(
        "local", config_with("local", base_url="http://127.0.0.1:9/v1", tools=no_required)
    )
    assert local.capabilities.tool_choice == {"auto", "none", "specific"}
    assert local.capabilities.top_level_unions is False  # the rest stays the protocol's
    sim = resolve("sim", config_with("sim", tools=CapabilityOverride(parallel_calls=False)))
    assert sim.tool_capabilities("sim-small") == attrs.evolve(caps.FULL, parallel_calls=False)
    assert sim.tool_capabilities("sim-notools").native_tools is False
    assert sim.tool_capabilities("sim-notools").parallel_calls is False


def test_models_helper_marks_features_and_refuses_unknown_ids():
    found = models("a", "b", vision={"b"}, reasoning=True)
    assert [(m.id, m.vision, m.reasoning) for m in found] == [
        ("a", False, True),
        ("b", True, True),
    ]
    with pytest.raises(ValueError, match="not listed"):
        models("a", vision={"z"})


def test_a_definition_checks_its_id_protocol_and_auth():
    with pytest.raises(ValueError, match="provider id"):
        ProviderDefinition(id="Bad Name", display_name="x", base_url=None)
    with pytest.raises(ValueError, match="protocol"):
        ProviderDefinition(id="x", display_name="x", base_url=None, protocol="grpc")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="auth"):
        ProviderDefinition(id="x", display_name="x", base_url=None, auth="basic")  # type: ignore[arg-type]


# Resolving.


def test_the_key_comes_from_the_config_then_the_environment(no_store):
    spec = resolve("openai", env={"OPENAI_API_KEY": KEY}, store=no_store)
    assert spec.api_key.reveal() == KEY and spec.key_source == "env"
    spec = resolve(
        "openai", config_with("openai", api_key=Secret("sk-config")), {"OPENAI_API_KEY": KEY}
    )
    assert spec.api_key.reveal() == "sk-config" and spec.key_source == "config"
    spec = resolve(
        "openai", config_with("openai", api_key_env="MY_KEY"), {"MY_KEY": "sk-mine"}, no_store
    )
    assert spec.api_key.reveal() == "sk-mine"


def test_gemini_takes_either_of_its_key_variables(no_store):
    spec = resolve("gemini", env={"GOOGLE_API_KEY": KEY}, store=no_store)
    assert spec.api_key.reveal() == KEY


def test_a_missing_key_names_every_way_to_give_one(no_store):
    with pytest.raises(ConfigError) as info:
        resolve("deepseek", store=no_store)
    text = str(info.value)
    assert "DEEPSEEK_API_KEY" in text
    assert "sluice keys set deepseek" in text
    assert "providers.deepseek.api_key" in text


def test_local_providers_need_no_key(no_store):
    for name in ("ollama", "lmstudio", "vllm", "llamacpp", "sim"):
        spec = resolve(name, store=no_store)
        assert spec.api_key is None and spec.key_source == "none"


def test_an_unknown_provider_without_base_url_is_an_error_listing_the_builtins(no_store):
    with pytest.raises(ConfigError, match=r"unknown provider 'nope'.*openai.*base_url"):
        resolve("nope", store=no_store)


def test_providers_that_need_a_base_url_say_so(no_store):
    with pytest.raises(ConfigError, match=r"providers\.azure-openai\.base_url"):
        resolve("azure-openai", env={"AZURE_OPENAI_API_KEY": KEY}, store=no_store)
    with pytest.raises(ConfigError, match="has no base URL"):
        resolve("qwenpaw-local", store=no_store)
    spec = resolve("copaw-local", config_with("qwenpaw-local", base_url="http://127.0.0.1:9/v1"))
    assert spec.base_url == "http://127.0.0.1:9/v1"


def test_a_region_picks_another_base_url(no_store):
    spec = resolve("dashscope", config_with("dashscope", region="intl"), {"DASHSCOPE_API_KEY": KEY})
    assert spec.base_url == "https://dashscope-intl.aliyuncs.com/compatible-mode/v1"
    assert not spec.custom_base_url
    with pytest.raises(ConfigError, match=r"unknown region 'mars'.*default, intl, us"):
        resolve("dashscope", config_with("dashscope", region="mars"), {"DASHSCOPE_API_KEY": KEY})


@pytest.mark.parametrize(
    ("host", "url"),
    [
        ("0.0.0.0", "http://127.0.0.1:11434"),
        ("example.org:5000", "http://example.org:5000"),
        ("https://ollama.example.org", "https://ollama.example.org"),
        ("http://10.0.0.2:11434/", "http://10.0.0.2:11434"),
    ],
)
def test_ollama_follows_ollama_host(host, url, no_store):
    assert resolve("ollama", env={"OLLAMA_HOST": host}, store=no_store).base_url == url


def test_ollama_drops_a_v1_suffix_from_a_configured_base_url(no_store):
    spec = resolve("ollama", config_with("ollama", base_url="http://box:11434/v1/"))
    assert spec.base_url == "http://box:11434"


def test_a_custom_provider_speaks_any_protocol_with_its_headers_and_auth(no_store):
    config = config_with(
        "corp",
        protocol="anthropic",
        base_url="https://llm.corp.example/anthropic/v1/",
        api_key=Secret(KEY),
        auth="bearer",
        headers={"X-Team": "infra"},
        models={"claude-corp": ModelConfig()},
    )
    spec = resolve("corp", config, store=no_store)
    assert spec.protocol == "anthropic"
    assert spec.base_url == "https://llm.corp.example/anthropic/v1"
    assert spec.api_key is None  # not in x-api-key, the protocol's own header
    assert spec.headers == {"x-team": "infra", "authorization": f"Bearer {KEY}"}
    assert spec.capabilities == caps.ANTHROPIC
    assert [m.id for m in spec.models] == ["claude-corp"]
    built = codec_for(spec.protocol).build_request(
        ChatRequest(model="corp:claude-corp", messages="hi"),
        base_url=spec.base_url,
        api_key=None,
        headers=spec.headers,
    )
    headers = dict(built.headers)
    assert headers["authorization"] == f"Bearer {KEY}"
    assert "x-api-key" not in headers
    assert built.url == "https://llm.corp.example/anthropic/v1/messages"


def test_azure_sends_its_key_in_api_key(no_store):
    config = config_with("azure-openai", base_url="https://r.openai.azure.com/openai/v1")
    spec = resolve("azure-openai", config, {"AZURE_OPENAI_API_KEY": KEY}, no_store)
    assert spec.api_key is None and spec.headers["api-key"] == KEY
    built = provider_codec(spec).build_request(
        ChatRequest(model="azure-openai:gpt-4o", messages="hi"),
        base_url=spec.base_url,
        api_key=None,
        headers=spec.headers,
    )
    assert dict(built.headers)["api-key"] == KEY and "authorization" not in dict(built.headers)


def test_auth_none_sends_no_key_even_when_one_is_set(no_store):
    config = config_with("openai", base_url="http://127.0.0.1:9/v1", auth="none")
    spec = resolve("openai", config, {"OPENAI_API_KEY": KEY}, no_store)
    assert spec.api_key is None and spec.headers == {}


def test_no_key_shows_in_the_repr_of_a_resolved_provider_or_config(no_store):
    config = config_with(
        "azure-openai",
        base_url="https://r.openai.azure.com/openai/v1",
        headers={"Authorization": "Bearer sk-other-secret-value", "X-Team": "visible"},
    )
    spec = resolve("azure-openai", config, {"AZURE_OPENAI_API_KEY": KEY}, no_store)
    for text in (repr(spec), str(spec), repr(config), repr(config.providers["azure-openai"])):
        assert KEY not in text
        assert "sk-other-secret-value" not in text
        assert "visible" in text


def test_a_custom_base_url_turns_a_builtin_into_a_generic_compatible_server(no_store):
    spec = resolve("openai", config_with("openai", base_url="http://127.0.0.1:9/v1"))
    assert spec.custom_base_url and spec.api_key is None  # no key needed there
    assert spec.capabilities == caps.OPENAI_COMPATIBLE_CUSTOM
    assert "required" in spec.capabilities.tool_choice  # issue 27: assumed, not refused
    assert spec.quirks.max_tokens_field == "max_tokens"
    sim = resolve("sim", config_with("sim", base_url="http://127.0.0.1:9/v1"))
    assert sim.capabilities == caps.FULL


def test_quirks_from_the_config_override_the_builtins(no_store):
    quirks = QuirksConfig(omit_tool_choice=frozenset({"auto", "required"}))
    spec = resolve("vllm", config_with("vllm", quirks=quirks), store=no_store)
    assert spec.quirks.omit_tool_choice == {"auto", "required"}
    assert resolve("vllm", store=no_store).quirks.omit_tool_choice == {"auto"}


# Quirks reach the wire.


def _body(codec, request):
    return orjson.loads(codec.build_request(request, base_url="http://x/v1", api_key=None).body)


TOOL = Tool(name="look", description="", parameters={"type": "object", "properties": {}})
HISTORY = (
    Message.user("hi"),
    Message(role="assistant", content=(ReasoningPart(text="hmm"), TextPart(text="hello"))),
    Message.user("again"),
)


def test_no_quirks_change_nothing():
    request = ChatRequest(
        model="x:m", messages=HISTORY, tools=(TOOL,), tool_choice="auto", max_tokens=5
    )
    assert _body(OpenAICodec(), request) == _body(OpenAICodec(NO_QUIRKS), request)
    assert NO_QUIRKS.changes_nothing


def test_vllm_gets_no_tool_choice_auto_but_keeps_the_others():
    codec = provider_codec(resolve("vllm"))
    auto = ChatRequest(model="vllm:m", messages="hi", tools=(TOOL,), tool_choice="auto")
    assert "tool_choice" not in _body(codec, auto)
    required = attrs.evolve(auto, tool_choice="required")
    assert _body(codec, required)["tool_choice"] == "required"


def test_openai_gets_no_reasoning_content_and_max_completion_tokens(no_store):
    codec = provider_codec(resolve("openai", env={"OPENAI_API_KEY": KEY}, store=no_store))
    body = _body(codec, ChatRequest(model="openai:o3", messages=HISTORY, max_tokens=7))
    assert body["max_completion_tokens"] == 7 and "max_tokens" not in body
    assert "reasoning_content" not in body["messages"][1]


def test_deepseek_gets_reasoning_content_echoed(no_store):
    codec = provider_codec(resolve("deepseek", env={"DEEPSEEK_API_KEY": KEY}, store=no_store))
    body = _body(codec, ChatRequest(model="deepseek:deepseek-reasoner", messages=HISTORY))
    assert body["messages"][1]["reasoning_content"] == "hmm"


def test_extra_body_still_wins_over_a_quirk():
    codec = OpenAICodec(RequestQuirks(omit_tool_choice={"auto"}))
    request = ChatRequest(
        model="x:m",
        messages="hi",
        tools=(TOOL,),
        tool_choice="auto",
        extra_body={"tool_choice": "auto"},
    )
    assert _body(codec, request)["tool_choice"] == "auto"


async def test_the_runtime_sends_through_the_provider_codec_with_auth_and_quirks(no_store):
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(
            200,
            json={
                "id": "x",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "ok"},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            },
        )

    config = RuntimeConfig(
        providers={
            "vllm": ProviderConfig(
                base_url="http://gpu-box:8000/v1",
                api_key=Secret(KEY),
                params={"temperature": 0.3, "top_k": 20},
                models={"qwen": ModelConfig(params={"temperature": 0.1})},
            )
        }
    )
    async with sluice.open_runtime(
        config, transport=httpx.MockTransport(handler), environ={}
    ) as rt:
        result = await rt.chat("vllm:qwen", "hi", tools=(TOOL,), tool_choice="auto", stream=False)
    assert result.text == "ok"
    (request,) = seen
    assert str(request.url) == "http://gpu-box:8000/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {KEY}"
    body = orjson.loads(request.content)
    assert "tool_choice" not in body
    assert body["temperature"] == 0.1 and body["top_k"] == 20
