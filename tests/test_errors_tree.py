"""The error tree drawn in ``sluice._errors``' docstring is the real one: every subclass of
``SluiceError`` that sluice defines, anywhere, under its real parent, and nothing else."""

from __future__ import annotations

import importlib
import pkgutil
import re
from typing import TYPE_CHECKING

import sluice
import sluice._errors
from sluice._errors import SluiceError

if TYPE_CHECKING:
    from types import ModuleType

_NAME = re.compile(r"[A-Z]\w+")


def _drawn() -> dict[str, str | None]:
    """Each class named in the docstring's tree, with the class it is drawn under: the root
    is the block's first line, every other node follows a ``── `` marker, and a node's parent
    is the nearest node above it whose marker sits further left."""
    doc = sluice._errors.__doc__ or ""
    block = doc.split("::", 1)[1].strip("\n").split("\n\n")[0].splitlines()
    root = block[0].strip()
    parents: dict[str, str | None] = {root: None}
    stack: list[tuple[int, str]] = [(-1, root)]
    for line in block[1:]:
        column = line.find("── ")
        if column < 0:
            continue  # a description's second line
        found = _NAME.match(line, column + 3)
        assert found is not None, line
        while stack[-1][0] >= column:
            stack.pop()
        parents[found.group()] = stack[-1][1]
        stack.append((column, found.group()))
    return parents


def _all_modules() -> list[ModuleType]:
    """Every module of sluice, imported (but those needing an optional package not installed)."""
    loaded = []
    for module in pkgutil.walk_packages(sluice.__path__, "sluice."):
        try:
            loaded.append(importlib.import_module(module.name))
        except ModuleNotFoundError as exc:
            if exc.name is None or exc.name.startswith("sluice"):
                raise
    return loaded


def _defined() -> dict[str, str | None]:
    """Every subclass of SluiceError in every sluice module, with its parent class."""
    _all_modules()
    found: dict[str, str | None] = {"SluiceError": None}
    todo = [SluiceError]
    while todo:
        cls = todo.pop()
        for sub in cls.__subclasses__():
            if sub.__module__.startswith("sluice."):
                found[sub.__name__] = cls.__name__
                todo.append(sub)
    return found


def test_the_drawn_error_tree_is_the_class_tree() -> None:
    drawn = _drawn()
    assert "ToolCallError" in drawn and drawn["KeyStoreError"] == "ConfigError"
    assert drawn == _defined()


def test_no_two_sluice_exceptions_share_a_name() -> None:
    names: dict[str, list[str]] = {}
    for module in _all_modules():
        for name, value in vars(module).items():
            if (
                isinstance(value, type)
                and issubclass(value, Exception)
                and value.__module__ == module.__name__
                and not name.startswith("_")
            ):
                names.setdefault(name, []).append(module.__name__)
    assert {name: where for name, where in names.items() if len(where) > 1} == {}
