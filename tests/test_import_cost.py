"""``import sluice`` loads only what a call needs (the CLI, the simulator and the rest stay out),
and a plain call loads only its own codec and transport on top."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import TYPE_CHECKING

import orjson

from .faulty_server import FaultyServer

if TYPE_CHECKING:
    from pathlib import Path

# What a call does not need; each is loaded on first use by the code that needs it.
NOT_FOR_A_CALL = (
    "rich",
    "cyclopts",
    "click",
    "pygments",
    "h11",
    "httpx",
    "cattrs",
    "jsonref",
    "cryptography",
    "coredis",
    "sqlite3",
    "platformdirs",
    "tomllib",
    "difflib",
    # The entry-point machinery (provider plugins) and what it brings.
    "importlib.metadata",
    "email",
    "zipfile",
    "csv",
    # Exact dollar amounts (budgets, prices given as text) only.
    "decimal",
    "sluice.providers._plugins",
    "sluice._openai_parse",
    "sluice.simulator",
    "sluice._cache",
    "sluice._cli",
    "sluice._gateway",
    "sluice._jobs",
    "sluice._ledger.sqlite",
    "sluice._ledger.redis",
    "sluice._limits.redis_store",
    "sluice._tools.schema",
    "sluice._tools.repair",
    # The codecs and the transports load when a provider first needs one.
    "sluice._protocols.openai",
    "sluice._protocols.anthropic",
    "sluice._protocols.gemini",
    "sluice._protocols.ollama",
    "sluice.transport._pool",
    "sluice.transport._httpx_adapter",
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

NOT_FOR_A_PLAIN_CALL = (
    "rich",
    "cyclopts",
    "click",
    "pygments",
    "h11",
    "httpx",
    "cattrs",
    "coredis",
    "importlib.metadata",
    "decimal",
    "sluice.providers._plugins",
    "sluice._openai_parse",
    "sluice.simulator",
    "sluice._cache",
    "sluice._cli",
    "sluice._gateway",
    "sluice._jobs",
    "sluice._ledger.redis",
    "sluice._limits.redis_store",
    "sluice._protocols.anthropic",
    "sluice._protocols.gemini",
    "sluice._protocols.ollama",
    "sluice.transport._httpx_adapter",
    "sluice._observe.metrics",
    "sluice._observe.tracing",
    "sluice._observe.hooks",
    "prometheus_client",
    "opentelemetry",
    "asyncio",
)
"""What opening a runtime and making calls to one OpenAI-compatible provider over sluice's own
transport does not load: the other codecs, httpx (which brings rich and click when they are
installed), the simulator, the services that are off."""

_PLAIN_CALL = """
import json, sys
import trio
import sluice

async def main(url):
    config = sluice.RuntimeConfig(
        providers={"openai": sluice.ProviderConfig(base_url=url, api_key=sluice.Secret("sk-t"))}
    )
    async with sluice.open_runtime(config) as rt:
        result = await rt.chat("openai:gpt-4o-mini", "hello")
        async with rt.stream("openai:gpt-4o-mini", "again") as stream:
            async for _event in stream:
                pass
    print(json.dumps({"text": result.text, "modules": sorted(sys.modules)}))

trio.run(main, sys.argv[1])
"""


def test_import_sluice_leaves_out_what_a_call_does_not_need() -> None:
    code = "import json, sys\nimport sluice\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True)
    loaded = set(orjson.loads(done.stdout))
    assert "sluice" in loaded
    assert [m for m in NOT_FOR_A_CALL if m in loaded] == []


def test_a_plain_call_loads_its_codec_and_transport_and_nothing_else(tmp_path: Path) -> None:
    with FaultyServer() as server:
        done = subprocess.run(
            [sys.executable, "-c", _PLAIN_CALL, server.url],
            capture_output=True,
            check=False,
            timeout=60,
            env={**os.environ, "HOME": str(tmp_path), "SLUICE_LEDGER_DB": "off"},
        )
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]
    report = orjson.loads(done.stdout)
    assert report["text"] == "echo: hello"
    loaded = set(report["modules"])
    assert {"sluice._protocols.openai", "sluice.transport._pool"} <= loaded  # the call's own
    assert [m for m in NOT_FOR_A_PLAIN_CALL if m in loaded] == []


def test_the_front_doors_load_on_first_use() -> None:
    code = (
        "import json, sys\nimport sluice\nsluice.aio, sluice.sync\n"
        "print(json.dumps(sorted(sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True)
    loaded = set(orjson.loads(done.stdout))
    assert {"sluice.aio", "sluice.sync", "asyncio"} <= loaded
