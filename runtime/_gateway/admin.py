"""The gateway's admin API: ``GET|POST /admin/keys`` and ``DELETE /admin/keys/NAME``, open only
to the holder of the admin token (compared in constant time against its hash)."""

from __future__ import annotations

import hmac
from typing import TYPE_CHECKING

import orjson
import trio

from .._errors import ConfigError
from .errors import BadBody, NoRoute, NotAdmin, Refused, response_for
from .request_parts import bearer_token
from .vkeys import hash_token, issue_key, revoke_key

if TYPE_CHECKING:
    from collections.abc import Callable

    from .http import Request, Responder
    from .vkeys import KeyRing

__all__ = ["serve_admin"]

_JSON = (b"content-type", b"application/json")


async def serve_admin(
    request: Request,
    respond: Responder,
    *,
    keys: KeyRing,
    token_hash: str,
    wall_clock: Callable[[], float],
) -> None:
    """Answer one admin request; without the right token, or for a bad body or an unknown
    route, the answer is an OpenAI-shaped error and nothing changes."""
    token = bearer_token(request)
    if token is None or not hmac.compare_digest(hash_token(token), token_hash):
        await respond.send(*response_for("openai", NotAdmin("the admin API needs the admin token")))
        return
    keys.refresh(trio.current_time())
    try:
        await _admin_keys(request, respond, keys, wall_clock)
    except (ConfigError, orjson.JSONDecodeError, TypeError) as exc:
        await respond.send(*response_for("openai", BadBody(str(exc))))
    except Refused as exc:
        await respond.send(*response_for("openai", exc))


async def _admin_keys(
    request: Request, respond: Responder, keys: KeyRing, wall_clock: Callable[[], float]
) -> None:
    """List, issue or revoke a key.

    Raises:
        ConfigError: the key asked for cannot be made or revoked.
        NoRoute: no such admin route.
    """
    path = request.path.decode("latin-1")
    if path == "/admin/keys" and request.method == b"GET":
        listed = [k.public() for k in keys.by_name.values()]
        await respond.send(200, [_JSON], orjson.dumps({"keys": listed}))
    elif path == "/admin/keys" and request.method == b"POST":
        spec = orjson.loads(request.body)
        if not isinstance(spec, dict):
            raise ConfigError("the body must be an object")
        key, secret = issue_key(
            keys.by_name,
            str(spec.get("name", "")),
            rpm=spec.get("rpm"),
            tpm=spec.get("tpm"),
            budget_usd=spec.get("budget_usd"),
            models=spec.get("models") or (),
            now=wall_clock(),
        )
        keys.put(key)
        await respond.send(200, [_JSON], orjson.dumps({**key.public(), "key": secret}))
    elif path.startswith("/admin/keys/") and request.method == b"DELETE":
        key = revoke_key(keys.by_name, path.removeprefix("/admin/keys/"))
        keys.put(key)
        await respond.send(200, [_JSON], orjson.dumps(key.public()))
    else:
        raise NoRoute(f"no admin route {request.method.decode()} {path}")
