"""Provider plugins: packages that add providers through the ``sluice.providers`` entry points.

A plugin package declares, in its ``pyproject.toml``::

    [project.entry-points."sluice.providers"]
    acme = "acme_sluice:providers"

where ``providers`` is a function taking no arguments (or a plain value) that gives one
:class:`~sluice.providers._definition.ProviderDefinition`, or an iterable of them; a mapping with
the same keys works too (``{"id": "acme", "display_name": "Acme", "base_url": "..."}``).

A plugin that fails to import, raises, or returns something else is reported (a warning in the
log, a line in ``sluice providers list``) and skipped; it never stops the runtime. A plugin may
not replace a builtin provider, nor a provider of a plugin loaded before it.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Collection, Iterable, Mapping
from importlib.metadata import EntryPoint, entry_points
from typing import Any

import attrs

from .._serde import format_validation_error, get_converter
from ._definition import ProviderDefinition

__all__ = ["ENTRY_POINT_GROUP", "PluginProblem", "PluginProviders", "installed_plugins", "load"]

ENTRY_POINT_GROUP = "sluice.providers"

_log = logging.getLogger("sluice.providers._plugins")


@attrs.frozen
class PluginProblem:
    """A plugin that could not be used, and why."""

    plugin: str
    """The entry point, ``name = module:attr``."""
    message: str

    def __str__(self) -> str:
        return f"provider plugin {self.plugin}: {self.message}"


@attrs.frozen
class PluginProviders:
    """The providers the plugins gave, by id, and the plugins that failed."""

    definitions: Mapping[str, ProviderDefinition] = attrs.field(factory=dict)
    sources: Mapping[str, str] = attrs.field(factory=dict)
    """Provider id -> the entry point that gave it."""
    problems: tuple[PluginProblem, ...] = ()


def load(points: Iterable[EntryPoint], *, reserved: Collection[str] = ()) -> PluginProviders:
    """Load every entry point in ``points``; ids in ``reserved`` (the builtins) are refused."""
    definitions: dict[str, ProviderDefinition] = {}
    sources: dict[str, str] = {}
    problems: list[PluginProblem] = []
    for point in points:
        label = f"{point.name} = {point.value}"
        try:
            found = _definitions(point)
        except Exception as exc:  # a plugin's bug must not take the runtime down
            problems.append(PluginProblem(label, _describe(exc)))
            continue
        for definition in found:
            if definition.id in reserved:
                problems.append(
                    PluginProblem(label, f"provider {definition.id!r} is a builtin; not replaced")
                )
            elif definition.id in definitions:
                problems.append(
                    PluginProblem(
                        label,
                        f"provider {definition.id!r} is already given by {sources[definition.id]}",
                    )
                )
            else:
                definitions[definition.id] = definition
                sources[definition.id] = label
    for problem in problems:
        _log.warning("%s", problem)
    return PluginProviders(definitions, sources, tuple(problems))


def _definitions(point: EntryPoint) -> list[ProviderDefinition]:
    value = point.load()
    if callable(value) and not isinstance(value, ProviderDefinition):
        value = value()
    items: Iterable[Any] = (
        [value] if isinstance(value, ProviderDefinition | Mapping) else _iterable(value)
    )
    out = []
    for item in items:
        if isinstance(item, ProviderDefinition):
            out.append(item)
        elif isinstance(item, Mapping):
            out.append(_structure(item))
        else:
            raise TypeError(f"gave a {type(item).__name__}, not a ProviderDefinition or a mapping")
    return out


def _iterable(value: Any) -> Iterable[Any]:
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise TypeError(
            f"gave a {type(value).__name__}, not provider definitions (a ProviderDefinition, "
            "a mapping, or an iterable of them)"
        )
    return value


def _structure(item: Mapping[str, Any]) -> ProviderDefinition:
    try:
        definition: ProviderDefinition = get_converter().structure(dict(item), ProviderDefinition)
    except Exception as exc:
        raise ValueError(f"invalid provider definition: {format_validation_error(exc)}") from None
    return definition


def _describe(exc: Exception) -> str:
    text = str(exc) or "no message"
    return f"{type(exc).__name__}: {text}"


@functools.cache
def installed_plugins(reserved: frozenset[str] = frozenset()) -> PluginProviders:
    """The plugins of the installed packages, loaded once per process."""
    return load(entry_points(group=ENTRY_POINT_GROUP), reserved=reserved)
