"""Summarise a ``py-spy record -f raw`` profile: where does the client CPU go, by package?

    py-spy record -r 250 --nonblocking -f raw -o sluice.raw -- \\
        python -m benchmarks.overhead --base-url http://127.0.0.1:18080 --only sluice
    python -m benchmarks.prof_summary sluice.raw --rate 250 --calls 6128 [--top 15]

Each sample is charged to its leaf frame's package: ``sluice`` (``runtime/``, ``actors/``),
``httpx``, ``httpcore``, ``h11``, ``trio`` (with ``outcome`` and ``sniffio``) and the benchmark
itself. A leaf in the standard library or in attrs-generated code (``contextlib``, ``http``,
``urllib``, ...) is charged to the nearest caller that belongs to one of those packages, so
``contextlib.__exit__`` under httpcore's ``map_exceptions`` counts as httpcore. C code
(orjson, ``recv``/``send``, ``epoll``) is charged to the Python line that calls it: trio's
``_nonblocking_helper`` line is the socket syscalls. Only on-CPU samples are recorded by
py-spy without ``--idle``. With ``--calls`` (warm-up plus measured calls of the profiled side)
and ``--rate`` each share is also given in CPU microseconds per call; the profile includes
interpreter start-up and imports (about 0.1 ms per call over 6,000 calls).
"""

from __future__ import annotations

import argparse
import collections
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator

_ATTRS = re.compile(r"<attrs generated methods ([\w.]+)>")
_KNOWN = {
    "runtime": "sluice",
    "actors": "sluice",
    "sluice": "sluice",
    "httpx": "httpx",
    "httpcore": "httpcore",
    "h11": "h11",
    "trio": "trio",
    "outcome": "trio",
    "sniffio": "trio",
    "benchmarks": "benchmark harness",
    "attr": "attrs/cattrs",
    "cattrs": "attrs/cattrs",
    "orjson": "orjson",
}


def frame_package(frame: str) -> str | None:
    """The package a frame belongs to, or None for stdlib and unknown code."""
    if "(" not in frame:
        return None
    location = frame.rsplit("(", 1)[1]
    generated = _ATTRS.search(location)
    if generated is not None:
        return _KNOWN.get(generated.group(1).split(".")[0])
    top = location.split(":")[0].split("/")[0]
    return _KNOWN.get(top.removesuffix(".py"))


def function_of(frame: str) -> str:
    """``name (path:line)`` -> ``name (path)``."""
    name, _, location = frame.rpartition(" (")
    return f"{name} ({location.split(':')[0]})"


def samples(path: str) -> Iterator[tuple[list[str], int]]:
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line.strip():
                continue
            stack, _, count = line.rpartition(" ")
            frames = [
                frame
                for frame in stack.split(";")
                if frame and not frame.startswith(("process ", "thread "))
            ]
            if frames:
                yield frames, int(count)


def summarise(path: str, top: int = 15, calls: int | None = None, rate: float = 100.0) -> str:
    by_package: collections.Counter[str] = collections.Counter()
    by_line: collections.Counter[str] = collections.Counter()
    sluice_self: collections.Counter[str] = collections.Counter()
    sluice_incl: collections.Counter[str] = collections.Counter()
    total = 0
    for frames, count in samples(path):
        total += count
        owner = None
        for frame in reversed(frames):
            owner = frame_package(frame)
            if owner is not None:
                break
        owner = owner or "stdlib/other"
        by_package[owner] += count
        by_line[frames[-1]] += count
        if owner == "sluice":
            # the innermost sluice frame (the leaf, or the caller the stdlib leaf is charged to)
            for frame in reversed(frames):
                if frame_package(frame) == "sluice":
                    sluice_self[function_of(frame)] += count
                    break
        for name in {function_of(f) for f in frames if frame_package(f) == "sluice"}:
            sluice_incl[name] += count
    if not total:
        return "no samples\n"

    def pct(n: int) -> str:
        share = f"{100 * n / total:5.1f}%"
        if calls:  # samples / rate = CPU seconds; per call in microseconds
            share += f" {1e6 * n / rate / calls:7.1f} us/call"
        return share

    head = f"samples: {total}"
    if calls:
        head += f" at {rate:g} Hz over {calls} calls: {1e3 * total / rate / calls:.3f} CPU-ms/call"
    out = [head, "self time by package (stdlib leaves charged to their caller):"]
    out += [f"  {pct(n)}  {name}" for name, n in by_package.most_common()]
    out.append(f"top {top} leaf lines:")
    out += [f"  {pct(n)}  {name}" for name, n in by_line.most_common(top)]
    out.append(f"top {top} sluice functions, self (incl. stdlib they call):")
    out += [f"  {pct(n)}  {name}" for name, n in sluice_self.most_common(top)]
    out.append(f"top {top} sluice functions, inclusive (py-spy's async stacks are approximate):")
    out += [f"  {pct(n)}  {name}" for name, n in sluice_incl.most_common(top)]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.prof_summary", description=__doc__)
    p.add_argument("raw", help="a py-spy raw (collapsed stacks) file")
    p.add_argument("--top", type=int, default=15)
    p.add_argument(
        "--calls",
        type=int,
        help="calls the profiled process made (warm-up + rounds): adds microseconds per call",
    )
    p.add_argument("--rate", type=float, default=100.0, help="py-spy's -r sampling rate (100)")
    a = p.parse_args(argv)
    print(summarise(a.raw, a.top, a.calls, a.rate), end="")


if __name__ == "__main__":
    main()
