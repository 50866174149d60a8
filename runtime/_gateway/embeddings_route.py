"""``POST /v1/embeddings``: one embeddings request read, held against its key's quota, sent
through ``rt.embed`` and settled, in the chat route's order of checks (key, JSON object, model
served, model known, key may call it, fields). A refusal or a failed call gets OpenAI's error
shape; the key's reservation is settled on every way out."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._embeddings import EmbedRequest
from .._errors import ConfigError, SluiceError
from .embeddings_wire import parse_embeddings_body, render_embeddings
from .errors import ModelNotAllowed, ModelNotServed, Refused, response_for
from .request_parts import json_object

if TYPE_CHECKING:
    from .._embeddings import EmbedResult
    from .app import Gateway
    from .http import Request, Responder

__all__ = ["serve_embeddings"]

_JSON = (b"content-type", b"application/json")


async def serve_embeddings(gateway: Gateway, request: Request, respond: Responder) -> None:
    """Answer one embeddings request on ``gateway``."""
    try:
        key = gateway.caller(request)
        body = json_object(request)
        shown = body.get("model")
        shown = shown if isinstance(shown, str) else ""
        if not gateway.serves(shown):
            raise ModelNotServed(
                f"the model {shown[:200]!r} is not served here (the gateway's model list)"
            )
        model = gateway.resolve_model(shown, "openai")
        if key is not None and not key.allows(model):
            raise ModelNotAllowed(f"key {key.name!r} may not call {model}")
        fields, encoding = parse_embeddings_body(body)
        if "extra_body" in fields and any(p != "openai" for p in gateway.protocols_of(model)):
            del fields["extra_body"]  # OpenAI's own parameters (``user``) mean nothing there
        embed = EmbedRequest(
            model=model, retry_visible=False, tag=None if key is None else key.name, **fields
        )
        reservation = await gateway.hold(key, embed)
    except (Refused, ConfigError) as exc:
        await respond.send(*response_for("openai", exc))
        return
    result: EmbedResult | None = None
    try:
        try:
            result = await gateway.rt.embed(embed)
        except SluiceError as exc:
            await respond.send(*response_for("openai", exc))
            return
        reply = render_embeddings(result, model=shown, encoding_format=encoding)
        await respond.send(200, [_JSON], reply)
    finally:
        await gateway.settle(reservation, result)
