"""How long does ``import sluice`` take, what does a plain chat program load, and what does it
pull in?

    python -m benchmarks.import_time
    python -m benchmarks.import_time --runs 11

Two measures, each in a fresh interpreter ``--runs`` times under ``python -X importtime``:

- ``import_ms``: ``import sluice`` alone, the cumulative microseconds of its top-level line.
  sluice's names load on first use (PEP 562), so this is small by design and is not the
  figure to judge it by.
- ``chat_path``: what a plain chat program needs before its first call: ``import sluice``,
  then touching ``sluice.Runtime``, ``sluice.open_runtime``, ``sluice.RuntimeConfig``,
  ``sluice.ProviderConfig`` and ``sluice.ChatRequest`` and building a config (:data:`CHAT`):
  every top-level import from ``import sluice`` on, summed. It is set against ``trio`` alone
  (``import trio`` in its own fresh interpreter, attrs and the rest of what trio loads
  included), which any sluice program pays: ``over_trio_ms`` is sluice's own share, the goal
  being at most ``--goal-over-trio-ms``.

The tables (the ten modules with the largest median cumulative time, the ten with the largest
self time, self time summed per top-level package) cover the chat path, not interpreter
start-up. From more fresh interpreters: which of the modules that a call does not need are in
``sys.modules`` after ``import sluice`` and after the chat path (``rich``, ``cyclopts``,
``click``, ``h11``, ``httpx``, ``sluice.simulator``, ``cryptography``, ``coredis``,
``importlib.metadata``, ``email``, ``decimal``, the gateway, the jobs, the codecs, the
embedding layer), and how many modules each loaded.

``first_call``: a fresh interpreter does the chat path, then opens a runtime and makes one plain
chat call over an in-process transport (:data:`FIRST_CALL`), so what is loaded on first use
instead of by the chat path still counts: ``ms`` is both together, beside the modules loaded and
the attrs classes defined, and ``loaded_by_the_call`` names what the call added.

``-X importtime`` itself slows imports a little, so the JSON also has both timed from inside
a fresh interpreter without it (``perf_counter`` around the code) and the whole
``python -c "import sluice"`` process next to ``python -c pass``. The chat path's
``over_trio_ms_without_importtime`` times ``import trio`` and then the chat path in one fresh
interpreter, each on its own: sluice's share measured the way a program meets it, and the figure
to judge the goal by (``over_trio_ms`` sets two interpreters' ``-X importtime`` figures against
each other, and that tool's overhead grows with the number of modules).
"""

from __future__ import annotations

import argparse
import collections
import datetime
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import orjson

HEAVY = (
    "rich",
    "cyclopts",
    "click",
    "h11",
    "httpx",
    "sluice.simulator",
    "cryptography",
    "coredis",
    "importlib.metadata",
    "email",
    "decimal",
    "sluice._gateway",
    "sluice._jobs",
    "sluice._protocols.openai",
    "sluice._embed_calls",
    "sluice._embed_many",
    "sluice.providers._embedding",
)
"""Modules neither ``import sluice`` nor the chat path should load (a call does not need them,
or loads them itself when it does: a codec when its provider starts, the embedding layer on
the first embedding call). ``tests/test_import_cost.py`` pins a longer list."""
GOAL_MS = 120.0
GOAL_OVER_TRIO_MS = 30.0
CHAT = """import sluice
sluice.Runtime, sluice.open_runtime, sluice.RuntimeConfig, sluice.ProviderConfig, sluice.ChatRequest
sluice.RuntimeConfig(providers={"openai": sluice.ProviderConfig(api_key=sluice.Secret("sk-x"))})
"""
"""The chat path: what a program that makes plain chat calls touches before opening a runtime."""
FIRST_CALL = """import json, sys, time
import trio, trio.testing

REPLY = json.dumps({
    "id": "c1", "object": "chat.completion", "created": 0, "model": "gpt-4o-mini",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                 "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}).encode()

async def serve(stream):
    data = b""
    while True:
        while b"\\r\\n\\r\\n" not in data:
            chunk = await stream.receive_some()
            if not chunk:
                return
            data += chunk
        head, _, data = data.partition(b"\\r\\n\\r\\n")
        length = 0
        for line in head.split(b"\\r\\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(data) < length:
            data += await stream.receive_some()
        data = data[length:]
        await stream.send_all(
            b"HTTP/1.1 200 OK\\r\\ncontent-type: application/json\\r\\n"
            b"content-length: %d\\r\\n\\r\\n" % len(REPLY) + REPLY
        )

def loaded():
    return {m for m in sys.modules if m == "sluice" or m.startswith("sluice.")}

def classes():
    return sum(
        1
        for name in loaded()
        for value in list(vars(sys.modules[name]).values())
        if isinstance(value, type) and value.__module__ == name and "__attrs_attrs__" in vars(value)
    )

before = set(sys.modules)
t0 = time.perf_counter()
exec(CHAT)
t1 = time.perf_counter()
chat_modules, chat_classes = set(sys.modules) - before, classes()

async def main():
    from sluice.transport import FastTransport

    async with trio.open_nursery() as nursery:
        async def open_stream(host, port):
            client, server = trio.testing.memory_stream_pair()
            nursery.start_soon(serve, server)
            return client

        config = sluice.RuntimeConfig(providers={"openai": sluice.ProviderConfig(
            base_url="http://api.test/v1", api_key=sluice.Secret("sk-x"))})
        transport = FastTransport(open_stream=open_stream, trust_env=False)
        async with sluice.open_runtime(config, transport=transport) as rt:
            result = await rt.chat("openai:gpt-4o-mini", "hello")
        assert result.text == "hi", result
        nursery.cancel_scope.cancel()

t2 = time.perf_counter()
trio.run(main)
t3 = time.perf_counter()
modules = set(sys.modules) - before
print(json.dumps({
    "chat_ms": (t1 - t0) * 1000,
    "call_ms": (t3 - t2) * 1000,
    "chat_modules": len(chat_modules),
    "chat_sluice_modules": len([m for m in chat_modules if m.startswith("sluice")]),
    "chat_classes": chat_classes,
    "modules": len(modules),
    "sluice_modules": len([m for m in modules if m.startswith("sluice")]),
    "classes": classes(),
    "call_loaded": sorted(modules - chat_modules),
}))
"""
"""A fresh interpreter's chat path, then its first call: ``open_runtime`` and one plain
non-streamed ``rt.chat`` to an OpenAI-compatible provider over sluice's own transport, whose
server is an in-process trio memory stream answering every request with one canned reply (no
network, no TLS), and the runtime closed. What is made to load on first use shows here. The
harness's own imports (``trio.testing``) come before the clock starts; the ledger
keeps no file (``SLUICE_LEDGER_DB=off``: disk I/O is not what this measures). The attrs classes
counted are those the loaded sluice modules define at their top level (a subclass that is
not itself decorated is not one)."""
_SKEWING_ENV = frozenset(
    {
        "PYTHONSTARTUP",
        "PYTHONPROFILEIMPORTTIME",
        "PYTHONINSPECT",
        "PYTHONVERBOSE",
        "PYTHONDEBUG",
        # With it set, an editable install has no bytecode cache and every run compiles
        # sluice's ~45 modules from source (~50 ms here); an installed package, or any
        # machine without it, imports cached bytecode. The warm-up run writes the cache.
        "PYTHONDONTWRITEBYTECODE",
    }
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.import_time",
        description="Median import time of sluice (python -X importtime) and what it loads.",
    )
    p.add_argument("--runs", type=int, default=5, help="fresh interpreters per measure (5)")
    p.add_argument("--module", default="sluice", help="the module to import (sluice)")
    p.add_argument("--top", type=int, default=10, help="modules listed per table (10)")
    p.add_argument("--goal-ms", type=float, default=GOAL_MS, help="the target, in ms (120)")
    p.add_argument(
        "--goal-over-trio-ms",
        type=float,
        default=GOAL_OVER_TRIO_MS,
        help="the chat path's target above trio alone, in ms (30)",
    )
    p.add_argument("--python", default=sys.executable, help="the interpreter to measure (this one)")
    a = p.parse_args(argv)
    if a.runs < 1 or a.top < 1:
        p.error("--runs and --top must be at least 1")
    return a


def parse_importtime(text: str) -> list[tuple[str, int, int, int]]:
    """``-X importtime`` lines as ``(module, self_us, cumulative_us, depth)``."""
    rows = []
    for line in text.splitlines():
        if not line.startswith("import time:"):
            continue
        parts = line[len("import time:") :].split("|")
        if len(parts) != 3:
            continue
        try:
            self_us, cumulative_us = int(parts[0]), int(parts[1])
        except ValueError:
            continue  # the header line
        name = parts[2]
        stripped = name.lstrip(" ")
        depth = (len(name) - len(stripped) - 1) // 2
        rows.append((stripped.strip(), self_us, cumulative_us, depth))
    return rows


def _subtree_start(rows: list[tuple[str, int, int, int]], module: str) -> tuple[int, int]:
    """``(start, end)``: the indexes of the first row of ``import module``'s subtree and of its
    own top-level row (the last ``import module`` when there are several)."""
    for end in range(len(rows) - 1, -1, -1):
        name, _self, _cumulative, depth = rows[end]
        if name == module and depth == 0:
            start = end
            while start > 0 and rows[start - 1][3] > 0:
                start -= 1
            return start, end
    raise SystemExit(f"no top-level {module!r} line in the -X importtime output")


def import_subtree(
    rows: list[tuple[str, int, int, int]], module: str
) -> list[tuple[str, int, int, int]]:
    """The rows of what ``import module`` loaded, ending with the module's own top-level row.

    ``-X importtime`` prints a module after everything it imported (post-order), so the
    subtree is the run of deeper rows right before the module's depth-0 row; start-up imports
    (``site``, ``encodings``) are left out.
    """
    start, end = _subtree_start(rows, module)
    return rows[start : end + 1]


def chat_rows(rows: list[tuple[str, int, int, int]]) -> list[tuple[str, int, int, int]]:
    """The rows of the chat path: ``import sluice``'s subtree and every row after it (what
    touching sluice's names imported, each import a top-level row of its own)."""
    start, _end = _subtree_start(rows, "sluice")
    return rows[start:]


def top_level_us(rows: list[tuple[str, int, int, int]]) -> int:
    """The time of everything ``rows`` imported: the sum of their top-level rows."""
    return sum(cumulative for _name, _self, cumulative, depth in rows if depth == 0)


def _run(
    python: str, code: str, *flags: str, extra_env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    # PYTHONPATH stays (to measure another checkout); what would skew the timing goes.
    env = {k: v for k, v in os.environ.items() if k not in _SKEWING_ENV}
    env.update(extra_env or {})
    with tempfile.TemporaryDirectory() as cwd:  # nothing importable by accident
        done = subprocess.run(
            [python, *flags, "-c", code],
            capture_output=True,
            text=True,
            env=env,
            cwd=cwd,
            timeout=120,
            check=False,
        )
    if done.returncode != 0:
        raise SystemExit(f"{python} {' '.join(flags)} -c {code!r} failed:\n{done.stderr[-2000:]}")
    return done


def _process_wall(python: str, code: str) -> float:
    t0 = time.perf_counter()
    _run(python, code)
    return time.perf_counter() - t0


def _timer(code: str) -> str:
    return f"import time\nt = time.perf_counter()\nexec({code!r})\nprint(time.perf_counter() - t)"


def _trio_then(code: str) -> str:
    """A fresh interpreter's ``import trio`` and then ``code``, each timed on its own: the two
    seconds figures, one line. Both from the same interpreter and the same clock, so their
    difference is sluice's own share with neither ``-X importtime`` nor a second process in it."""
    return (
        "import time\nt0 = time.perf_counter()\nimport trio\nt1 = time.perf_counter()\n"
        f"exec({code!r})\nprint(t1 - t0, time.perf_counter() - t1)"
    )


def _first_call(python: str) -> dict[str, Any]:
    """One fresh interpreter's chat path and first call (:data:`FIRST_CALL`)."""
    code = f"CHAT = {CHAT!r}\n{FIRST_CALL}"
    done = _run(python, code, extra_env={"SLUICE_LEDGER_DB": "off"})
    found: dict[str, Any] = orjson.loads(done.stdout)
    return found


def measure(a: argparse.Namespace) -> dict[str, Any]:
    module = a.module
    totals: list[int] = []
    chat: list[int] = []
    trio: list[int] = []
    cumulative: dict[str, list[int]] = collections.defaultdict(list)
    self_time: dict[str, list[int]] = collections.defaultdict(list)
    packages: dict[str, list[int]] = collections.defaultdict(list)
    inside: list[float] = []
    chat_inside: list[float] = []
    beyond_trio: list[tuple[float, float]] = []
    process: list[float] = []
    bare: list[float] = []
    first: list[dict[str, Any]] = []
    _run(a.python, CHAT)  # warm-up: writes the bytecode cache, fills the page cache
    for _ in range(a.runs):  # interleaved, so a busy moment hits every measure alike
        rows = parse_importtime(_run(a.python, f"import {module}", "-X", "importtime").stderr)
        totals.append(import_subtree(rows, module)[-1][2])
        rows = chat_rows(parse_importtime(_run(a.python, CHAT, "-X", "importtime").stderr))
        chat.append(top_level_us(rows))
        per_package: dict[str, int] = collections.Counter()
        seen = set()
        for name, self_us, cumulative_us, _depth in rows:
            if name in seen:
                continue
            seen.add(name)
            cumulative[name].append(cumulative_us)
            self_time[name].append(self_us)
            per_package[_package(name)] += self_us
        for name, us in per_package.items():
            packages[name].append(us)
        trio_rows = parse_importtime(_run(a.python, "import trio", "-X", "importtime").stderr)
        trio.append(import_subtree(trio_rows, "trio")[-1][2])
        inside.append(float(_run(a.python, _timer(f"import {module}")).stdout.strip()))
        chat_inside.append(float(_run(a.python, _timer(CHAT)).stdout.strip()))
        trio_s, rest_s = _run(a.python, _trio_then(CHAT)).stdout.split()
        beyond_trio.append((float(trio_s), float(rest_s)))
        process.append(_process_wall(a.python, f"import {module}"))
        bare.append(_process_wall(a.python, "pass"))
        first.append(_first_call(a.python))

    def med(values: list[int]) -> float:
        # A module missing from some runs (imported earlier by site, say) counts as 0 there.
        return statistics.median(values + [0] * (a.runs - len(values)))

    def table(found: dict[str, list[int]], n: int) -> list[dict[str, Any]]:
        ranked = sorted(found, key=lambda name: med(found[name]), reverse=True)
        return [{"module": name, "ms": round(med(found[name]) / 1000, 2)} for name in ranked[:n]]

    in_module = _modules_after(a.python, f"import {module}")
    on_chat_path = _modules_after(a.python, CHAT)
    source = _run(a.python, f"import {module}\nprint({module}.__file__)").stdout.strip()
    total_ms = statistics.median(totals) / 1000
    chat_ms = statistics.median(chat) / 1000
    trio_ms = statistics.median(trio) / 1000
    beyond_ms = round(statistics.median(rest for _, rest in beyond_trio) * 1000, 1)
    return {
        "module": module,
        "runs": a.runs,
        "import_ms": round(total_ms, 1),
        "import_ms_runs": [round(t / 1000, 1) for t in totals],
        "goal_ms": a.goal_ms,
        "meets_goal": total_ms < a.goal_ms,
        "chat_path": {
            "code": CHAT,
            "ms": round(chat_ms, 1),
            "ms_runs": [round(t / 1000, 1) for t in chat],
            "trio_ms": round(trio_ms, 1),
            "trio_ms_runs": [round(t / 1000, 1) for t in trio],
            "over_trio_ms": round(chat_ms - trio_ms, 1),
            "goal_over_trio_ms": a.goal_over_trio_ms,
            "meets_goal": beyond_ms <= a.goal_over_trio_ms,
            "ms_without_importtime": round(statistics.median(chat_inside) * 1000, 1),
            "trio_ms_without_importtime": round(
                statistics.median(t for t, _ in beyond_trio) * 1000, 1
            ),
            "over_trio_ms_without_importtime": beyond_ms,
            "over_trio_ms_without_importtime_runs": [
                round(rest * 1000, 1) for _, rest in beyond_trio
            ],
            "modules_loaded": len(on_chat_path),
            "sluice_modules_loaded": _sluice_modules(on_chat_path),
            "heavy_loaded": [name for name in HEAVY if name in on_chat_path],
        },
        "first_call": {
            "chat_ms": round(statistics.median(f["chat_ms"] for f in first), 1),
            "call_ms": round(statistics.median(f["call_ms"] for f in first), 1),
            "ms": round(statistics.median(f["chat_ms"] + f["call_ms"] for f in first), 1),
            "chat_classes": first[-1]["chat_classes"],
            "chat_sluice_modules": first[-1]["chat_sluice_modules"],
            "classes": first[-1]["classes"],
            "modules_loaded": first[-1]["modules"],
            "sluice_modules_loaded": first[-1]["sluice_modules"],
            "loaded_by_the_call": first[-1]["call_loaded"],
        },
        "top_cumulative": table({k: v for k, v in cumulative.items() if k != module}, a.top),
        "top_self": table(self_time, a.top),
        "self_by_package": table(packages, a.top),
        "heavy_loaded": [name for name in HEAVY if name in in_module],
        "heavy_not_loaded": [name for name in HEAVY if name not in in_module],
        "modules_loaded": len(in_module),
        "sluice_modules_loaded": _sluice_modules(in_module),
        "import_ms_without_importtime": round(statistics.median(inside) * 1000, 1),
        "process_ms": round(statistics.median(process) * 1000, 1),
        "bare_python_ms": round(statistics.median(bare) * 1000, 1),
        "source": source,
        "python": a.python,
        "python_version": _run(
            a.python, "import sys; print(sys.version.split()[0])"
        ).stdout.strip(),
        "cpus": os.cpu_count(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }


def _package(name: str) -> str:
    """The package a module is charged to: sluice's subpackages separately, others by root."""
    parts = name.split(".")
    if parts[0] == "sluice" and len(parts) > 1:
        return ".".join(parts[:2])
    return parts[0]


def _modules_after(python: str, code: str) -> set[str]:
    """``sys.modules`` after running ``code`` in a fresh interpreter (``json`` and ``sys``
    imported before, so they do not count as loaded by it)."""
    found: list[str] = orjson.loads(
        _run(python, f"import sys, json\n{code}\nprint(json.dumps(sorted(sys.modules)))").stdout
    )
    return set(found)


def _sluice_modules(found: set[str]) -> list[str]:
    return sorted(m for m in found if m == "sluice" or m.startswith("sluice."))


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    report = measure(a)
    sys.stdout.buffer.write(orjson.dumps(report) + b"\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
