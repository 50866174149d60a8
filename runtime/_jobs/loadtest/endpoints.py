"""The endpoints a load test calls besides chat.

Embeddings go through the runtime (:func:`call_embed`: ``Runtime.embed``, so the quotas,
retries, breakers and ``--respect-limits`` apply as they do to chat), a batch of inputs a
request. OpenAI text completions (``/completions``, streamed), which the runtime does not
speak, go straight over HTTP (httpx) to the provider's base URL (:func:`call_endpoint`),
measured the same way as chat: the :class:`~.metrics.Tracker` gets each text chunk as it
arrives.

Chat itself, in any of the four protocols, goes through the runtime (:mod:`.run`), and so
does ``responses``: chat calls whose model speaks OpenAI's Responses API (the
``openai-responses`` protocol, set by :func:`responses_config`), measured exactly as chat.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import attrs
import orjson

if TYPE_CHECKING:
    import httpx

    from ..._config import RuntimeConfig
    from ..._messages import Deadlines
    from ..._runtime import Runtime
    from .metrics import Tracker
    from .workload import WorkItem

__all__ = [
    "ENDPOINTS",
    "DirectTarget",
    "Outcome",
    "call_embed",
    "call_endpoint",
    "embed_inputs",
    "responses_config",
]

ENDPOINTS = ("chat", "completions", "embeddings", "responses")
Endpoint = Literal["chat", "completions", "embeddings", "responses"]


@attrs.frozen(repr=False)
class DirectTarget:
    """Where completions and embeddings requests go. The key is never shown."""

    base_url: str
    model: str
    api_key: str | None = None

    def __repr__(self) -> str:
        return f"DirectTarget({self.base_url!r}, {self.model!r})"

    def headers(self) -> dict[str, str]:
        headers = {"content-type": "application/json"}
        if self.api_key:
            headers["authorization"] = f"Bearer {self.api_key}"
        return headers


@attrs.frozen
class Outcome:
    """How a direct request ended: usage when the server reported it, else the failure."""

    ok: bool
    input_tokens: int | None = None
    output_tokens: int | None = None
    status: int | None = None
    error_type: str | None = None
    error: str | None = None
    text: str = ""
    attempts: int = 1
    request_id: str | None = None
    queue_wait: float = 0.0
    """Seconds the runtime held the request before sending it (a quota, a cooldown)."""


def _failure(status: int | None, body: bytes, kind: str) -> Outcome:
    message = body[:300].decode("utf-8", "replace")
    try:
        detail = orjson.loads(body).get("error", {})
        if isinstance(detail, dict):
            message = str(detail.get("message") or message)
            kind = str(detail.get("type") or kind)
    except (orjson.JSONDecodeError, AttributeError):
        pass
    return Outcome(False, status=status, error_type=kind, error=message)


def responses_config(config: RuntimeConfig, model: str) -> RuntimeConfig:
    """``config`` with ``model`` (``provider:model``) speaking OpenAI's Responses API, for a
    ``responses`` load test: its chat calls then go to ``/responses`` through the same actors.

    Raises:
        ConfigError: the provider does not speak OpenAI's protocols (when the runtime starts
            it: a model can only choose between OpenAI's two APIs).
    """
    from ..._config import ModelConfig, ProviderConfig

    provider, _, name = model.partition(":")
    entry = config.providers.get(provider, ProviderConfig())
    known = entry.models.get(name, ModelConfig())
    models = {**entry.models, name: attrs.evolve(known, protocol="openai-responses")}
    entry = attrs.evolve(entry, models=models)
    return attrs.evolve(config, providers={**config.providers, provider: entry})


def embed_inputs(item: WorkItem, batch: int) -> list[str]:
    """The inputs of an embeddings request for ``item``: ``batch`` copies of its prompt,
    numbered so a server (or a cache) cannot tell them to be the same."""
    prompt = item.messages if isinstance(item.messages, str) else item.messages[-1].text
    return [prompt if i == 0 else f"{i} {prompt}" for i in range(batch)]


async def call_embed(
    rt: Runtime, model: str, item: WorkItem, batch: int, deadlines: Deadlines
) -> Outcome:
    """One embeddings request for ``item`` (``batch`` inputs) through ``rt``; how it ended.

    Raises:
        ConfigError: the model cannot be called at all (unknown provider, no key).
    """
    from ..._embeddings import EmbedRequest
    from ..._errors import CallError, ConfigError, SluiceError

    request = EmbedRequest(
        model=model, input=embed_inputs(item, batch), deadlines=deadlines, response_cache=False
    )
    try:
        result = await rt.embed(request)
    except ConfigError:
        raise
    except CallError as exc:
        return Outcome(
            False,
            status=exc.status,
            error_type=exc.error_type or exc.kind,
            error=exc.message,
            attempts=max(exc.attempt, 1),
            request_id=exc.request_id,
        )
    except SluiceError as exc:
        return Outcome(False, error_type=type(exc).__name__, error=str(exc))
    return Outcome(
        True,
        input_tokens=result.usage.input_tokens,
        output_tokens=0,
        attempts=result.attempts,
        request_id=result.request_id,
        queue_wait=result.timings.queued,
    )


async def call_endpoint(
    client: httpx.AsyncClient,
    target: DirectTarget,
    endpoint: Endpoint,
    item: WorkItem,
    tracker: Tracker,
    clock: Any,
    *,
    batch: int = 1,
) -> Outcome:
    """Send one completions or embeddings request for ``item`` and feed ``tracker``.

    ``clock()`` gives run-relative times. An embeddings request carries ``batch`` copies of
    the prompt, numbered so the server cannot tell them to be the same.
    """
    import httpx

    prompt = item.messages if isinstance(item.messages, str) else item.messages[-1].text
    try:
        if endpoint == "embeddings":
            inputs = [prompt if i == 0 else f"{i} {prompt}" for i in range(batch)]
            body: dict[str, Any] = {"model": target.model, "input": inputs}
            response = await client.post(
                f"{target.base_url}/embeddings",
                content=orjson.dumps(body),
                headers=target.headers(),
            )
            if response.status_code != 200:
                return _failure(response.status_code, response.content, "http_error")
            reported = response.json().get("usage") or {}
            return Outcome(True, input_tokens=reported.get("prompt_tokens"), output_tokens=0)
        body = {
            "model": target.model,
            "prompt": prompt,
            "max_tokens": item.max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        request = client.build_request(
            "POST",
            f"{target.base_url}/completions",
            content=orjson.dumps(body),
            headers=target.headers(),
        )
        response = await client.send(request, stream=True)
        try:
            if response.status_code != 200:
                return _failure(response.status_code, await response.aread(), "http_error")
            usage: dict[str, Any] = {}
            parts: list[str] = []
            async for line in response.aiter_lines():
                if not line.startswith("data: {"):
                    continue
                chunk = orjson.loads(line[6:])
                usage = chunk.get("usage") or usage
                for choice in chunk.get("choices") or ():
                    text = choice.get("text") or ""
                    if text:
                        tracker.chunk(clock(), text)
                        parts.append(text)
        finally:
            await response.aclose()
        return Outcome(
            True,
            input_tokens=usage.get("prompt_tokens"),
            output_tokens=usage.get("completion_tokens"),
            text="".join(parts),
        )
    except httpx.HTTPError as exc:
        return Outcome(False, error_type=type(exc).__name__, error=str(exc) or type(exc).__name__)
    except (orjson.JSONDecodeError, AttributeError, TypeError) as exc:
        return Outcome(False, error_type="protocol_error", error=f"unreadable reply: {exc}")
