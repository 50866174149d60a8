"""The endpoints a load test calls besides chat.

Embeddings go through the runtime (:func:`call_embed`: ``Runtime.embed``, so the quotas,
retries, breakers and ``--respect-limits`` apply as they do to chat), a batch of inputs a
request. OpenAI text completions (``/completions``, streamed), which the runtime does not
speak, go straight to the provider's base URL (:func:`call_completions`) through a transport
of the runtime's kind (:func:`completions_transport`), measured the same way as chat: the
:class:`~.metrics.Tracker` gets each text chunk as it arrives, stamped once per network read.
Both carry ``--extra-body`` and ``--header`` as chat does; completions also
``--fixed-output``.

Chat itself, in any of the four protocols, goes through the runtime (:mod:`.run`), and so
does ``responses``: chat calls whose model speaks OpenAI's Responses API (the
``openai-responses`` protocol, set by :func:`responses_config`), measured exactly as chat.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Literal

import attrs
import orjson
import trio

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ..._config import RuntimeConfig
    from ..._messages import Deadlines
    from ..._protocols.sse import SSEEvent
    from ..._runtime import Runtime
    from ...transport import HotResponse, HotTransport, HttpPhases
    from .metrics import Tracker
    from .workload import WorkItem

__all__ = [
    "ENDPOINTS",
    "DirectTarget",
    "Outcome",
    "call_completions",
    "call_embed",
    "completions_transport",
    "embed_inputs",
    "responses_config",
]

ENDPOINTS = ("chat", "completions", "embeddings", "responses")
Endpoint = Literal["chat", "completions", "embeddings", "responses"]
_NOTHING: Mapping[str, Any] = {}


@attrs.frozen(repr=False)
class DirectTarget:
    """Where completions requests go. The key is never shown."""

    base_url: str
    model: str
    api_key: str | None = None

    def __repr__(self) -> str:
        return f"DirectTarget({self.base_url!r}, {self.model!r})"

    def headers(self, extra: Mapping[str, str] = _NOTHING) -> tuple[tuple[str, str], ...]:
        """A streamed request's headers, with ``extra`` merged as a chat request's are."""
        from ..._protocols.wire import request_headers

        credential = ("authorization", f"Bearer {self.api_key}") if self.api_key else None
        return request_headers("text/event-stream", credential, extra, None)

    def secrets(self, extra: Mapping[str, str] = _NOTHING) -> tuple[str, ...]:
        """What must never be quoted back: the key, and the ``extra`` header values whose
        names say they may hold a secret."""
        from ..._config import Secret
        from ..._redact import secrets_of

        return secrets_of(Secret(self.api_key) if self.api_key else None, extra)


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
    rt: Runtime,
    model: str,
    item: WorkItem,
    batch: int,
    deadlines: Deadlines,
    *,
    extra_body: Mapping[str, Any] = _NOTHING,
    extra_headers: Mapping[str, str] = _NOTHING,
) -> Outcome:
    """One embeddings request for ``item`` (``batch`` inputs) through ``rt``; how it ended.
    ``extra_body`` and ``extra_headers`` are the request's own (``EmbedRequest``'s fields).

    Raises:
        ConfigError: the model cannot be called at all (unknown provider, no key).
    """
    from ..._embeddings import EmbedRequest
    from ..._errors import CallError, ConfigError, SluiceError

    request = EmbedRequest(
        model=model,
        input=embed_inputs(item, batch),
        deadlines=deadlines,
        response_cache=False,
        extra_body=extra_body,
        extra_headers=extra_headers,
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


def completions_transport(rt: Runtime, model: str) -> tuple[HotTransport, bool]:
    """The transport a completions test sends through, and whether the caller closes it:
    the one ``model``'s provider would get from ``rt`` (the runtime's given transport, else
    the provider's configured kind, connection limit and timeouts), so completions are
    read as chat is, one network read at a time.

    Raises:
        ConfigError: the provider is unknown or has no key.
    """
    from ..._startup import hot_transport

    spec = rt.resolve_provider(model.partition(":")[0])
    return hot_transport(spec, rt.transport, rt.config.reply_limits.head_timeout)


async def call_completions(
    transport: HotTransport,
    target: DirectTarget,
    item: WorkItem,
    tracker: Tracker,
    origin: float,
    *,
    extra_body: Mapping[str, Any] = _NOTHING,
    extra_headers: Mapping[str, str] = _NOTHING,
    total: float | None = None,
    phases: HttpPhases | None = None,
) -> Outcome:
    """Send one streamed text-completions request for ``item`` through ``transport`` and feed
    ``tracker`` (times relative to ``origin``, the run's start on trio's clock).

    The body and headers are merged by the chat builders' rules (``extra_body`` as
    :func:`~sluice._protocols.openai_request.merge_extra` merges it, ``extra_headers`` as
    :func:`~sluice._protocols.wire.request_headers` does: never a credential or framing
    header). The clock is read once per network read and every event that read completed
    gets that time, as :func:`~.follow.follow` does for chat: the tracker merges them into
    one chunk whose tokens share the gap since the previous read. ``total`` bounds the
    whole request (seconds). The key, and any ``extra_headers`` value that may be a secret,
    are masked in whatever the outcome quotes of the server's reply. ``phases`` is given to
    the transport, which notes the exchange's HTTP phases there (as for chat).
    """
    from ..._errors import ProtocolError
    from ..._protocols.openai_request import merge_extra
    from ...transport import TransportError

    prompt = item.messages if isinstance(item.messages, str) else item.messages[-1].text
    body: dict[str, Any] = {
        "model": target.model,
        "prompt": prompt,
        "max_tokens": item.max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if extra_body:
        merge_extra(body, extra_body)
    secrets = target.secrets(extra_headers)
    reply = _Reply(tracker, origin)
    try:
        with trio.move_on_after(math.inf if total is None else total):
            response = await transport.send(
                "POST",
                f"{target.base_url}/completions",
                target.headers(extra_headers),
                orjson.dumps(body),
                phases=phases,
            )
            try:
                request_id = response.headers.get("x-request-id")
                if response.status != 200:
                    failed = _failure(response.status, await _read_capped(response), "http_error")
                    return _masked(attrs.evolve(failed, request_id=request_id), secrets)
                await reply.read(response)
            finally:
                with trio.CancelScope(shield=True):
                    await response.aclose()
            return Outcome(
                True,
                input_tokens=reply.usage.get("prompt_tokens"),
                output_tokens=reply.usage.get("completion_tokens"),
                text="".join(reply.parts),
                request_id=request_id,
            )
        return Outcome(
            False, error_type="CallTimeout", error=f"no complete reply within {total:g} s"
        )
    except TransportError as exc:
        return _masked(Outcome(False, error_type=type(exc).__name__, error=str(exc)), secrets)
    except (ProtocolError, orjson.JSONDecodeError, AttributeError, TypeError) as exc:
        error = f"unreadable reply: {exc}"
        return _masked(Outcome(False, error_type="protocol_error", error=error), secrets)


class _Reply:
    """A completions stream as it is read: its text pieces and the usage it reported."""

    def __init__(self, tracker: Tracker, origin: float) -> None:
        self.tracker = tracker
        self.origin = origin
        self.usage: dict[str, Any] = {}
        self.parts: list[str] = []

    async def read(self, response: HotResponse) -> None:
        """Read ``response``'s body to its end, one stamp per network read."""
        from ..._protocols.sse import SSEDecoder

        decoder = SSEDecoder()
        now = trio.current_time
        while data := await response.read_some():
            self.events(decoder.feed(data), now() - self.origin)
        self.events(decoder.end(), now() - self.origin)

    def events(self, events: list[SSEEvent], at: float) -> None:
        for event in events:
            if event.data == b"[DONE]":
                continue
            chunk = orjson.loads(event.data)
            self.usage = chunk.get("usage") or self.usage
            for choice in chunk.get("choices") or ():
                text = choice.get("text") or ""
                if text:
                    self.tracker.chunk(at, text)
                    self.parts.append(text)


async def _read_capped(response: HotResponse, limit: int = 65536) -> bytes:
    """An error reply's body, at most about ``limit`` bytes of it (a server may not stop)."""
    pieces: list[bytes] = []
    size = 0
    while size < limit and (data := await response.read_some()):
        pieces.append(data)
        size += len(data)
    return b"".join(pieces)


def _masked(outcome: Outcome, secrets: tuple[str, ...]) -> Outcome:
    """``outcome`` with every secret masked in the texts it quotes of the server."""
    from ..._redact import redact

    if not secrets:
        return outcome
    quoted = ("error", "error_type", "request_id")
    changes: dict[str, Any] = {
        name: redact(value, secrets)
        for name in quoted
        if isinstance(value := getattr(outcome, name), str)
    }
    return attrs.evolve(outcome, **changes)
