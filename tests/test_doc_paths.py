"""Every file the README and the docs point a reader to exists: a module renamed or moved
(``runtime/mail.py`` became ``runtime/_mail.py``) must take its mentions along."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted([ROOT / "README.md", ROOT / "benchmarks" / "README.md", *ROOT.glob("docs/*.md")])
TOP = ("runtime", "actors", "tests", "benchmarks", "docs", "examples")
_PATH = re.compile(r"(?<![\w./-])((?:" + "|".join(TOP) + r")/[\w./*-]*)")
"""A path from the top of the repository: ``runtime/_mail.py``, ``tests/``, ``docs/x.md``."""
_MODULE = re.compile(r"(?<![\w./-])(\w+\.py)\b")
"""A file named on its own, as in the README's layout: ``_runtime.py``."""


def mentioned_paths(text: str) -> set[str]:
    return {m.rstrip(".,;:") for m in _PATH.findall(text)}


def _exists(path: str) -> bool:
    if "*" in path:  # a pattern such as tests/test_gateway_*.py: something must match it
        return any(ROOT.glob(path))
    return (ROOT / path).exists()


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_path_a_document_mentions_exists(doc: Path) -> None:
    missing = sorted(p for p in mentioned_paths(doc.read_text()) if not _exists(p))
    assert missing == [], f"{doc.name} names files that do not exist: {missing}"


@pytest.mark.parametrize("doc", [ROOT / "README.md", *ROOT.glob("docs/*.md")], ids=lambda p: p.name)
def test_every_python_file_a_document_names_exists_somewhere(doc: Path) -> None:
    # (Not benchmarks/README.md: it cites other projects' files, such as httpcore's.)
    known = {p.name for top in TOP for p in (ROOT / top).rglob("*.py")}
    missing = sorted(set(_MODULE.findall(doc.read_text())) - known)
    assert missing == [], f"{doc.name} names Python files that do not exist: {missing}"


def test_the_check_sees_a_stale_path() -> None:
    text = "the restarter (`actors/restart.py`) and `runtime/_mail.py`, see tests/."
    assert mentioned_paths(text) == {"actors/restart.py", "runtime/_mail.py", "tests/"}
    assert not _exists("actors/restart.py") and _exists("runtime/_mail.py")
