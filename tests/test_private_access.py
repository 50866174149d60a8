"""No module reaches into another module's private (``_name``) attributes.

A door, a job or the gateway that reads ``rt._environ`` or calls ``inner._next_batch`` breaks the
day the runtime changes its insides; what they need is a public method, or one documented as
internal ("for the doors", "for the load tester"). This scans the source outside ``tests/``:
an attribute access ``obj._name`` (not on ``self`` or ``cls``) is a reach-in when ``_name`` is
defined by some module of ours but not by the module that reads it. Names only, no types: a
module that defines a ``_name`` of its own and also reads another's is not caught, and names
of other libraries' objects (cattrs' converter, a named tuple's ``_fields``) are not ours.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("runtime", "actors", "benchmarks")

ALLOWED: dict[tuple[str, str], str] = {}
"""(path, attribute) -> why that reach-in must stay. Empty: none has to."""


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def scan(tree: ast.AST) -> tuple[set[str], list[ast.Attribute]]:
    """The private names a module defines (functions, classes, names and attributes it
    assigns such as ``self._x = ...`` or attrs fields, ``__slots__`` entries, import aliases),
    and its reads of private attributes on anything but ``self`` and ``cls`` (its own, or a
    base class's it builds on)."""
    names: set[str] = set()
    reads: list[ast.Attribute] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            if isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif _private(node.attr) and not (
                isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")
            ):
                reads.append(node)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.alias):
            names.add(node.asname or node.name.split(".")[-1])
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.add(node.value)  # __slots__, getattr/setattr by name
    return {name for name in names if _private(name)}, reads


def reach_ins(modules: dict[str, str]) -> list[tuple[str, int, str]]:
    """(module, line, expression) of every access to another module's private attribute
    among ``modules`` (name -> source)."""
    scanned = {name: scan(ast.parse(source)) for name, source in modules.items()}
    ours = set().union(*(own for own, _ in scanned.values()))
    return [
        (name, node.lineno, ast.unparse(node))
        for name, (own, reads) in scanned.items()
        for node in reads
        if node.attr in ours and node.attr not in own
    ]


def test_no_module_outside_the_tests_reads_another_modules_private_attributes() -> None:
    modules = {
        str(path.relative_to(ROOT)): path.read_text(encoding="utf-8")
        for source in SOURCES
        for path in sorted((ROOT / source).rglob("*.py"))
    }
    assert len(modules) > 150  # the scan found the source
    found = [
        f"{path}:{line}: {expression}"
        for path, line, expression in reach_ins(modules)
        if (path, expression.rsplit(".", 1)[1]) not in ALLOWED
    ]
    assert found == [], "use a public or documented-internal method instead:\n" + "\n".join(found)


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
    assert reach_ins({"runtime.py": runtime, "gateway.py": gateway}) == [
        ("gateway.py", 6, "rt._environ")
    ]
