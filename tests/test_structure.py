"""Small modules and short functions: no module of ``runtime/`` or ``actors/`` over 700 lines, no
function over 80 (from its ``def`` to its last line, docstring included); and no module that
reads another module's private (``_``-prefixed) names.

An exception would be listed below with why it is still long; since #31 there is none. A new
long function or module (or private reach) fails here, and an entry whose file got short again
fails too (a stale entry), so the lists only shrink.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("runtime", "actors")
MAX_MODULE_LINES = 700
MAX_FUNCTION_LINES = 80

LONG_MODULES: set[str] = set()

LONG_FUNCTIONS: set[str] = set()


@functools.cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def _python_files() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def _name(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _long_functions(path: Path) -> dict[str, int]:
    found = {}
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            if lines > MAX_FUNCTION_LINES:
                found[f"{_name(path)}:{node.name}"] = lines
    return found


def test_no_module_is_over_700_lines():
    long = {
        _name(p): n
        for p in _python_files()
        if (n := p.read_text(encoding="utf-8").count("\n")) > MAX_MODULE_LINES
    }
    assert sorted(set(long) - LONG_MODULES) == [], long
    assert sorted(LONG_MODULES - set(long)) == [], "short now: take it off LONG_MODULES"


def test_no_function_is_over_80_lines():
    long: dict[str, int] = {}
    for path in _python_files():
        long.update(_long_functions(path))
    assert sorted(set(long) - LONG_FUNCTIONS) == [], long
    assert sorted(LONG_FUNCTIONS - set(long)) == [], "short now: take it off LONG_FUNCTIONS"


# ---- no reaching into another module's private names --------------------------------------

_NAMEDTUPLE_API = frozenset({"_fields", "_replace", "_asdict", "_make"})
"""Public methods of every namedtuple, underscored only to keep clear of field names."""

FOREIGN_PRIVATE = {
    # cattrs' own structure hooks for sets: it offers no public name for them, and the
    # converter's set handling is what the wrapper must keep.
    "runtime/_serde.py:converter._structure_frozenset",
    "runtime/_serde.py:converter._structure_set",
}


def _defined_names(tree: ast.AST) -> set[str]:
    """Every name a module defines or assigns (functions, classes, attributes, variables):
    an underscored name used on an object of the module's own class is the module's own."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Attribute | ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.attr if isinstance(node, ast.Attribute) else node.id)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.add(node.value)  # __slots__ entries and attrs' private field names
    return names


def _is_module(path: Path, level: int, module: str | None, name: str) -> bool:
    folder = path.parent
    for _ in range(level - 1):
        folder = folder.parent
    if module:
        folder = folder.joinpath(*module.split("."))
    return (folder / f"{name}.py").exists() or (folder / name).is_dir()


def _foreign_private(path: Path) -> set[str]:
    tree = _tree(path)
    own = _defined_names(tree)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            name, base = node.attr, ast.unparse(node.value)
            if not name.startswith("_") or name.startswith("__") or base in ("self", "cls"):
                continue
            if name not in own and name not in _NAMEDTUPLE_API:
                found.add(f"{_name(path)}:{base}.{name}")
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                name = alias.name
                if not name.startswith("_") or name.startswith("__"):
                    continue
                if not _is_module(path, node.level, node.module, name):  # a private module is fine
                    found.add(f"{_name(path)}:from {'.' * node.level}{node.module} import {name}")
    return found


def test_no_module_reaches_into_another_modules_private_names():
    found: set[str] = set()
    for path in _python_files():
        found |= _foreign_private(path)
    assert sorted(found - FOREIGN_PRIVATE) == []
    assert sorted(FOREIGN_PRIVATE - found) == [], "fixed now: take it off FOREIGN_PRIVATE"
