"""The gateway: HTTP requests in the OpenAI or Anthropic format, calls on one runtime.

Each chat request is read once into a :class:`~sluice._messages.ChatRequest` (so any client
protocol reaches any provider protocol), tagged with the caller's virtual key, checked against
that key's own quota, and sent through ``rt.stream``. A streamed reply goes out chunk by chunk
as the runtime's event batches arrive (one write per batch); the response head waits for the
first output, so a call that fails before any output gets a proper error status rather than a
broken stream. Gateway calls set ``on_partial="fail"``: once a client has seen output, a failed
attempt cannot be taken back, so it ends the stream with an error event instead of a retry.
They also set ``retry_visible=False``: the client (an SDK with retry logic of its own) gets an
upstream's 429 or 503 at once, with its ``Retry-After``; the gateway retries only a connection
that failed before the reply began, which the client cannot see, for about a second.

A ``POST /v1/responses`` body (OpenAI's Responses API) is read the same way
(:mod:`sluice._responses_format`), so any provider answers it; ``previous_response_id`` and
``background``, which only OpenAI's own Responses API honours, are refused for other upstreams.
``POST /v1/embeddings`` goes through ``rt.embed`` under the same keys, quotas and budgets
(:mod:`.embeddings_route`).

Routes: ``POST /v1/chat/completions``, ``POST /v1/messages``, ``POST /v1/responses``,
``POST /v1/embeddings``, ``GET /v1/models`` (aliases,
groups, configured models and the default provider's; see :mod:`.models`),
``GET /v1/models/{id}``, ``GET /health``, ``GET /metrics`` (the runtime's Prometheus registry,
with the gateway's own series in it: requests by route and status, open connections; see
:mod:`.metrics`), and with an admin token ``GET|POST /admin/keys`` and
``DELETE /admin/keys/NAME``. A model group's name is called like any model.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import attrs
import orjson
import trio

from .._capabilities import ToolOptions
from .._embed_calls import embed_cost
from .._embeddings import EmbedRequest
from .._errors import ConfigError, SluiceError
from .._events import (
    Completed,
    Failed,
    ReasoningDelta,
    ReasoningSignature,
    TextDelta,
    ToolCallDelta,
    UsageReported,
)
from .._limits.cost import Cost, estimate_cost
from .._limits.store import (
    BudgetRefused,
    MemoryQuotaStore,
    QuotaStore,
    Reservation,
    TooLarge,
    WindowSpec,
)
from .._messages import ChatRequest
from .._openai_format import parse_chat_body
from .._record import Record
from .._responses_format import (
    ResponsesEvents,
    chat_extra,
    parse_responses_body,
    render_response,
)
from . import anthropic_wire, openai_wire
from .admin import serve_admin
from .embeddings_route import serve_embeddings
from .errors import (
    KeyOverRate,
    KeyTooLarge,
    ModelNotAllowed,
    ModelNotServed,
    NoRoute,
    Refused,
    Unauthenticated,
    response_for,
)
from .models import ModelCatalog, ModelEntry, render_list, render_model
from .request_parts import anthropic_headers, bearer_token, json_object, refuse_stored, wire_of
from .vkeys import KeyRing, VirtualKey

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from .._embeddings import EmbedResult
    from .._messages import ChatResult
    from .._runtime import Runtime
    from .errors import Wire
    from .http import Refusal, Request, Responder, Server

    Renderer = Callable[[], bytes | Awaitable[bytes]]

__all__ = ["Gateway", "GatewaySettings"]

_JSON = (b"content-type", b"application/json")
_SSE = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
]
_PROMETHEUS = (b"content-type", b"text/plain; version=0.0.4; charset=utf-8")
_GONE = (trio.BrokenResourceError, trio.ClosedResourceError)
_KEY_PERIOD = 60.0
_ENDS = (Completed, Failed)
_PROXY_TOOLS = ToolOptions(allow_parallel=True)
"""A client that forces a tool call and leaves ``parallel_tool_calls`` unset gets what the
upstream does by default: several calls allowed, and no ``parallel_tool_calls`` added."""
_CHAT_ROUTES: dict[bytes, Wire] = {
    b"/v1/chat/completions": "openai",
    b"/v1/messages": "anthropic",
    b"/v1/responses": "openai",
    b"/v1/embeddings": "openai",
}
_RESPONSES_PROTOCOL = "openai-responses"
"""The provider protocol that speaks OpenAI's Responses API upstream: the only one that takes
a Responses body's own parameters (``extra_body``) as they are."""


def _name_set(names: Iterable[str] | None) -> frozenset[str] | None:
    return None if names is None else frozenset(names)


@attrs.frozen(kw_only=True, repr=False)
class GatewaySettings(Record):
    """How the gateway names models and who may call it."""

    default_provider: str | None = None
    """A model named without ``provider:`` goes to this provider (else it is refused)."""
    aliases: Mapping[str, str] = attrs.field(factory=dict)
    """Client-facing model names mapped to ``provider:model``."""
    require_key: bool = True
    """Refuse requests without a valid virtual key (False: an open gateway, for loopback)."""
    admin_token_hash: str | None = None
    """SHA-256 of the admin token; None turns the admin API off."""
    expected_output_tokens: int = 1024
    """Output tokens a key's tokens-per-minute reserves for a call that sets no max_tokens."""
    models: frozenset[str] | None = attrs.field(default=None, converter=_name_set)
    """The only model names served (``provider:model``, aliases, group names), aliases and
    the config's groups always included; any other is refused with 404. None: any model."""


class Gateway:
    """Answers gateway requests with one runtime. See the module docstring."""

    def __init__(
        self,
        rt: Runtime,
        *,
        keys: KeyRing | None = None,
        settings: GatewaySettings | None = None,
        quota_store: QuotaStore | None = None,
        metrics: Renderer | bool = True,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.rt = rt
        self.keys = keys if keys is not None else KeyRing(None)
        self.settings = settings if settings is not None else GatewaySettings()
        self.quotas: QuotaStore = quota_store if quota_store is not None else MemoryQuotaStore()
        self.requests: dict[tuple[str, int], int] = {}
        """Requests answered, per (route, status); 499: the client left before a response."""
        self.server: Server | None = None
        """The HTTP server in front, once one is (its connections show in the metrics)."""
        if rt.metrics is not None:
            from .metrics import GatewayCollector

            rt.metrics.registry.register(GatewayCollector(self))
        self.metrics: Renderer | None
        if metrics is True:
            self.metrics = rt.render_metrics if rt.metrics is not None else None
        else:
            self.metrics = metrics or None
        """Renders ``/metrics`` (Prometheus text, or an awaitable of it); None answers 404.
        By default the runtime's own registry (when its metrics are on), which holds the
        gateway's series too."""
        self.catalog = ModelCatalog(rt, self.settings.aliases, self.settings.default_provider)
        """What ``GET /v1/models`` lists (see :mod:`.models`)."""
        self._wall_clock = wall_clock
        self._ids = secrets.token_hex(4)
        self._count = 0
        self._protocols: dict[str, str] = {}
        self._budgeted: set[str] = set()
        self.draining = False
        self._pid = os.getpid()
        """Tells workers apart in ``/health``."""

    # ---- dispatch -----------------------------------------------------------------------

    async def handle(self, request: Request, respond: Responder) -> None:
        """Answer one request (the :class:`~sluice._gateway.http.Server` handler), counted in
        :attr:`requests` by route and status."""
        path = request.path
        method = request.method
        route = "other"
        try:
            if path == b"/v1/chat/completions" and method == b"POST":
                route = "/v1/chat/completions"
                await self._chat(request, respond, "openai")
            elif path == b"/v1/messages" and method == b"POST":
                route = "/v1/messages"
                await self._chat(request, respond, "anthropic")
            elif path == b"/v1/responses" and method == b"POST":
                route = "/v1/responses"
                await self._chat(request, respond, "openai", responses=True)
            elif path == b"/v1/embeddings" and method == b"POST":
                route = "/v1/embeddings"
                await self._embeddings(request, respond)
            elif path == b"/v1/models" and method == b"GET":
                route = "/v1/models"
                await self._models(request, respond)
            elif path.startswith(b"/v1/models/") and method == b"GET":
                route = "/v1/models/{id}"
                await self._models(request, respond, unquote(path[11:].decode("latin-1")))
            elif path == b"/health" and method == b"GET":
                route = "/health"
                status = 503 if self.draining else 200
                state = b"draining" if self.draining else b"ok"
                body = b'{"status":"%s","pid":%d}' % (state, self._pid)
                await respond.send(status, [_JSON], body)
            elif path == b"/metrics" and method == b"GET" and self.metrics is not None:
                route = "/metrics"
                text = self.metrics()
                if not isinstance(text, bytes):
                    text = await text
                await respond.send(200, [_PROMETHEUS], text)
            elif path.startswith(b"/admin/keys") and self.settings.admin_token_hash is not None:
                route = "/admin/keys"
                await self._admin(request, respond)
            else:
                refused = NoRoute(f"no route {method.decode()} {path.decode('latin-1')}")
                await respond.send(*response_for(wire_of(request), refused))
        except BaseException as exc:
            status = respond.status
            if not status:  # no response: the client left (499, as nginx says), or a bug
                gone = not isinstance(exc, Exception) or isinstance(exc, _GONE)
                status = 499 if gone else 500
            self._counted(route, status)
            raise
        self._counted(route, respond.status)

    def vet(self, request: Request) -> Refusal | None:
        """The refusal for a chat request whose key is missing or wrong, else None.

        The server asks this before it reads a body the client holds back until
        ``100 Continue``, so a client without a valid key is told 401 before it sends one.
        """
        path = request.path
        if request.method != b"POST" or path not in _CHAT_ROUTES:
            return None
        key = self._authenticate(request)
        if not isinstance(key, str):
            return None
        return response_for(_CHAT_ROUTES[path], Unauthenticated(key))

    def _counted(self, route: str, status: int) -> None:
        requests = self.requests
        key = (route, status)
        requests[key] = requests.get(key, 0) + 1

    # ---- keys and quotas ------------------------------------------------------------------

    def _authenticate(self, request: Request) -> VirtualKey | str | None:
        """The caller's key; None on an open gateway with no key given; else why not (str)."""
        token = bearer_token(request)
        self.keys.refresh(trio.current_time())
        if token is None:
            if not self.settings.require_key:
                return None
            return "missing API key: send a virtual key as 'Authorization: Bearer KEY'"
        key = self.keys.lookup(token)
        if key is None:
            if not self.settings.require_key:
                return None
            return "invalid or revoked API key"
        self._ensure_budget(key)
        return key

    def _ensure_budget(self, key: VirtualKey) -> None:
        if key.budget_usd is None or key.name in self._budgeted:
            return
        book = self.rt.ledger.budget_book
        if book is None:
            return  # refused at start: serve() always opens a budget book
        from .._ledger.budget import Budget
        from .._ledger.prices import usd_to_micros

        book.add(Budget(scope="tag", tag=key.name, max_micros=usd_to_micros(key.budget_usd)))
        self._budgeted.add(key.name)

    def charge_spent(self, spent: Mapping[str, tuple[int, int]]) -> None:
        """Open the budget accounts of every budgeted key, charged with what the ledger holds
        for its tag (``{name: (micros, tokens)}``): budgets outlive restarts."""
        from .._ledger.budget import Budget
        from .._ledger.prices import usd_to_micros

        book = self.rt.ledger.budget_book
        if book is None:
            return
        for key in self.keys.by_name.values():
            if key.budget_usd is None or key.name in self._budgeted:
                continue
            micros, tokens = spent.get(key.name, (0, 0))
            book.add(
                Budget(scope="tag", tag=key.name, max_micros=usd_to_micros(key.budget_usd)),
                spent_micros=micros,
                spent_tokens=tokens,
            )
            self._budgeted.add(key.name)

    async def _reserve(
        self, key: VirtualKey, request: ChatRequest | EmbedRequest
    ) -> Reservation | TooLarge | float | None:
        specs = []
        if key.rpm is not None:
            specs.append(WindowSpec("requests", key.rpm, _KEY_PERIOD))
        if key.tpm is not None:
            specs.append(WindowSpec("total_tokens", key.tpm, _KEY_PERIOD))
        if not specs:
            return None
        if key.tpm is None:
            cost = Cost()
        elif isinstance(request, EmbedRequest):
            cost = embed_cost(request)
        else:
            cost = estimate_cost(request, self.settings.expected_output_tokens)
        got = await self.quotas.reserve(f"vkey:{key.name}", specs, cost, trio.current_time())
        assert not isinstance(got, BudgetRefused)  # only a reserve that asks a budget gets it
        return got

    # ---- chat -----------------------------------------------------------------------------

    def resolve_model(self, name: Any, wire: Wire) -> str:
        if not isinstance(name, str) or not name:
            raise ConfigError("model: required, a string")
        alias = self.settings.aliases.get(name)
        if alias is not None:
            return alias
        if ":" in name or name in self.rt.config.groups:
            return name
        if self.settings.default_provider is not None:
            return f"{self.settings.default_provider}:{name}"
        raise ConfigError(
            f"model {name!r} names no provider; write it as 'provider:model' "
            f"(for example 'sim:{name}')"
        )

    def serves(self, name: str) -> bool:
        """Whether the allow-list (:attr:`GatewaySettings.models`) lets ``name`` through: it is
        listed, is an alias or a group, or names a listed model through the default provider."""
        allowed = self.settings.models
        if allowed is None or name in allowed or name in self.settings.aliases:
            return True
        if name in self.rt.config.groups:
            return True
        provider = self.settings.default_provider
        return provider is not None and ":" not in name and f"{provider}:{name}" in allowed

    def _protocol(self, provider: str) -> str:
        found = self._protocols.get(provider)
        if found is None:
            spec = self.rt.resolve_provider(provider)
            found = self._protocols[provider] = spec.protocol
        return found

    def _parse(
        self,
        body: Any,
        model: str,
        wire: Wire,
        key: VirtualKey | None,
        http: Request | None = None,
        *,
        responses: bool = False,
    ) -> ChatRequest:
        # The gateway's own fields go to the parser's constructor: checked once, with no
        # attrs.evolve afterwards (which would run every converter and validator again).
        # Streamed upstream either way (both parsers' default): the client's own ``stream``
        # only decides how the reply goes back. Tool fields go as the client sent them where
        # the backend honours them (see _PROXY_TOOLS).
        fields: dict[str, Any] = {
            "on_partial": "fail",
            "retry_visible": False,
            "tool_options": _PROXY_TOOLS,
        }
        if key is not None:
            fields["tag"] = key.name
        forwarded = None if http is None else anthropic_headers(http)
        if forwarded and self._protocol(model.partition(":")[0]) == "anthropic":
            fields["extra_headers"] = forwarded
        own: str = wire
        if responses:
            request = parse_responses_body(body, model=model, path="body", fields=fields)
            own = _RESPONSES_PROTOCOL
            protocols = self.protocols_of(model)
            if any(p != own for p in protocols):
                refuse_stored(request)
            if request.extra_body and all(p == "openai" for p in protocols):
                # A chat upstream: the parameters chat completions knows too, renamed.
                return attrs.evolve(request, extra_body=chat_extra(request.extra_body))
        elif wire == "openai":
            request = parse_chat_body(body, model=model, path="body", fields=fields)
        else:
            request = anthropic_wire.parse_messages_body(body, model=model, fields=fields)
        if request.extra_body and any(p != own for p in self.protocols_of(model)):
            # Parameters of the client's protocol mean nothing (or an error) to another.
            request = attrs.evolve(request, extra_body={})
        return request

    def protocols_of(self, model: str) -> list[str]:
        """The protocols ``model`` may be sent in: its provider's, or every deployment's of
        the group it names."""
        group = self.rt.config.groups.get(model)
        if group is None:
            return [self._protocol(model.partition(":")[0])]
        return [self._protocol(d.model.partition(":")[0]) for d in group.deployments]

    async def _chat(
        self, request: Request, respond: Responder, wire: Wire, *, responses: bool = False
    ) -> None:
        """Answer one chat request: read it, hold the key's quota, call, settle the quota.

        A request refused before the call (a :class:`~.errors.Refused`, or a
        :class:`~sluice._errors.ConfigError` about its model or body) gets the answer
        :func:`~.errors.response_for` gives it; nothing is held for it.
        """
        try:
            chat = self._read_chat(request, wire, responses=responses)
            reservation = await self.hold(chat.key, chat.request)
        except (Refused, ConfigError) as exc:
            await respond.send(*response_for(wire, exc))
            return
        result: ChatResult | None = None
        try:
            if chat.body.get("stream") is True:
                result = await self._stream(
                    respond, chat.request, wire, chat.shown, chat.body, responses=responses
                )
            else:
                result = await self._complete(
                    respond, chat.request, wire, chat.shown, chat.body if responses else None
                )
        finally:
            await self.settle(reservation, result)

    def _read_chat(self, request: Request, wire: Wire, *, responses: bool = False) -> _Chat:
        """The caller's key, the body and the :class:`ChatRequest` made of it, checked in this
        order: key, JSON object, model served, model known, key may call it, fields.

        Raises:
            Refused: the key, the body or the model is refused.
            ConfigError: the model names no provider, or a field is wrong.
        """
        key = self.caller(request)
        body = json_object(request)
        shown = body.get("model")
        shown = shown if isinstance(shown, str) else ""
        if not self.serves(shown):
            # Refused before anything (a breaker, a quota key, a series) is made for the name.
            raise ModelNotServed(
                f"the model {shown[:200]!r} is not served here (the gateway's model list)"
            )
        model = self.resolve_model(shown, wire)
        if key is not None and not key.allows(model):
            raise ModelNotAllowed(f"key {key.name!r} may not call {model}")
        parsed = self._parse(body, model, wire, key, request, responses=responses)
        return _Chat(key, body, shown, parsed)

    def caller(self, request: Request) -> VirtualKey | None:
        """The caller's key (None on an open gateway without one).

        Raises:
            Unauthenticated: the key is missing or wrong.
        """
        key = self._authenticate(request)
        if isinstance(key, str):
            raise Unauthenticated(key)
        return key

    async def hold(
        self, key: VirtualKey | None, request: ChatRequest | EmbedRequest
    ) -> Reservation | None:
        """The key's own quota for this call, held until :meth:`_settle` (None: nothing held).

        Raises:
            KeyOverRate: the key's requests or tokens per minute are spent for now.
            KeyTooLarge: the call needs more tokens than the key may use in a minute.
        """
        if key is None:
            return None
        held = await self._reserve(key, request)
        if isinstance(held, float):
            raise KeyOverRate(
                f"key {key.name!r} is over its rate limit; retry in {held:.1f}s", retry_after=held
            )
        if isinstance(held, TooLarge):
            raise KeyTooLarge(
                f"this request needs {held.amount} {held.dimension.replace('_', ' ')}, more"
                f" than key {key.name!r} may use per minute ({held.limit})"
            )
        return held

    async def settle(
        self, reservation: Reservation | None, result: ChatResult | EmbedResult | None
    ) -> None:
        """Replace the reserved tokens by the real ones (a call counts as one request whatever
        its end): a key without tokens per minute, which reserved none, has nothing to settle.
        Shielded: the quota is settled even when the client left."""
        if reservation is not None and reservation.cost.total_tokens:
            actual = Cost.from_usage(result.usage) if result is not None else Cost()
            with trio.CancelScope(shield=True):
                await self.quotas.settle(reservation, actual)

    def _next_id(self) -> str:
        self._count += 1
        return f"{self._ids}{self._count}"

    async def _complete(
        self,
        respond: Responder,
        request: ChatRequest,
        wire: Wire,
        shown: str,
        responses_body: Mapping[str, Any] | None = None,
    ) -> ChatResult | None:
        """Call and send the whole reply: a ``response`` object when ``responses_body`` (the
        Responses request's body, which the object repeats the settings of) is given."""
        try:
            result = await self.rt.chat(request)
        except SluiceError as exc:
            await respond.send(*response_for(wire, exc))
            return None
        if responses_body is not None:
            body = orjson.dumps(
                render_response(
                    result,
                    response_id=f"resp_{self._next_id()}",
                    model=shown,
                    created_at=int(self._wall_clock()),
                    body=responses_body,
                )
            )
        elif wire == "openai":
            body = openai_wire.render_completion(
                result,
                completion_id=f"chatcmpl-{self._next_id()}",
                model=shown,
                created=int(self._wall_clock()),
            )
        else:
            body = anthropic_wire.render_message(
                result, model=shown, message_id=f"msg_{self._next_id()}"
            )
        await respond.send(200, [_JSON], body)
        return result

    async def _stream(
        self,
        respond: Responder,
        request: ChatRequest,
        wire: Wire,
        shown: str,
        body: Any,
        *,
        responses: bool = False,
    ) -> ChatResult | None:
        encoder: openai_wire.OpenAIChunks | anthropic_wire.AnthropicEvents | ResponsesEvents
        if responses:
            encoder = ResponsesEvents(
                f"resp_{self._next_id()}", shown, int(self._wall_clock()), body
            )
        elif wire == "openai":
            encoder = openai_wire.OpenAIChunks(
                f"chatcmpl-{self._next_id()}",
                shown,
                int(self._wall_clock()),
                include_usage=openai_wire.stream_options(body),
            )
        else:
            encoder = anthropic_wire.AnthropicEvents(f"msg_{self._next_id()}", shown)
        # Output waits in ``pending`` until its batch is written; the batch that ends the
        # call goes out with the finish (one write, not two). ``pending[0]`` is the opening
        # event, made when the first output is written, with the prompt's token count when
        # the upstream told it first (Anthropic's message_start carries it).
        pending = [b""]
        started = False
        try:
            async with self.rt.stream(request) as call:
                while (batch := await call.next_events()) is not None:
                    for event in batch:
                        kind = type(event)
                        if kind is TextDelta:
                            pending.append(encoder.text(event.text, event.logprobs))  # type: ignore[union-attr]
                        elif kind is ToolCallDelta:
                            if out := encoder.tool_call(event):  # type: ignore[arg-type]
                                pending.append(out)
                        elif kind is ReasoningDelta:
                            pending.append(encoder.reasoning(event.text))  # type: ignore[union-attr]
                        elif kind is ReasoningSignature:
                            if out := encoder.signature(event):  # type: ignore[arg-type]
                                pending.append(out)
                        elif kind is UsageReported and not started:
                            pending[0] = encoder.start(event.usage)  # type: ignore[union-attr]
                    if type(batch[-1]) in _ENDS or len(pending) == (0 if started else 1):
                        continue
                    if not started:
                        if not pending[0]:
                            pending[0] = encoder.start()
                        respond.start(200, _SSE)
                        started = True
                    await respond.write(b"".join(pending))
                    pending = []
        except SluiceError as exc:  # the request was refused before it was sent
            await respond.send(*response_for(wire, exc))
            return None
        result, error = call.result, call.error
        if not started and not pending[0]:
            pending[0] = encoder.start(None if result is None else result.usage)
        if result is not None:
            if not started:
                respond.start(200, _SSE)
            await respond.finish(b"".join(pending) + encoder.finish(result))
            return result
        assert error is not None
        if not started and len(pending) == 1:  # no output at all: a plain error response
            await respond.send(*response_for(wire, error))
            return None
        if not started:
            respond.start(200, _SSE)
        await respond.finish(b"".join(pending) + encoder.error(response_for(wire, error)[2]))
        return None

    async def _embeddings(self, request: Request, respond: Responder) -> None:
        await serve_embeddings(self, request, respond)

    # ---- models and admin -----------------------------------------------------------------

    async def _model_entries(self, key: VirtualKey | None) -> list[ModelEntry]:
        """What ``key`` may call, in name order: the catalog's models and the key's own."""
        found = await self.catalog.entries()
        if key is not None:
            for model in key.models:
                if not model.endswith(":*"):
                    found.setdefault(model, ModelEntry(model, model.partition(":")[0]))
        return [
            found[n] for n in sorted(found) if key is None or key.allows(self._listed_target(n))
        ]

    def _listed_target(self, name: str) -> str:
        try:
            return self.resolve_model(name, "openai")
        except ConfigError:
            return name

    async def _models(
        self, request: Request, respond: Responder, model_id: str | None = None
    ) -> None:
        """``GET /v1/models`` (``model_id`` None) or ``GET /v1/models/{model_id}``."""
        wire = wire_of(request)
        try:
            entries = await self._model_entries(self.caller(request))
            if model_id is None:
                await respond.send(200, [_JSON], orjson.dumps(render_list(wire, entries)))
                return
            entry = next((e for e in entries if e.id == model_id), None)
            if entry is None:
                raise ModelNotServed(f"the model {model_id!r} does not exist or is not served here")
        except Refused as exc:
            await respond.send(*response_for(wire, exc))
            return
        await respond.send(200, [_JSON], orjson.dumps(render_model(wire, entry)))

    async def _admin(self, request: Request, respond: Responder) -> None:
        assert self.settings.admin_token_hash is not None
        await serve_admin(
            request,
            respond,
            keys=self.keys,
            token_hash=self.settings.admin_token_hash,
            wall_clock=self._wall_clock,
        )


@attrs.frozen
class _Chat:
    """A chat request read and checked, before its call."""

    key: VirtualKey | None
    body: dict[str, Any]
    shown: str
    """The model as the client named it (the response names it so)."""
    request: ChatRequest
