"""Azure OpenAI's deployment API: the request sluice sends, the simulator's route, and the
official SDK's ``AzureOpenAI`` client against that route."""

from __future__ import annotations

import httpx
import openai
import orjson
import pytest

import sluice
from sluice import ChatRequest, ConfigError, ProviderConfig, RuntimeConfig, Secret
from sluice._protocols.openai_request import build_body
from sluice.providers._codec import provider_codec
from sluice.providers._registry import resolve_provider
from sluice.simulator import SimulatorApp, SimulatorConfig, mock_transport

from .helpers import sim_process, virtual_deadline

KEY = "azure-key-0123456789abcdef"
VERSION = "2024-10-21"
ROOT = "https://contoso.openai.azure.com"


def azure(**overrides: object) -> RuntimeConfig:
    settings: dict[str, object] = {
        "base_url": ROOT,
        "api_version": VERSION,
        "api_key": Secret(KEY),
    }
    settings.update(overrides)
    return RuntimeConfig(providers={"azure-openai": ProviderConfig(**settings)})  # type: ignore[arg-type]


def test_the_request_names_the_deployment_the_version_and_sends_the_key_as_api_key():
    spec = resolve_provider("azure-openai", azure(), environ={})
    request = ChatRequest(model="azure-openai:gpt-4o-prod", messages="hi", max_tokens=5)
    built = provider_codec(spec).build_request(
        request,
        base_url=spec.base_url or "",
        api_key=spec.api_key.reveal() if spec.api_key else None,
        headers=spec.headers,
    )
    assert built.method == "POST"
    assert (
        built.url == f"{ROOT}/openai/deployments/gpt-4o-prod/chat/completions?api-version={VERSION}"
    )
    headers = dict(built.headers)
    assert headers["api-key"] == KEY
    assert "authorization" not in headers
    assert headers["accept"] == "text/event-stream"
    # The body is OpenAI's, byte for byte (the deployment also rides along as the model).
    assert orjson.loads(built.body) == build_body(request, spec.quirks)
    assert orjson.loads(built.body)["stream_options"] == {"include_usage": True}


def test_a_deployment_name_is_quoted_into_the_path():
    spec = resolve_provider("azure-openai", azure(), environ={})
    request = ChatRequest(model="azure-openai:my deploy", messages="hi")
    built = provider_codec(spec).build_request(
        request,
        base_url=spec.base_url or "",
        api_key=spec.api_key.reveal() if spec.api_key else None,
        headers=spec.headers,
    )
    assert "/openai/deployments/my%20deploy/chat/completions?" in built.url


def test_without_api_version_the_v1_api_keeps_openai_paths():
    spec = resolve_provider(
        "azure-openai", azure(base_url=f"{ROOT}/openai/v1", api_version=None), environ={}
    )
    request = ChatRequest(model="azure-openai:gpt-4o", messages="hi")
    built = provider_codec(spec).build_request(
        request,
        base_url=spec.base_url or "",
        api_key=spec.api_key.reveal() if spec.api_key else None,
        headers=spec.headers,
    )
    assert built.url == f"{ROOT}/openai/v1/chat/completions"
    assert dict(built.headers)["api-key"] == KEY


def test_a_custom_provider_with_an_api_version_sends_api_key_by_default():
    config = RuntimeConfig(
        providers={
            "azure-east": ProviderConfig(base_url=ROOT, api_version=VERSION, api_key=Secret(KEY))
        }
    )
    spec = resolve_provider("azure-east", config, environ={})
    assert spec.auth == "api-key"


def test_api_version_on_another_protocol_is_refused_with_the_fix():
    config = RuntimeConfig(
        providers={"x": ProviderConfig(base_url=ROOT, protocol="anthropic", api_version=VERSION)}
    )
    with pytest.raises(ConfigError, match=r"providers\.x\.api_version .* protocol"):
        resolve_provider("x", config, environ={})


@virtual_deadline(30)
async def test_the_runtime_completes_a_streamed_call_through_the_deployment_route(autojump_clock):
    seen: list[httpx.Request] = []
    app = SimulatorApp(SimulatorConfig(seed=1))
    inner = mock_transport(app)

    async def record(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return await inner.handle_async_request(request)

    async with sluice.open_runtime(
        azure(), transport=httpx.MockTransport(record), environ={}
    ) as rt:
        reply = await rt.chat(ChatRequest(model="azure-openai:gpt-4o-prod", messages="hello"))
    assert reply.text and reply.finish_reason == "stop"
    assert reply.usage.output_tokens > 0
    (request,) = seen
    assert request.url.path == "/openai/deployments/gpt-4o-prod/chat/completions"
    assert request.url.params["api-version"] == VERSION
    assert request.headers["api-key"] == KEY


def test_the_simulator_answers_with_the_deployment_as_the_model():
    with sim_process() as url:
        root = url.removesuffix("/v1")
        reply = httpx.post(
            f"{root}/openai/deployments/dep-1/chat/completions?api-version={VERSION}",
            json={"messages": [{"role": "user", "content": "hi"}]},
            headers={"api-key": KEY},
            timeout=20,
        )
    assert reply.status_code == 200
    assert reply.json()["model"] == "dep-1"


@pytest.fixture(scope="module")
def azure_client():
    with (
        sim_process() as url,
        openai.AzureOpenAI(
            azure_endpoint=url.removesuffix("/v1"),
            api_version=VERSION,
            api_key=KEY,
            max_retries=0,
            timeout=20,
        ) as client,
    ):
        yield client


def test_the_official_azure_client_completes_a_call(azure_client):
    reply = azure_client.chat.completions.create(
        model="gpt-4o-prod", messages=[{"role": "user", "content": "Say hi"}]
    )
    assert reply.choices[0].message.content
    assert reply.choices[0].finish_reason == "stop"
    assert reply.model == "gpt-4o-prod"


def test_the_official_azure_client_streams_with_usage(azure_client):
    stream = azure_client.chat.completions.create(
        model="gpt-4o-prod",
        messages=[{"role": "user", "content": "Tell me something"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    text = []
    usage = None
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            text.append(chunk.choices[0].delta.content)
        if chunk.usage is not None:
            usage = chunk.usage
    assert "".join(text)
    assert usage is not None and usage.completion_tokens > 0
