"""The test suite's own shape: test modules share helpers through ``tests/helpers.py`` and
``conftest.py``, never by importing each other (so each module reads, and runs, on its own)."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def _imported_test_modules(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            names = [node.module or ""] + [a.name for a in node.names if not node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        found += [n for n in names if n.rpartition(".")[2].startswith("test_")]
    return found


def test_no_test_module_imports_another() -> None:
    offenders = {
        path.name: imported
        for path in sorted(TESTS.glob("*.py"))
        if (imported := _imported_test_modules(path))
    }
    assert offenders == {}
