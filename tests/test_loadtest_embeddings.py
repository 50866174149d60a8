"""``sluice loadtest --endpoint embeddings`` goes through the runtime (issue 34): the
configured quotas hold it back with ``--respect-limits`` (and the wait shows as queue wait), a
server's 429 is retried then and counted as a failure without it, and the results count
embedding requests and inputs. Under trio's autojump clock over in-memory HTTP to the
simulator; the command runs once against the in-process simulator.
"""

from __future__ import annotations

import attrs
import httpx
import orjson
import pytest

import sluice
from sluice._cli import main
from sluice._config import ProviderConfig, RateLimitConfig, RetryConfig, RuntimeConfig
from sluice._jobs.loadtest import Lengths, LoadTest, OpenLoop, Workload, loadtest_config, run_load
from sluice.simulator import SimulatorApp, SimulatorConfig

from .helpers import memory_transport, virtual_deadline

MODEL = "sim:sim-embed"
SMALL = "openai:text-embedding-3-small"


@pytest.fixture(autouse=True)
def no_ambient_config(monkeypatch):
    monkeypatch.delenv("SLUICE_CONFIG", raising=False)


def embeddings_test(requests: int, rate: float = 10.0, batch: int = 3) -> LoadTest:
    return LoadTest(
        model=MODEL,
        shape=OpenLoop.at_rate(rate, arrival="constant"),
        requests=requests,
        workload=Workload(input_tokens=Lengths("fixed", 5)),
        endpoint="embeddings",
        embedding_batch=batch,
    )


async def run_with(nursery, app, config, test, *, respect):
    transport = memory_transport(app, nursery)
    try:
        prepared = loadtest_config(config, "sim", respect_limits=respect)
        async with sluice.open_runtime(prepared, transport=transport) as rt:
            return await run_load(rt, test)
    finally:
        await transport.aclose()


@virtual_deadline(600)
async def test_embeddings_keep_the_configured_quota_with_respect_limits(autojump_clock, nursery):
    # 2 requests a minute, where the schedule asks for ten a second; the warm-up takes one.
    limited = RuntimeConfig(
        providers={"sim": ProviderConfig(rate_limit=RateLimitConfig(requests_per_minute=2))}
    )
    test = embeddings_test(requests=3)
    kept = await run_with(nursery, SimulatorApp(SimulatorConfig()), limited, test, respect=True)
    waits = [r.queue_wait for r in kept.records]
    assert all(r.ok for r in kept.records)
    # The first fits the minute the warm-up began; the others wait for the window to move.
    assert waits[0] == 0.0 and all(55.0 < wait < 125.0 for wait in waits[1:])
    # The wait is the runtime's, so it is in each request's end-to-end time.
    assert all(r.e2e >= r.queue_wait for r in kept.records)
    ignored = await run_with(nursery, SimulatorApp(SimulatorConfig()), limited, test, respect=False)
    assert [r.queue_wait for r in ignored.records] == [0.0] * 3
    agg = kept.aggregates
    assert agg["requests"]["ok"] == 3
    assert all(r.inputs == 3 and r.input_tokens == 5 + 2 * 6 for r in kept.records)
    assert agg["throughput"]["embeddings_per_s"] == pytest.approx(
        3 * agg["throughput"]["requests_per_s"]
    )


class Scripted:
    """An OpenAI ``/embeddings`` server: the n-th request gets the n-th status of ``script``
    (200: vectors and usage; else an error), every request a request id."""

    def __init__(self, script: list[int]) -> None:
        self.script = list(script)
        self.seen = 0

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        body = orjson.loads(request.content)
        self.seen += 1
        headers = {"x-request-id": f"req-{self.seen}"}
        status = self.script.pop(0) if self.script else 200
        if status != 200:
            error = {"error": {"message": f"scripted {status}", "type": "server_error"}}
            return httpx.Response(status, json=error, headers=headers)
        data = [{"object": "embedding", "index": i, "embedding": [0.5, 0.25]}
                for i, _ in enumerate(body["input"])]  # fmt: skip
        usage = {"prompt_tokens": 7, "total_tokens": 7}
        reply = {"object": "list", "data": data, "model": body["model"], "usage": usage}
        return httpx.Response(200, json=reply, headers=headers)


@pytest.mark.parametrize("respect", [False, True])
@virtual_deadline(600)
async def test_a_server_error_is_retried_with_respect_limits_and_counted_without(
    autojump_clock, respect
):
    server = Scripted([200, 500])  # the warm-up's answer, then the first measured one's
    config = RuntimeConfig(retry=RetryConfig(max_attempts=3, base_delay=1.0, jitter=0.0))
    prepared = loadtest_config(config, "openai", respect_limits=respect)
    test = attrs.evolve(embeddings_test(requests=2, rate=1.0), model=SMALL)
    async with sluice.open_runtime(
        prepared, transport=httpx.MockTransport(server), environ={"OPENAI_API_KEY": "sk-test"}
    ) as rt:
        run = await run_load(rt, test)
    first, second = run.records
    assert second.ok and second.attempts == 1
    if respect:
        assert first.ok and first.attempts == 2 and first.request_id == "req-3"
        assert run.aggregates["requests"]["failed"] == 0
    else:
        assert not first.ok and first.status == 500 and first.attempts == 1
        assert first.request_id == "req-2"  # kept on the failure
        assert run.aggregates["requests"]["statuses"] == {"500": 1}


def test_the_command_embeds_through_the_runtime(tmp_path, capsys):
    out = tmp_path / "e.json"
    args = ["loadtest", "--model", MODEL, "--endpoint", "embeddings", "--embedding-batch", "4"]
    args += ["--rate", "20", "--requests", "8", "--input-tokens", "3", "--max-lag", "2s"]
    assert main([*args, "--out", str(out)]) == 0  # no --base-url: the in-process simulator
    document = orjson.loads(out.read_bytes())
    agg = document["aggregates"]
    assert agg["requests"]["ok"] == 8
    assert all(r["inputs"] == 4 and r["input_tokens"] == 3 + 3 * 4 for r in document["requests"])
    summary = capsys.readouterr().out
    assert "embeddings: " in summary and " inputs/s" in summary
