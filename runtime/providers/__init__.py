"""Providers: the registry of backends sluice knows, and the extension point for plugins.

A plugin package adds providers through the ``sluice.providers`` entry-point group: a function
(or a plain value) giving :class:`ProviderDefinition` values, or mappings of their fields.
:func:`installed_plugins` reports what the installed plugins give and what is wrong with them.
The registry's internals (builtins, resolution, key store, operations) are private modules.

The plugin names load on first use: the entry-point machinery (``importlib.metadata``, which
brings ``email``, ``zipfile`` and ``csv``) is not something a call to a builtin or configured
provider needs, so ``import sluice`` leaves it out.
"""

from __future__ import annotations

import importlib as _importlib
from typing import TYPE_CHECKING, Any

from .._protocols.quirks import RequestQuirks as RequestQuirks
from ._definition import ModelInfo as ModelInfo
from ._definition import ProviderDefinition as ProviderDefinition

if TYPE_CHECKING:
    from ._plugins import ENTRY_POINT_GROUP as ENTRY_POINT_GROUP
    from ._plugins import PluginProblem as PluginProblem
    from ._plugins import installed_plugins as installed_plugins

_FROM_PLUGINS = frozenset({"ENTRY_POINT_GROUP", "PluginProblem", "installed_plugins"})


def __getattr__(name: str) -> Any:
    if name not in _FROM_PLUGINS:
        raise AttributeError(f"module 'sluice.providers' has no attribute {name!r}")
    value = getattr(_importlib.import_module("sluice.providers._plugins"), name)
    globals()[name] = value
    return value


__all__ = [
    "ENTRY_POINT_GROUP",
    "ModelInfo",
    "PluginProblem",
    "ProviderDefinition",
    "RequestQuirks",
    "installed_plugins",
]
