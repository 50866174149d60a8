"""The public surface is deliberate: which modules are public, what each exports, and that every
type a public signature names can be imported from a public module."""

from __future__ import annotations

import asyncio
import builtins
import collections.abc
import datetime
import importlib
import inspect
import io
import logging
import os
import pathlib
import pkgutil
import random
import re
import types
import typing

import attrs
import httpx
import trio

import sluice

PUBLIC = {
    "sluice": None,  # pinned by tests/test_exports.py
    "sluice.aio": None,  # pinned by tests/test_exports.py
    "sluice.sync": None,  # pinned by tests/test_exports.py
    "sluice.actors": [],
    "sluice.providers": [
        "ENTRY_POINT_GROUP",
        "ModelInfo",
        "PluginProblem",
        "ProviderDefinition",
        "RequestQuirks",
        "installed_plugins",
    ],
    "sluice.simulator": [
        "BatchStats",
        "Directive",
        "Draining",
        "Headers",
        "SimResponse",
        "SimulatedDisconnect",
        "SimulatedReset",
        "SimulatorApp",
        "SimulatorConfig",
        "mock_transport",
        "parse_directive",
        "run_simulator",
        "serve_connection",
        "serve_simulator",
    ],
    # Loads Ray (the ray extra; tests/test_ray.py checks `import sluice` never does).
    "sluice.ray": ["OUTPUT_COLUMNS", "BadRow", "Caller", "Calls", "done_keys", "skip_done"],
    "sluice.stores": [
        "BudgetAsk",
        "BudgetRefused",
        "Cost",
        "Learned",
        "LedgerQuery",
        "LedgerStore",
        "MemoryLedgerStore",
        "MemoryQuotaStore",
        "QuotaStore",
        "RedisLedgerStore",
        "RedisQuotaStore",
        "Reservation",
        "SQLiteLedgerStore",
        "TooLarge",
        "WindowEntry",
        "WindowSpec",
    ],
    "sluice.transport": None,  # checked below against its own __all__
}
"""Every module a user may import; all others have a private (``_``) component."""


def every_module() -> list[str]:
    names = ["sluice"]
    for info in pkgutil.walk_packages(sluice.__path__, "sluice."):
        names.append(info.name)
    return names


def test_every_module_outside_the_public_ones_is_private():
    public = [
        name
        for name in every_module()
        if not any(part.startswith("_") for part in name.split("."))
    ]
    assert sorted(public) == sorted(PUBLIC)


def test_the_public_subpackages_pin_their_names():
    for name, pinned in PUBLIC.items():
        if pinned is None:
            continue
        module = importlib.import_module(name)
        assert sorted(module.__all__) == sorted(pinned), name
        for attr in module.__all__:
            assert getattr(module, attr) is not None, f"{name}.{attr}"


# -- every type a public signature names is public ------------------------------------------

_OUTSIDE = {
    "httpx": httpx,
    "trio": trio,
    "random": random,
    "logging": logging,
    "datetime": datetime,
    "dt": datetime,
    "asyncio": asyncio,
    "os": os,
    "io": io,
    "types": types,
    "Path": pathlib.Path,
    "PathLike": os.PathLike,
    "TracerProvider": typing.Any,  # OpenTelemetry's, optional
    "Dataset": typing.Any,  # Ray Data's (sluice.ray)
    "Tracer": typing.Any,
    "TextIO": typing.TextIO,
    "TracebackType": types.TracebackType,
}


def _public_namespace() -> dict[str, object]:
    space: dict[str, object] = {}
    space.update(vars(builtins))
    space.update({n: getattr(typing, n) for n in typing.__all__})
    space.update({n: getattr(collections.abc, n) for n in collections.abc.__all__})
    space.update(_OUTSIDE)
    for name in PUBLIC:
        module = importlib.import_module(name)
        for attr in module.__all__:
            space[attr] = getattr(module, attr)
    return space


def _annotated(obj: object) -> list[tuple[str, dict[str, object]]]:
    """(owner, raw annotations) of ``obj``'s public callables: a function, or a class's public
    methods and, for a value users build (an attrs record), its ``__init__``. Handles like
    ``Runtime`` or ``CallStream`` are made by sluice: their constructors are not API."""
    found = []
    if inspect.isclass(obj):
        if obj.__module__.startswith("sluice"):
            for attr, member in vars(obj).items():
                if attr.startswith("_") and (attr != "__init__" or not attrs.has(obj)):
                    continue
                wrapped = isinstance(member, classmethod | staticmethod)
                target = member.__func__ if wrapped else member
                target = target.fget if isinstance(target, property) else target
                if inspect.isfunction(target):
                    found.append((f"{obj.__qualname__}.{attr}", dict(target.__annotations__)))
    elif inspect.isfunction(obj) and obj.__module__.startswith("sluice"):
        found.append((obj.__qualname__, dict(obj.__annotations__)))
    return found


# Methods of handles that the actors (or the gateway) call, not users (documented as such where
# they live).
_INTERNAL = {
    "TokenLedgerHandle.__init__",
    "TokenLedgerHandle.record",
    "TokenLedgerHandle.budget_book",
    "ResponseCache.key",
    "ResponseCache.get_embed",
    "Runtime.resolve_provider",
}

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")


def test_every_type_in_a_public_signature_can_be_imported_from_a_public_module():
    space = _public_namespace()
    missing: dict[str, set[str]] = {}
    for name in PUBLIC:
        module = importlib.import_module(name)
        for attr in module.__all__:
            for owner, hints in _annotated(getattr(module, attr)):
                if owner in _INTERNAL:
                    continue
                for annotation in hints.values():
                    if not isinstance(annotation, str):
                        continue  # already a type object: resolved when the module loaded
                    text = _QUOTED.sub("", annotation)  # Literal["a", "b"] names no type
                    for word in _NAME.findall(text):
                        head = word.split(".")[0]
                        if head in space or head in ("None", "True", "False"):
                            continue
                        missing.setdefault(word, set()).add(f"{name}: {owner}")
    assert missing == {}, "\n".join(f"{w}: {sorted(o)[:3]}" for w, o in sorted(missing.items()))
