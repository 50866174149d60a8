"""The README's first command, ``make demo``, works and can be run again at any time."""

from __future__ import annotations

import shlex
from pathlib import Path

import orjson

from sluice._cli import main

ROOT = Path(__file__).resolve().parent.parent


def demo_argv(output: Path) -> list[str]:
    """The demo recipe's ``sluice`` arguments from the Makefile, writing to ``output``."""
    lines = (ROOT / "Makefile").read_text().splitlines()
    start = lines.index("demo: $(STAMP)")
    recipe = lines[start + 1].strip()
    words = shlex.split(recipe)
    assert words[0] == "$(BIN)/sluice", recipe
    argv = words[1:]
    argv[argv.index("-o") + 1] = str(output)
    return [str(ROOT / word) if word.startswith("examples/") else word for word in argv]


def test_the_demo_runs_twice_and_writes_one_line_per_input_each_time(tmp_path, monkeypatch):
    monkeypatch.delenv("SLUICE_CONFIG", raising=False)
    output = tmp_path / "demo_results.jsonl"
    inputs = (ROOT / "examples" / "demo_batch.jsonl").read_text().splitlines()
    for _ in range(2):
        assert main(demo_argv(output)) == 0
        lines = output.read_text().splitlines()
        assert len(lines) == len(inputs) == 120
        assert all(orjson.loads(line).get("error") is None for line in lines)
