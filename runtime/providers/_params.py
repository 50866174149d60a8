"""Generation parameters: merged provider -> model -> call, then mapped to a protocol.

Parameters are written with sluice's names where sluice has one: the :class:`ChatRequest`
fields ``temperature``, ``top_p``, ``max_tokens``, ``seed`` and ``stop``, plus ``top_k``,
``frequency_penalty`` and ``presence_penalty``, which each protocol spells its own way. Any
other name is a field of the protocol's request body and is sent as it is (``reasoning_effort``,
``thinking``, ``options``, ``generationConfig``...).

Merging (:func:`merge_params`): later layers win; where both layers hold a mapping for the same
name the mappings merge recursively; anything else (lists included) is replaced, and a None
replaces too. Everything here is pure.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

import attrs

if TYPE_CHECKING:
    from .._messages import ChatRequest

__all__ = ["REQUEST_FIELDS", "apply_params", "map_params", "merge_params"]

_log = logging.getLogger("sluice.providers._params")

REQUEST_FIELDS: Final = ("temperature", "top_p", "max_tokens", "seed", "stop")
"""Parameters that are :class:`ChatRequest` fields; each codec already sends them its way."""

_NATIVE: Final[Mapping[str, Mapping[str, tuple[str, ...] | None]]] = {
    "openai": {},
    "openai-responses": {
        "frequency_penalty": None,
        "presence_penalty": None,
        "seed": None,
        "reasoning_effort": ("reasoning", "effort"),
    },
    "anthropic": {"frequency_penalty": None, "presence_penalty": None, "seed": None},
    "gemini": {
        "top_k": ("generationConfig", "topK"),
        "frequency_penalty": ("generationConfig", "frequencyPenalty"),
        "presence_penalty": ("generationConfig", "presencePenalty"),
    },
    "ollama": {
        "top_k": ("options", "top_k"),
        "frequency_penalty": ("options", "frequency_penalty"),
        "presence_penalty": ("options", "presence_penalty"),
    },
}
"""Per protocol: where a sluice name goes in the body (a path), or None when the protocol has
no such parameter. Names not listed are sent at the top level under their own name."""


def merge_params(*layers: Mapping[str, Any] | None) -> dict[str, Any]:
    """Merge parameter layers, later ones winning (see the module docstring); a fresh dict."""
    merged: dict[str, Any] = {}
    for layer in layers:
        if layer:
            _merge_into(merged, layer)
    return merged


def _merge_into(target: dict[str, Any], layer: Mapping[str, Any]) -> None:
    for key, value in layer.items():
        current = target.get(key)
        if isinstance(value, Mapping) and isinstance(current, dict):
            _merge_into(current, value)
        elif isinstance(value, Mapping):
            target[key] = merge_params(value)
        else:
            target[key] = value


def map_params(
    params: Mapping[str, Any], protocol: str, *, drop: frozenset[str] = frozenset()
) -> dict[str, Any]:
    """``params`` (without the :data:`REQUEST_FIELDS`) as body fields of ``protocol``.

    A parameter in ``drop`` (the provider rejects it) or one the protocol does not have is left
    out, with a debug log.
    """
    table = _NATIVE.get(protocol, {})
    body: dict[str, Any] = {}
    for name, value in params.items():
        if name in drop:
            _log.debug("parameter %s dropped: the provider rejects it", name)
            continue
        if name not in table:
            _put(body, (name,), value)
            continue
        path = table[name]
        if path is None:
            _log.debug("parameter %s dropped: the %s protocol has none", name, protocol)
        else:
            _put(body, path, value)
    return body


def _put(body: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    node = body
    for part in path[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    current = node.get(path[-1])
    if isinstance(value, Mapping) and isinstance(current, dict):
        _merge_into(current, value)
    else:
        node[path[-1]] = dict(value) if isinstance(value, Mapping) else value


def apply_params(
    request: ChatRequest,
    protocol: str,
    *,
    provider: Mapping[str, Any] | None = None,
    model: Mapping[str, Any] | None = None,
    drop: frozenset[str] = frozenset(),
) -> ChatRequest:
    """``request`` with the provider's and the model's parameters applied beneath its own.

    The merged layers fill the request fields the call left unset; the rest is mapped to
    ``protocol`` (:func:`map_params`) and merged beneath the call's ``extra_body``. Parameters
    in ``drop`` are removed from every layer, the call's included, with a debug log. Returns
    ``request`` itself when nothing changes.
    """
    layered = merge_params(provider, model)
    changes: dict[str, Any] = {}
    for name in REQUEST_FIELDS:
        if name in drop:
            if not _unset(getattr(request, name)):
                _log.debug("parameter %s dropped: the provider rejects it", name)
                changes[name] = () if name == "stop" else None
            layered.pop(name, None)
            continue
        if name in layered:
            value = layered.pop(name)
            if _unset(getattr(request, name)):
                changes[name] = () if value is None and name == "stop" else value
    extra = map_params(layered, protocol, drop=drop)
    own = {k: v for k, v in request.extra_body.items() if k not in drop}
    if len(own) != len(request.extra_body):
        _log.debug("extra_body fields dropped: the provider rejects them")
    if extra or len(own) != len(request.extra_body):
        changes["extra_body"] = merge_params(extra, own)
    return attrs.evolve(request, **changes) if changes else request


def _unset(value: Any) -> bool:
    return value is None or value == ()
