"""Providers: the registry of backends sluice knows, and the extension point for plugins.

A plugin package adds providers through the ``sluice.providers`` entry-point group: a function
(or a plain value) giving :class:`ProviderDefinition` values, or mappings of their fields.
:func:`installed_plugins` reports what the installed plugins give and what is wrong with them.
The registry's internals (builtins, resolution, key store, operations) are private modules.
"""

from __future__ import annotations

from .._protocols.quirks import RequestQuirks as RequestQuirks
from ._definition import ModelInfo as ModelInfo
from ._definition import ProviderDefinition as ProviderDefinition
from ._plugins import ENTRY_POINT_GROUP as ENTRY_POINT_GROUP
from ._plugins import PluginProblem as PluginProblem
from ._plugins import installed_plugins as installed_plugins

__all__ = [
    "ENTRY_POINT_GROUP",
    "ModelInfo",
    "PluginProblem",
    "ProviderDefinition",
    "RequestQuirks",
    "installed_plugins",
]
