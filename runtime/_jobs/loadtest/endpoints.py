"""Load-testing the endpoints the runtime does not call: OpenAI text completions
(``/completions``, streamed) and embeddings (``/embeddings``, batches of inputs). Requests go
straight over HTTP (httpx) to the provider's base URL, measured the same way as chat: the
:class:`~.metrics.Tracker` gets each text chunk as it arrives.

Chat itself, in any of the four protocols, goes through the runtime (:mod:`.run`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import attrs
import orjson

if TYPE_CHECKING:
    import httpx

    from .metrics import Tracker
    from .workload import WorkItem

__all__ = ["ENDPOINTS", "DirectTarget", "Outcome", "call_endpoint"]

ENDPOINTS = ("chat", "completions", "embeddings")
Endpoint = Literal["chat", "completions", "embeddings"]


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
