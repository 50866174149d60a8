"""What can be asked of a provider outside a chat call: its models, whether it answers, whether
one model works. Used by ``sluice providers``; plain httpx, not the hot path.

Per protocol, the model list comes from ``GET {base}/models`` (OpenAI-compatible, Anthropic,
Gemini; following pages where the protocol pages) or ``GET {base}/api/tags`` (Ollama). A model
is checked with the smallest real call (one user message, ``ping``, a few output tokens, not
streamed), except on Ollama, where it is looked up in the local model list so that checking
does not load it. Every message is cleaned of the provider's key before it is returned.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import attrs
import httpx
import orjson

from ..errors import CallError, SluiceError
from ..messages import ChatRequest
from ..protocols.anthropic_request import ANTHROPIC_VERSION
from ..redact import redact, secrets_of
from .codec import provider_codec

if TYPE_CHECKING:
    from .registry import ResolvedProvider

__all__ = [
    "CheckResult",
    "ListedModel",
    "OperationFailed",
    "check_connection",
    "check_model",
    "list_models",
]

_MAX_PAGES = 20
_CHECK_MAX_TOKENS = 16


class OperationFailed(SluiceError):
    """A provider operation got no usable answer."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


@attrs.frozen
class ListedModel:
    id: str
    name: str | None = None


@attrs.frozen
class CheckResult:
    ok: bool
    message: str
    elapsed: float = 0.0
    """Seconds the check took."""
    status: int | None = None
    """The HTTP status of the last reply, if there was one."""


def _redact(text: str, spec: ResolvedProvider) -> str:
    return redact(text, secrets_of(spec.api_key, spec.headers))


def _base(spec: ResolvedProvider) -> str:
    if not spec.base_url:
        raise OperationFailed(f"provider {spec.name!r} has no base URL")
    return spec.base_url.rstrip("/")


def _headers(spec: ResolvedProvider) -> dict[str, str]:
    headers = {"accept": "application/json"}
    if spec.protocol == "anthropic":
        headers["anthropic-version"] = ANTHROPIC_VERSION
    headers.update(spec.request_headers())
    return headers


async def _get_json(
    client: httpx.AsyncClient, spec: ResolvedProvider, url: str, params: dict[str, Any]
) -> Any:
    try:
        response = await client.get(url, params=params, headers=_headers(spec))
    except httpx.TimeoutException:
        raise OperationFailed(f"no answer from {url} in time") from None
    except httpx.HTTPError as exc:
        raise OperationFailed(_redact(f"cannot reach {url}: {exc}", spec)) from None
    if response.status_code >= 400:
        raise OperationFailed(_error_text(spec, response), response.status_code)
    try:
        return orjson.loads(response.content)
    except orjson.JSONDecodeError:
        raise OperationFailed(f"{url} did not answer with JSON", response.status_code) from None


def _error_text(spec: ResolvedProvider, response: httpx.Response) -> str:
    error = provider_codec(spec).decode_error(
        response.status_code,
        {k.lower(): v for k, v in response.headers.items()},
        response.content[:65536],
        wall_now=time.time(),
    )
    return _redact(f"{error.kind} (HTTP {response.status_code}): {error.message}", spec)


async def list_models(spec: ResolvedProvider, client: httpx.AsyncClient) -> list[ListedModel]:
    """The models the provider's server lists, de-duplicated, in its order.

    Raises:
        OperationFailed: the server could not be reached or answered with an error.
    """
    base = _base(spec)
    found: list[ListedModel] = []
    if spec.protocol == "ollama":
        reply = await _get_json(client, spec, f"{base}/api/tags", {})
        for row in _rows(reply, "models"):
            found.append(ListedModel(str(row.get("name") or row.get("model") or "")))
    elif spec.protocol == "gemini":
        params: dict[str, Any] = {"pageSize": 1000}
        for _ in range(_MAX_PAGES):
            reply = await _get_json(client, spec, f"{base}/models", params)
            for row in _rows(reply, "models"):
                name = str(row.get("name") or "").removeprefix("models/")
                found.append(ListedModel(name, _text(row, "displayName")))
            token = reply.get("nextPageToken") if isinstance(reply, dict) else None
            if not token:
                break
            params = {"pageSize": 1000, "pageToken": token}
    elif spec.protocol == "anthropic":
        params = {"limit": 1000}
        for _ in range(_MAX_PAGES):
            reply = await _get_json(client, spec, f"{base}/models", params)
            for row in _rows(reply, "data"):
                found.append(ListedModel(str(row.get("id") or ""), _text(row, "display_name")))
            if not (isinstance(reply, dict) and reply.get("has_more") and reply.get("last_id")):
                break
            params = {"limit": 1000, "after_id": reply["last_id"]}
    else:
        reply = await _get_json(client, spec, f"{base}/models", {})
        for row in _rows(reply, "data"):
            found.append(ListedModel(str(row.get("id") or ""), _text(row, "name")))
    unique: dict[str, ListedModel] = {}
    for model in found:
        model_id = model.id.strip()
        if model_id and model_id not in unique:
            unique[model_id] = attrs.evolve(model, id=model_id)
    return list(unique.values())


def _text(row: dict[str, Any], key: str) -> str | None:
    value = row.get(key)
    return value if isinstance(value, str) and value else None


def _rows(reply: Any, key: str) -> list[dict[str, Any]]:
    rows = reply.get(key) if isinstance(reply, dict) else reply
    if not isinstance(rows, list):
        raise OperationFailed(f"the model list has no {key!r} array")
    return [r for r in rows if isinstance(r, dict)]


async def check_connection(
    spec: ResolvedProvider, client: httpx.AsyncClient, *, model: str | None = None
) -> CheckResult:
    """Whether the provider answers with this key: its model list, or for a provider that
    cannot list models a minimal call to ``model`` (default: its first known model)."""
    started = time.monotonic()
    if not spec.lists_models:
        target = model or (spec.models[0].id if spec.models else None)
        if target is None:
            return CheckResult(
                False, "this provider cannot list its models: name one to check (--model)"
            )
        return await check_model(spec, target, client)
    try:
        models = await list_models(spec, client)
    except OperationFailed as exc:
        elapsed = time.monotonic() - started
        if spec.protocol == "anthropic" and exc.status in (404, 405):
            # A server that copies the messages API without the models one (a proxy).
            target = model or (spec.models[0].id if spec.models else "claude-sonnet-4-5")
            result = await check_model(spec, target, client)
            if result.ok or result.status in (400, 404, 422):
                return attrs.evolve(result, ok=True, message=f"reachable ({result.message})")
            return result
        return CheckResult(False, exc.message, elapsed, exc.status)
    elapsed = time.monotonic() - started
    return CheckResult(True, f"reachable: {len(models)} models listed", elapsed, 200)


async def check_model(spec: ResolvedProvider, model: str, client: httpx.AsyncClient) -> CheckResult:
    """Whether ``model`` answers a minimal call (on Ollama: whether it is installed)."""
    started = time.monotonic()
    model = model.strip()
    if not model:
        return CheckResult(False, "empty model name")
    if spec.protocol == "ollama":
        try:
            names = {m.id for m in await list_models(spec, client)}
        except OperationFailed as exc:
            return CheckResult(False, exc.message, time.monotonic() - started, exc.status)
        ok = model in names or f"{model}:latest" in names
        message = "installed" if ok else f"model {model!r} is not installed (ollama pull {model})"
        return CheckResult(ok, message, time.monotonic() - started, 200)
    codec = provider_codec(spec)
    request = ChatRequest(
        model=f"{spec.name}:{model}", messages="ping", max_tokens=_CHECK_MAX_TOKENS, stream=False
    )
    built = codec.build_request(
        request,
        base_url=_base(spec),
        api_key=spec.api_key.reveal() if spec.api_key else None,
        headers=spec.headers,
    )
    try:
        response = await client.request(
            built.method, built.url, headers=list(built.headers), content=built.body
        )
    except httpx.TimeoutException:
        return CheckResult(
            False, f"no answer from {spec.base_url} in time", time.monotonic() - started
        )
    except httpx.HTTPError as exc:
        text = _redact(f"cannot reach {spec.base_url}: {exc}", spec)
        return CheckResult(False, text, time.monotonic() - started)
    elapsed = time.monotonic() - started
    status = response.status_code
    if status >= 400:
        return CheckResult(False, _error_text(spec, response), elapsed, status)
    try:
        output = codec.decode_body(response.content)
    except (CallError, ValueError) as exc:
        text = _redact(f"the reply could not be read: {exc}", spec)
        return CheckResult(False, text, elapsed, status)
    tokens = output.usage.output_tokens if output.usage is not None else None
    detail = f", {tokens} output tokens" if tokens is not None else ""
    return CheckResult(True, f"model {model!r} answered{detail}", elapsed, status)
