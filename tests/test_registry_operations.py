"""Per-protocol provider operations (list models, check connection, check one model) and the
``sluice providers`` commands, over httpx.MockTransport and the simulator over loopback."""

import httpx
import orjson
import pytest
import trio

from sluice._cli import main
from sluice._config import ProviderConfig, RuntimeConfig, Secret
from sluice.providers._keys import KeyStore
from sluice.providers._operations import (
    OperationFailed,
    check_connection,
    check_model,
    list_models,
    open_transport,
)
from sluice.providers._plugins import PluginProviders
from sluice.providers._registry import resolve_provider
from sluice.simulator import SimulatorConfig, serve_simulator
from sluice.transport import HttpxTransport

KEY = "sk-ops-test-key-0123456789abcdef"


@pytest.fixture(autouse=True)
def isolated_dirs(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.delenv("SLUICE_CONFIG", raising=False)


def spec_for(name, tmp_path, **fields):
    config = (
        RuntimeConfig(providers={name: ProviderConfig(**fields)}) if fields else RuntimeConfig()
    )
    store = KeyStore(tmp_path / "k", tmp_path / "m", {})
    env = {var: KEY for var in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY")}
    return resolve_provider(name, config, env, plugins=PluginProviders(), key_store=store)


def client_for(handler):
    """A hot transport over ``httpx.MockTransport``: the operations' requests exactly as sent."""
    return HttpxTransport(httpx.AsyncClient(transport=httpx.MockTransport(handler)))


async def test_openai_models_come_from_v1_models(tmp_path):
    def handler(request):
        assert request.url == "https://api.openai.com/v1/models"
        assert request.headers["authorization"] == f"Bearer {KEY}"
        data = [{"id": "gpt-4o"}, {"id": " gpt-4o "}, {"id": ""}, {"id": "o3", "name": "O3"}]
        return httpx.Response(200, json={"object": "list", "data": data})

    client = client_for(handler)
    found = await list_models(spec_for("openai", tmp_path), client)
    assert [(m.id, m.name) for m in found] == [("gpt-4o", None), ("o3", "O3")]


async def test_anthropic_models_follow_pages_with_its_headers(tmp_path):
    pages = []

    def handler(request):
        assert request.headers["x-api-key"] == KEY
        assert request.headers["anthropic-version"] == "2023-06-01"
        pages.append(dict(request.url.params))
        if "after_id" not in request.url.params:
            rows = [{"id": "claude-a", "display_name": "Claude A"}]
            return httpx.Response(200, json={"data": rows, "has_more": True, "last_id": "claude-a"})
        return httpx.Response(200, json={"data": [{"id": "claude-b"}], "has_more": False})

    client = client_for(handler)
    found = await list_models(spec_for("anthropic", tmp_path), client)
    assert [(m.id, m.name) for m in found] == [("claude-a", "Claude A"), ("claude-b", None)]
    assert pages == [{"limit": "1000"}, {"limit": "1000", "after_id": "claude-a"}]


async def test_gemini_models_strip_the_prefix_and_follow_page_tokens(tmp_path):
    def handler(request):
        assert request.headers["x-goog-api-key"] == KEY
        assert request.url.path == "/v1beta/models"
        if "pageToken" not in request.url.params:
            rows = [{"name": "models/gemini-2.5-pro", "displayName": "Gemini 2.5 Pro"}]
            return httpx.Response(200, json={"models": rows, "nextPageToken": "p2"})
        return httpx.Response(200, json={"models": [{"name": "models/gemini-2.0-flash"}]})

    client = client_for(handler)
    found = await list_models(spec_for("gemini", tmp_path), client)
    assert [m.id for m in found] == ["gemini-2.5-pro", "gemini-2.0-flash"]


async def test_ollama_models_come_from_api_tags(tmp_path):
    def handler(request):
        assert request.url == "http://127.0.0.1:11434/api/tags"
        assert "authorization" not in request.headers
        return httpx.Response(
            200, json={"models": [{"name": "llama3.1:latest"}, {"model": "qwen3:8b"}]}
        )

    spec = spec_for("ollama", tmp_path)
    client = client_for(handler)
    assert [m.id for m in await list_models(spec, client)] == ["llama3.1:latest", "qwen3:8b"]
    assert (await check_model(spec, "llama3.1", client)).ok
    missing = await check_model(spec, "mistral", client)
    assert not missing.ok and "ollama pull mistral" in missing.message


async def test_a_401_fails_the_check_with_the_key_removed_from_the_message(tmp_path):
    def handler(request):
        body = {
            "error": {
                "message": f"Incorrect API key provided: {KEY}",
                "type": "invalid_request_error",
            }
        }
        return httpx.Response(401, json=body)

    spec = spec_for("openai", tmp_path)
    client = client_for(handler)
    result = await check_connection(spec, client)
    with pytest.raises(OperationFailed) as info:
        await list_models(spec, client)
    assert not result.ok and result.status == 401
    assert "AuthenticationFailed (HTTP 401)" in result.message
    assert KEY not in result.message and KEY not in str(info.value)


async def test_an_anthropic_proxy_without_models_is_checked_with_a_call(tmp_path):
    calls = []

    def handler(request):
        calls.append(request.url.path)
        if request.url.path.endswith("/models"):
            return httpx.Response(
                404, json={"type": "error", "error": {"type": "not_found_error", "message": "no"}}
            )
        body = orjson.loads(request.content)
        assert body["max_tokens"] == 16 and not body.get("stream")
        return httpx.Response(
            400,
            json={
                "type": "error",
                "error": {"type": "invalid_request_error", "message": "bad model"},
            },
        )

    spec = spec_for("anthropic", tmp_path, base_url="https://proxy.example/v1")
    client = client_for(handler)
    result = await check_connection(spec, client, model="claude-x")
    assert result.ok and result.message.startswith("reachable")
    assert calls == ["/v1/models", "/v1/messages"]


async def test_a_provider_that_cannot_list_models_is_checked_with_its_first_model(tmp_path):
    def handler(request):
        assert request.url == "https://api.minimax.io/anthropic/v1/messages"
        assert orjson.loads(request.content)["model"] == "MiniMax-M2.5"
        return httpx.Response(
            200,
            json={
                "id": "m",
                "type": "message",
                "role": "assistant",
                "content": [{"type": "text", "text": "pong"}],
                "stop_reason": "end_turn",
                "usage": {"input_tokens": 1, "output_tokens": 2},
            },
        )

    spec = resolve_provider(
        "minimax",
        RuntimeConfig(),
        {"MINIMAX_API_KEY": KEY},
        plugins=PluginProviders(),
        key_store=KeyStore(tmp_path / "k", tmp_path / "m", {}),
    )
    client = client_for(handler)
    result = await check_connection(spec, client)
    assert result.ok and "2 output tokens" in result.message


async def test_connection_errors_are_results_not_exceptions(tmp_path):
    def handler(request):
        raise httpx.ConnectError("refused")

    spec = spec_for("openai", tmp_path)
    client = client_for(handler)
    assert not (await check_connection(spec, client)).ok
    result = await check_model(spec, "gpt-4o", client)
    assert not result.ok and "cannot reach" in result.message


async def test_checks_against_the_simulator_over_loopback(tmp_path):
    async with trio.open_nursery() as nursery:
        port = await nursery.start(serve_simulator, SimulatorConfig())
        spec = spec_for(
            "corp", tmp_path, base_url=f"http://127.0.0.1:{port}/v1", api_key=Secret(KEY)
        )
        transport = open_transport(spec)
        try:
            models = await list_models(spec, transport)
            connection = await check_connection(spec, transport)
            model = await check_model(spec, "sim-small", transport)
        finally:
            await transport.aclose()
        nursery.cancel_scope.cancel()
    assert "sim-small" in [m.id for m in models]
    assert connection.ok and model.ok


# The commands.


def test_providers_list_shows_every_builtin_and_key_sources(capsys, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    assert main(["providers", "list", "--json"]) == 0
    data = orjson.loads(capsys.readouterr().out)
    rows = {r["id"]: r for r in data["providers"]}
    assert len(rows) >= 35 and data["problems"] == []
    assert rows["openai"]["key"] == "env OPENAI_API_KEY"
    assert rows["anthropic"]["key"] == "missing"
    assert rows["ollama"]["key"] == "not needed"
    assert rows["ollama"]["protocol"] == "ollama"
    assert rows["dashscope"]["regions"]["intl"].startswith("https://dashscope-intl")
    assert main(["providers", "list"]) == 0
    out = capsys.readouterr().out
    assert "openai" in out and KEY not in out


def test_providers_list_includes_custom_providers_from_a_config_file(capsys, tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('[providers.corp]\nbase_url = "http://corp/v1"\nprotocol = "gemini"\n')
    assert main(["providers", "list", "--json", "--config", str(path)]) == 0
    rows = {r["id"]: r for r in orjson.loads(capsys.readouterr().out)["providers"]}
    assert rows["corp"]["source"] == "custom" and rows["corp"]["protocol"] == "gemini"


def test_providers_check_and_models_against_the_builtin_simulator(capsys):
    assert main(["providers", "check", "sim", "--model", "sim-small"]) == 0
    out = capsys.readouterr().out
    assert "sim connection: ok" in out and "sim model sim-small: ok" in out
    assert main(["providers", "models", "sim"]) == 0
    assert "sim-small" in capsys.readouterr().out.split()
    assert main(["providers", "check", "sim", "--model", "sim-small", "--json"]) == 0
    data = orjson.loads(capsys.readouterr().out)
    assert data["ok"] is True and [c["check"] for c in data["checks"]] == [
        "connection",
        "model sim-small",
    ]


def test_providers_check_exit_codes(capsys, monkeypatch, tmp_path):
    assert main(["providers", "check", "nope"]) == 2
    assert "unknown provider" in capsys.readouterr().err
    assert main(["providers", "check", "openai", "--json"]) == 2
    assert "needs an API key" in orjson.loads(capsys.readouterr().out)["error"]["message"]
    path = tmp_path / "c.toml"
    path.write_text('[providers.dead]\nbase_url = "http://127.0.0.1:9/v1"\n')
    assert main(["providers", "check", "dead", "--config", str(path), "--timeout", "2"]) == 1
    assert "FAILED" in capsys.readouterr().out
    assert main(["providers", "models", "dead", "--config", str(path), "--timeout", "2"]) == 1
    assert main(["providers", "models", "aliyun-codingplan"]) == 2


async def test_a_model_list_carries_the_key_where_the_providers_calls_do(tmp_path):
    """The GET is built by the provider's codec, as a call is: a configured auth style and the
    provider's headers go on it, and no request body header."""
    seen = []

    def handler(request):
        seen.append(request)
        return httpx.Response(200, json={"data": [{"id": "m"}]})

    spec = spec_for(
        "corp",
        tmp_path,
        base_url="https://corp.example/v1",
        api_key=Secret(KEY),
        auth="api-key",
        headers={"X-Team": "infra"},
    )
    client = client_for(handler)
    assert [m.id for m in await list_models(spec, client)] == ["m"]
    (request,) = seen
    assert request.method == "GET" and request.url == "https://corp.example/v1/models"
    assert request.headers["api-key"] == KEY and request.headers["x-team"] == "infra"
    assert "authorization" not in request.headers and "content-type" not in request.headers


async def test_a_server_that_never_answers_fails_in_the_given_time(tmp_path, autojump_clock):
    async def handler(request):
        await trio.sleep(3600)
        raise AssertionError("not reached")

    spec = spec_for("openai", tmp_path)
    client = client_for(handler)
    with trio.fail_after(60):
        started = trio.current_time()
        result = await check_connection(spec, client, answer_within=5)
    assert trio.current_time() - started == 5
    assert not result.ok
    assert result.message == "no answer from https://api.openai.com/v1/models in time"
