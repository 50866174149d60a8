"""No module reaches into another module's private (``_name``) attributes or names.

A door, a job or the gateway that reads ``rt._environ`` or calls ``inner._next_batch`` breaks the
day the runtime changes its insides; what they need is a public method, or one documented as
internal ("for the doors", "for the load tester"). This scans the source outside ``tests/``:
an attribute access ``obj._name`` (not on ``self`` or ``cls``) is a reach-in when ``_name`` is
defined by some module of ours but not by the module that reads it, and so is importing a
private function, class or value of another module. Names only, no types: a module that
defines a ``_name`` of its own and also reads another's is not caught, and names of other
libraries' objects (cattrs' converter, a named tuple's ``_fields``) are not ours. Private
modules (``sluice._runtime``) are how the package is laid out, not reach-ins.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("runtime", "actors", "benchmarks")

_PARSERS = (
    "the OpenAI parsers still live in sluice._messages, which shares these helpers with them; "
    "#31 moves the parsers to a module of their own (another item of the issue)"
)
ALLOWED: dict[tuple[str, str], str] = {
    ("runtime/_openai_format.py", name): _PARSERS
    for name in ("_expect_dict", "_expect_list", "_expect_str", "_fail", "_integer", "_number")
}
"""(path, private name) -> why that use must stay for now."""


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def scan(tree: ast.AST) -> tuple[set[str], set[str], list[ast.Attribute | ast.alias]]:
    """The private names a module defines (functions, classes, names and attributes it
    assigns such as ``self._x = ...`` or attrs fields, ``__slots__`` entries), those it
    imports, and its uses of private names from elsewhere: attribute reads on anything but
    ``self`` and ``cls`` (its own, or a base class's it builds on), and imported names."""
    names: set[str] = set()
    imported: set[str] = set()
    uses: list[ast.Attribute | ast.alias] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            if isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif _private(node.attr) and not (
                isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")
            ):
                uses.append(node)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                imported.add(alias.asname or alias.name)
                if _private(alias.name):
                    uses.append(alias)
        elif isinstance(node, ast.Import):
            imported.update(alias.asname or alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.add(node.value)  # __slots__, getattr/setattr by name
    return {n for n in names if _private(n)}, {n for n in imported if _private(n)}, uses


def reach_ins(modules: dict[str, str]) -> list[tuple[str, int, str]]:
    """(module, line, what) of every use of another module's private name among ``modules``
    (name -> source): ``obj._name`` where ``_name`` is defined by another module and not by
    this one, and ``from ... import _name`` of a private function, class or value (a private
    module, such as ``from . import _plugins``, is a module, not a name)."""
    scanned = {name: scan(ast.parse(source)) for name, source in modules.items()}
    ours = set().union(*(defined for defined, _, _ in scanned.values()))
    found = []
    for name, (defined, imported, uses) in scanned.items():
        for use in uses:
            if isinstance(use, ast.alias):
                if use.name in ours and use.name not in defined:
                    found.append((name, use.lineno, f"import {use.name}"))
            elif use.attr in ours and use.attr not in defined | imported:
                found.append((name, use.lineno, ast.unparse(use)))
    return found


def _name(what: str) -> str:
    return what.rsplit(".", 1)[-1].removeprefix("import ")


def test_no_module_outside_the_tests_uses_another_modules_private_names() -> None:
    modules = {
        str(path.relative_to(ROOT)): path.read_text(encoding="utf-8")
        for source in SOURCES
        for path in sorted((ROOT / source).rglob("*.py"))
    }
    assert len(modules) > 150  # the scan found the source
    found = {
        (path, _name(what)): f"{path}:{line}: {what}" for path, line, what in reach_ins(modules)
    }
    reached = [text for key, text in sorted(found.items()) if key not in ALLOWED]
    assert reached == [], "use a public or documented-internal name instead:\n" + "\n".join(reached)
    assert sorted(set(ALLOWED) - set(found)) == [], "no longer needed: remove from ALLOWED"


def test_the_scan_finds_a_reach_in_and_spares_a_subclass() -> None:
    runtime = """
class Runtime:
    def __init__(self):
        self._environ = {}
        self.config = None
"""
    gateway = """
class Base(Runtime):
    def own(self):
        return self._environ
def resolve(rt):
    return rt._environ, rt.config, rt.__class__
"""
    door = """
from . import _plugins
from .runtime import Runtime, _helper
"""
    runtime += "def _helper(): pass\n"
    assert reach_ins({"runtime.py": runtime, "gateway.py": gateway, "door.py": door}) == [
        ("gateway.py", 6, "rt._environ"),
        ("door.py", 3, "import _helper"),
    ]
