"""What can be asked of a provider outside a chat call: its models, whether it answers, whether
one model works. Used by ``sluice providers``; not the hot path, but the same stack as calls.

Every request goes through the transport a provider's calls use (:class:`HotTransport`: sluice's
own client, or httpx when the provider is configured so), with the headers the provider's codec
builds for a call (protocol version, the key in its configured header, the provider's extra
headers), and every error reply is read by the codec's ``decode_error``, as a call's would be.

Per protocol, the model list comes from ``GET {base}/models`` (OpenAI-compatible, Anthropic,
Gemini; following pages where the protocol pages) or ``GET {base}/api/tags`` (Ollama). A model
is checked with the smallest real call (one user message, ``ping``, a few output tokens, not
streamed), except on Ollama, where it is looked up in the local model list so that checking
does not load it. Every message is cleaned of the provider's key before it is returned.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import attrs
import orjson
import trio

from .._errors import CallError, SluiceError
from .._messages import ChatRequest
from .._redact import redact, secrets_of
from ..transport._errors import TransportError
from ._codec import provider_codec

if TYPE_CHECKING:
    from collections.abc import Mapping

    from .._protocols.base import Codec
    from ..transport._base import HotTransport
    from ._registry import ResolvedProvider

__all__ = [
    "CheckResult",
    "ListedModel",
    "OperationFailed",
    "check_connection",
    "check_model",
    "list_models",
    "open_transport",
]

_MAX_PAGES = 20
_CHECK_MAX_TOKENS = 16
_MAX_BODY = 32 * 1024 * 1024
"""A reply larger than this is refused (the largest model lists are a few megabytes)."""
DEFAULT_WAIT = 10.0


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


def open_transport(spec: ResolvedProvider) -> HotTransport:
    """A transport of the kind ``spec``'s calls go through (its ``transport`` setting, its
    connection limits and connect timeout); the caller closes it."""
    from ..transport import FastTransport, HttpxTransport

    if spec.transport == "httpx":
        return HttpxTransport(
            max_connections=spec.max_connections, connect_timeout=spec.connect_timeout
        )
    return FastTransport(max_connections=spec.max_connections, connect_timeout=spec.connect_timeout)


def _redact(text: str, spec: ResolvedProvider) -> str:
    return redact(text, secrets_of(spec.api_key, spec.headers))


def _base(spec: ResolvedProvider) -> str:
    if not spec.base_url:
        raise OperationFailed(f"provider {spec.name!r} has no base URL")
    return spec.base_url.rstrip("/")


def _call_headers(spec: ResolvedProvider, codec: Codec) -> tuple[tuple[str, str], ...]:
    """The headers a (non-streamed) call to ``spec`` sends, as its codec builds them, less the
    body's ``content-type``: so a GET carries the key exactly where calls carry it."""
    probe = codec.build_request(
        ChatRequest(model=f"{spec.name}:probe", messages="ping", stream=False),
        base_url=_base(spec),
        api_key=spec.api_key.reveal() if spec.api_key else None,
        headers=spec.headers,
    )
    return tuple((name, value) for name, value in probe.headers if name != "content-type")


async def _exchange(
    transport: HotTransport,
    spec: ResolvedProvider,
    method: str,
    url: str,
    headers: tuple[tuple[str, str], ...],
    body: bytes,
    answer_within: float,
) -> tuple[int, Mapping[str, str], bytes]:
    """Send one request through ``transport``; read the whole reply within ``answer_within`` s.

    Raises:
        OperationFailed: no reply in time, the server could not be reached or the connection
            broke, or the reply was too large; the message never holds the key.
    """
    where = url.partition("?")[0]
    with trio.move_on_after(answer_within):
        try:
            response = await transport.send(method, url, headers, body)
            try:
                pieces: list[bytes] = []
                size = 0
                while piece := await response.read_some():
                    size += len(piece)
                    if size > _MAX_BODY:
                        raise OperationFailed(f"{where} answered with more than 32 MiB")
                    pieces.append(piece)
            finally:
                await response.aclose()
        except TransportError as exc:
            raise OperationFailed(_redact(f"cannot reach {where}: {exc}", spec)) from None
        return response.status, response.headers, b"".join(pieces)
    raise OperationFailed(f"no answer from {where} in time")


async def _get_json(
    transport: HotTransport,
    spec: ResolvedProvider,
    url: str,
    params: dict[str, Any],
    answer_within: float,
) -> Any:
    codec = provider_codec(spec)
    full = f"{url}?{urlencode(params)}" if params else url
    status, headers, body = await _exchange(
        transport, spec, "GET", full, _call_headers(spec, codec), b"", answer_within
    )
    if status >= 400:
        raise OperationFailed(_error_text(spec, codec, status, headers, body), status)
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        raise OperationFailed(f"{url} did not answer with JSON", status) from None


def _error_text(
    spec: ResolvedProvider, codec: Codec, status: int, headers: Mapping[str, str], body: bytes
) -> str:
    error = codec.decode_error(status, headers, body[:65536], wall_now=time.time())
    return _redact(f"{error.kind} (HTTP {status}): {error.message}", spec)


async def list_models(
    spec: ResolvedProvider, transport: HotTransport, *, answer_within: float = DEFAULT_WAIT
) -> list[ListedModel]:
    """The models the provider's server lists, de-duplicated, in its order (``answer_within``:
    seconds for each page).

    Raises:
        OperationFailed: the server could not be reached or answered with an error.
    """
    base = _base(spec)
    found: list[ListedModel] = []
    if spec.protocol == "ollama":
        reply = await _get_json(transport, spec, f"{base}/api/tags", {}, answer_within)
        for row in _rows(reply, "models"):
            found.append(ListedModel(str(row.get("name") or row.get("model") or "")))
    elif spec.protocol == "gemini":
        params: dict[str, Any] = {"pageSize": 1000}
        for _ in range(_MAX_PAGES):
            reply = await _get_json(transport, spec, f"{base}/models", params, answer_within)
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
            reply = await _get_json(transport, spec, f"{base}/models", params, answer_within)
            for row in _rows(reply, "data"):
                found.append(ListedModel(str(row.get("id") or ""), _text(row, "display_name")))
            if not (isinstance(reply, dict) and reply.get("has_more") and reply.get("last_id")):
                break
            params = {"limit": 1000, "after_id": reply["last_id"]}
    else:
        reply = await _get_json(transport, spec, f"{base}/models", {}, answer_within)
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
    spec: ResolvedProvider,
    transport: HotTransport,
    *,
    model: str | None = None,
    answer_within: float = DEFAULT_WAIT,
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
        return await check_model(spec, target, transport, answer_within=answer_within)
    try:
        models = await list_models(spec, transport, answer_within=answer_within)
    except OperationFailed as exc:
        elapsed = time.monotonic() - started
        if spec.protocol == "anthropic" and exc.status in (404, 405):
            # A server that copies the messages API without the models one (a proxy).
            target = model or (spec.models[0].id if spec.models else "claude-sonnet-4-5")
            result = await check_model(spec, target, transport, answer_within=answer_within)
            if result.ok or result.status in (400, 404, 422):
                return attrs.evolve(result, ok=True, message=f"reachable ({result.message})")
            return result
        return CheckResult(False, exc.message, elapsed, exc.status)
    elapsed = time.monotonic() - started
    return CheckResult(True, f"reachable: {len(models)} models listed", elapsed, 200)


async def check_model(
    spec: ResolvedProvider,
    model: str,
    transport: HotTransport,
    *,
    answer_within: float = DEFAULT_WAIT,
) -> CheckResult:
    """Whether ``model`` answers a minimal call (on Ollama: whether it is installed)."""
    started = time.monotonic()
    model = model.strip()
    if not model:
        return CheckResult(False, "empty model name")
    if spec.protocol == "ollama":
        try:
            names = {m.id for m in await list_models(spec, transport, answer_within=answer_within)}
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
        status, headers, body = await _exchange(
            transport, spec, built.method, built.url, built.headers, built.body, answer_within
        )
    except OperationFailed as exc:
        return CheckResult(False, exc.message, time.monotonic() - started)
    elapsed = time.monotonic() - started
    if status >= 400:
        return CheckResult(False, _error_text(spec, codec, status, headers, body), elapsed, status)
    try:
        output = codec.decode_body(body)
    except (CallError, ValueError) as exc:
        text = _redact(f"the reply could not be read: {exc}", spec)
        return CheckResult(False, text, elapsed, status)
    tokens = output.usage.output_tokens if output.usage is not None else None
    detail = f", {tokens} output tokens" if tokens is not None else ""
    return CheckResult(True, f"model {model!r} answered{detail}", elapsed, status)
