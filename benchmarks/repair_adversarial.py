"""How long JSON repair takes on adversarial input, at full size (the unit test counts work).

    python -m benchmarks.repair_adversarial
    python -m benchmarks.repair_adversarial --size 300000 --runs 5

Builds each input of the ``ADVERSARIAL`` table (the unit test's) at ``--size``
characters, then times ``repair_json`` plus ``parse_partial`` on it (the best of ``--runs``).
Prints one JSON line: seconds per input. The goal is well under a second each at 300 kB
(json-repair took a second on the unclosed string alone); the test suite holds the linear
growth that makes this true, without a clock.
"""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING

import orjson

from sluice._tools.repair import RepairError, parse_partial, repair_json

if TYPE_CHECKING:
    from collections.abc import Callable

ADVERSARIAL: dict[str, Callable[[int], str]] = {
    "deep nesting": lambda n: "[" * n,
    "unclosed string": lambda n: '{"a": "' + "x" * n,
    "backslashes": lambda n: '"' + "\\" * n,
    "keys without values": lambda n: "{" + ",".join(f'"k{i}"' for i in range(n // 6)),
    "numbers without commas": lambda n: "[" + "1 " * (n // 3),
    "unclosed nesting": lambda n: '{"a": [1, {"b": "c"' * (n // 1600),
    "quotes inside a string": lambda n: '"he said "' * (n // 6),
    "comment openers": lambda n: "/*" * (n // 3),
    "bare words": lambda n: "{a:" * 150 + "x" * n,
}
"""The table of ``tests/test_tools_repair.py`` (kept in step by hand)."""


def _once(text: str) -> float:
    started = time.perf_counter()
    try:
        repair_json(text)
    except RepairError:
        pass
    parse_partial(text)
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=300_000, help="characters per input")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    seconds: dict[str, float] = {}
    for name, build in ADVERSARIAL.items():
        text = build(args.size)
        seconds[name] = round(min(_once(text) for _ in range(args.runs)), 4)
    print(orjson.dumps({"size": args.size, "seconds": seconds}).decode())


if __name__ == "__main__":
    main()
