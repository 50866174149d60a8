"""``import sluice`` loads only what a call needs (the CLI, the simulator and the rest stay out)."""

from __future__ import annotations

import subprocess
import sys

import orjson

# What a call does not need; each is loaded on first use by the code that needs it.
NOT_FOR_A_CALL = (
    "rich",
    "cyclopts",
    "h11",
    "httpx",
    "cattrs",
    "jsonref",
    "cryptography",
    "coredis",
    "sqlite3",
    "tomllib",
    "difflib",
    "sluice.simulator",
    "sluice._cache",
    "sluice._cli",
    "sluice._jobs",
    "sluice._tools.schema",
    "sluice._tools.repair",
    # The front doors load on first use of sluice.aio / sluice.sync.
    "asyncio",
    "concurrent.futures",
    "sluice.aio",
    "sluice.sync",
    "sluice._guest",
    "sluice._portal",
    "sluice._observe",
    "prometheus_client",
    "opentelemetry",
    # sluice.ray (the ray extra) loads only when imported by name.
    "sluice.ray",
    "ray",
    "pyarrow",
)


def test_import_sluice_leaves_out_what_a_call_does_not_need() -> None:
    code = "import json, sys\nimport sluice\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True)
    loaded = set(orjson.loads(done.stdout))
    assert "sluice" in loaded
    assert [m for m in NOT_FOR_A_CALL if m in loaded] == []


def test_the_front_doors_load_on_first_use() -> None:
    code = (
        "import json, sys\nimport sluice\nsluice.aio, sluice.sync\n"
        "print(json.dumps(sorted(sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True)
    loaded = set(orjson.loads(done.stdout))
    assert {"sluice.aio", "sluice.sync", "asyncio"} <= loaded
