"""What ``GET /v1/models`` lists, and the bodies of its answers in both client formats.

The catalog names every model a client can call through the gateway: the aliases, the model
groups of the config, the models configured under each provider (as ``provider:model``) and,
with a default provider, that provider's models by their bare names, as its server lists them
(discovered at most once per :data:`DISCOVERY_TTL`, so listing stays cheap) together with the
models sluice knows for it. A failed discovery is logged and leaves the last good list in place:
``/v1/models`` never fails because an upstream is down.
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Any, Final

import attrs
import trio

from .._errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from .._runtime import Runtime

__all__ = ["DISCOVERY_TTL", "ModelCatalog", "ModelEntry", "render_list", "render_model"]

DISCOVERY_TTL: Final = 300.0
"""Seconds a default provider's discovered model list is used before it is asked again."""
DISCOVERY_WAIT: Final = 5.0
"""Seconds the provider has to answer its list-models request."""
_GROUP_OWNER: Final = "sluice"

_log = logging.getLogger("sluice.gateway")


@attrs.frozen
class ModelEntry:
    """One listed model: the name a client calls it by, and who serves it."""

    id: str
    owned_by: str


class ModelCatalog:
    """The models a gateway lists. State: the default provider's last discovered list."""

    def __init__(self, rt: Runtime, aliases: Mapping[str, str], default_provider: str | None):
        self._rt = rt
        self._aliases = aliases
        self._default = default_provider
        self._discovered: tuple[str, ...] = ()
        self._discovered_at = -math.inf
        self._lock = trio.Lock()

    async def entries(self) -> dict[str, ModelEntry]:
        """Every listed model by id (configured names first; a discovered bare name that
        repeats one is listed once)."""
        config = self._rt.config
        found: dict[str, ModelEntry] = {}
        for name, target in self._aliases.items():
            found[name] = ModelEntry(name, target.partition(":")[0] if ":" in target else name)
        for name in config.groups:
            found.setdefault(name, ModelEntry(name, _GROUP_OWNER))
        for provider, settings in config.providers.items():
            for model in settings.models:
                full = f"{provider}:{model}"
                found.setdefault(full, ModelEntry(full, provider))
        if self._default is not None:
            for model in await self._default_models(self._default):
                found.setdefault(model, ModelEntry(model, self._default))
        return found

    async def _default_models(self, provider: str) -> tuple[str, ...]:
        now = trio.current_time()
        if now < self._discovered_at + DISCOVERY_TTL:
            return self._discovered
        async with self._lock:  # one discovery at a time; the others use its answer
            if trio.current_time() < self._discovered_at + DISCOVERY_TTL:
                return self._discovered
            self._discovered = await self._discover(provider)
            self._discovered_at = trio.current_time()
        return self._discovered

    async def _discover(self, provider: str) -> tuple[str, ...]:
        """The provider's known models and what its server lists (the last good list when
        the server cannot be asked or fails to answer)."""
        from ..providers._operations import OperationFailed, list_models, open_transport

        rt = self._rt
        try:
            spec = rt.resolve_provider(provider)
        except ConfigError as exc:
            _log.warning("cannot list the models of the default provider %s: %s", provider, exc)
            return self._discovered
        known = [m.id for m in spec.models]
        given = rt.transport
        if not spec.lists_models or spec.base_url is None or given is not None:
            # No list to ask for (a coding plan, the in-process simulator), or a transport
            # given to the runtime that only its calls know how to drive.
            return _unique(known)
        transport = open_transport(spec)
        try:
            listed = await list_models(spec, transport, answer_within=DISCOVERY_WAIT)
        except OperationFailed as exc:
            _log.warning("cannot list the models of the default provider %s: %s", provider, exc)
            return _unique([*known, *self._discovered])
        finally:
            await transport.aclose()
        return _unique([*(m.id for m in listed), *known])


def _unique(names: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(names))


def _openai_model(entry: ModelEntry) -> dict[str, Any]:
    return {"id": entry.id, "object": "model", "created": 0, "owned_by": entry.owned_by}


def _anthropic_model(entry: ModelEntry) -> dict[str, Any]:
    return {
        "type": "model",
        "id": entry.id,
        "display_name": entry.id,
        "created_at": "1970-01-01T00:00:00Z",
    }


def render_list(wire: str, entries: list[ModelEntry]) -> dict[str, Any]:
    """The ``GET /v1/models`` body in ``wire``'s format (``openai`` or ``anthropic``)."""
    if wire == "anthropic":
        return {
            "data": [_anthropic_model(e) for e in entries],
            "has_more": False,
            "first_id": entries[0].id if entries else None,
            "last_id": entries[-1].id if entries else None,
        }
    return {"object": "list", "data": [_openai_model(e) for e in entries]}


def render_model(wire: str, entry: ModelEntry) -> dict[str, Any]:
    """The ``GET /v1/models/{id}`` body in ``wire``'s format."""
    return _anthropic_model(entry) if wire == "anthropic" else _openai_model(entry)
