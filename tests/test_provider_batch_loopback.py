"""Both batch backends against the real simulator server over loopback, through the
provider's own transport (sluice's HTTP client): a short round trip each, the real clock, and
the counters read over HTTP as a test in another process would read them."""

from __future__ import annotations

import httpx
import trio

import sluice
from sluice import ChatRequest, RuntimeConfig
from sluice._config import ProviderConfig
from sluice._jobs.provider_batch.backends import backend_for
from sluice._serde import Secret
from sluice.simulator import SimulatorConfig, serve_simulator


async def round_trip(rt: sluice.Runtime, provider: str, n: int) -> None:
    backend = backend_for(rt, provider)
    assert backend is not None
    requests = [
        ChatRequest(model=f"{provider}:sim-small", messages=f"loop {i}", max_tokens=16)
        for i in range(n)
    ]
    entries = [backend.entry(f"id-{i}", r) for i, r in enumerate(requests)]
    file_id = await backend.upload(entries)
    batch = await backend.create(entries, file_id, f"fp-{provider}")
    with trio.fail_after(10):
        while batch.state != "ended":
            await trio.sleep(0.05)
            batch = await backend.get(batch.id)
    outcomes = {o.wire_id: o async for o in backend.results(batch)}
    assert sorted(outcomes) == sorted(e.wire_id for e in entries)
    for entry, request in zip(entries, requests, strict=True):
        outcome = outcomes[entry.wire_id]
        assert outcome.kind == "ok" and outcome.output is not None
        assert outcome.output.message == (await rt.chat(request)).message


async def test_both_backends_over_loopback() -> None:
    config = SimulatorConfig(batch_time=0.3)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(serve_simulator, config)
        url = f"http://127.0.0.1:{port}/v1"
        runtime_config = RuntimeConfig(
            providers={
                "sim": ProviderConfig(base_url=url),
                "anthropic": ProviderConfig(base_url=url, api_key=Secret("sk-ant-loopback")),
            }
        )
        async with sluice.open_runtime(runtime_config, environ={}) as rt:
            await round_trip(rt, "sim", 10)
            await round_trip(rt, "anthropic", 10)
        async with httpx.AsyncClient() as client:
            stats = (await client.get(f"http://127.0.0.1:{port}/sim/stats")).json()
        assert stats["batches_created"] == 2 and stats["files_uploaded"] == 1
        assert stats["duplicate_creates"] == 0
        nursery.cancel_scope.cancel()
