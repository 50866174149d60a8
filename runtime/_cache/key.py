"""The response cache's key: a stable hash of everything that shapes a model's answer. Pure.

Two requests share a key exactly when the backend would be asked the same question: the same
``provider:model`` and fallbacks, messages, tools, ``tool_choice``, generation parameters
(the call's own, its ``extra_body`` and the provider's and model's ``params`` from the config),
response format, tool options and ``extra_headers`` (an ``anthropic-beta`` can change the
answer). Fields that change only how the call is run -- ``stream``,
``tag``, ``priority``, ``deadlines``, ``on_partial``, ``response_cache``,
``cache_breakpoints`` and the ``cache_control`` markers of parts and tools -- are left out, so a
streamed call and a one-shot call share answers.

The key is the BLAKE2b hash of one canonical JSON text (orjson with sorted keys; attrs values
as their fields plus their class name; sets sorted), so it is the same in every process and
every run, which a cache kept in a file needs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

import attrs
import orjson

if TYPE_CHECKING:
    from .._embeddings import EmbedRequest
    from .._messages import ChatRequest

__all__ = ["KEY_VERSION", "embed_key", "request_key"]

KEY_VERSION: Final = 1
"""Part of every key: a change to what the key covers changes this, so old entries miss."""

_OPTIONS: Final = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS


def _canonical(value: Any) -> Any:
    """What orjson cannot write itself: attrs values and sets."""
    if attrs.has(type(value)):
        fields = attrs.asdict(value, recurse=False)
        fields.pop("cache_control", None)  # where the prompt is cached, not what is asked
        fields["~"] = type(value).__name__
        return fields
    if isinstance(value, frozenset | set):
        return sorted(orjson.dumps(v, default=_canonical, option=_OPTIONS).decode() for v in value)
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"a cache key cannot hold a {type(value).__name__}")


def request_key(
    request: ChatRequest,
    *,
    params: Mapping[str, Any] | None = None,
    base_url: str | None = None,
) -> str:
    """The cache key of ``request``: 32 hex digits.

    ``params`` are the configured generation parameters the request will be sent with (the
    provider's and the model's), ``base_url`` the backend it goes to; both are part of the
    question even though the request does not hold them.

    Raises:
        TypeError: the request holds a value that has no JSON form (in ``extra_body``).
    """
    canonical = {
        "v": KEY_VERSION,
        "model": request.model,
        "fallbacks": request.fallbacks,
        "messages": request.messages,
        "tools": request.tools,
        "tool_choice": request.tool_choice,
        "parallel_tool_calls": request.parallel_tool_calls,
        "response_format": request.response_format,
        "temperature": request.temperature,
        "top_p": request.top_p,
        "max_tokens": request.max_tokens,
        "stop": request.stop,
        "seed": request.seed,
        "extra_body": request.extra_body,
        "tool_options": request.tool_options,
        "params": params or {},
        "base_url": base_url,
    }
    if request.extra_headers:  # a beta header can change the answer; absent, keys stay as they were
        canonical["extra_headers"] = {k.lower(): v for k, v in request.extra_headers.items()}
    text = orjson.dumps(canonical, default=_canonical, option=_OPTIONS)
    return hashlib.blake2b(text, digest_size=16).hexdigest()


def embed_key(request: EmbedRequest, *, model: str, base_url: str | None = None) -> str:
    """The cache key of an embedding ``request`` sent to ``model`` (``provider:model``) at
    ``base_url``: its inputs in order, ``dimensions``, ``encoding_format``, ``extra_body`` and
    fallbacks (a chat request never shares it: the key names its kind). What only changes how
    the call runs is left out, as for :func:`request_key`.

    Raises:
        TypeError: ``extra_body`` holds a value that has no JSON form.
    """
    canonical: dict[str, Any] = {
        "v": KEY_VERSION,
        "kind": "embeddings",
        "model": model,
        "fallbacks": request.fallbacks,
        "input": request.input,
        "dimensions": request.dimensions,
        "encoding_format": request.encoding_format,
        "extra_body": request.extra_body,
        "base_url": base_url,
    }
    if request.extra_headers:
        canonical["extra_headers"] = {k.lower(): v for k, v in request.extra_headers.items()}
    text = orjson.dumps(canonical, default=_canonical, option=_OPTIONS)
    return hashlib.blake2b(text, digest_size=16).hexdigest()
