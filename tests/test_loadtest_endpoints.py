"""``sluice loadtest --endpoint embeddings`` and ``--endpoint responses`` go through the
runtime (issue 34): the configured quotas hold them back with ``--respect-limits`` (and the
wait shows as queue wait), a server error is retried then and counted as a failure (with its
request id) without it, the results count embedding requests and inputs, and a responses
test's calls reach the server's ``/v1/responses`` and are measured as chat. Under trio's
autojump clock over in-memory HTTP to the simulator (or a scripted server); each command runs
once against the in-process simulator.
"""

from __future__ import annotations

from typing import Any

import attrs
import httpx
import orjson
import pytest

import sluice
from sluice._cli import main
from sluice._config import ProviderConfig, RateLimitConfig, RetryConfig, RuntimeConfig
from sluice._jobs.loadtest import Lengths, LoadTest, OpenLoop, Workload, loadtest_config, run_load
from sluice._jobs.loadtest.endpoints import responses_config
from sluice.simulator import SimulatorApp, SimulatorConfig

from .helpers import memory_transport, virtual_deadline

MODEL = "sim:sim-embed"
MODEL_R = "sim:sim-small"
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


# --- --endpoint responses: chat calls through OpenAI's Responses API -------------------------


class Routes:
    """A simulator app that notes the route of every request it serves."""

    def __init__(self, app: SimulatorApp) -> None:
        self.app = app
        self.routes: list[str] = []

    async def handle(self, method: str, path: str, *args: Any, **kwargs: Any) -> Any:
        self.routes.append(path.partition("?")[0])
        return await self.app.handle(method, path, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.app, name)


def responses_test(requests: int) -> LoadTest:
    return LoadTest(
        model="sim:sim-small",
        shape=OpenLoop.at_rate(10.0, arrival="constant"),
        requests=requests,
        workload=Workload(input_tokens=Lengths("fixed", 6), output_tokens=Lengths("fixed", 7)),
        endpoint="responses",
    )


@pytest.mark.parametrize("respect", [False, True])
@virtual_deadline(600)
async def test_responses_go_through_the_runtime_and_its_quota(autojump_clock, nursery, respect):
    limited = RuntimeConfig(
        providers={"sim": ProviderConfig(rate_limit=RateLimitConfig(requests_per_minute=2))}
    )
    app = Routes(SimulatorApp(SimulatorConfig(ttft=0.2, tokens_per_second=50)))
    transport = memory_transport(app, nursery)
    prepared = responses_config(loadtest_config(limited, "sim", respect_limits=respect), MODEL_R)
    try:
        async with sluice.open_runtime(prepared, transport=transport) as rt:
            run = await run_load(rt, responses_test(requests=3))
    finally:
        await transport.aclose()
    assert set(app.routes) == {"/v1/responses"}  # the warm-up's and the three measured
    assert len(app.routes) == 4
    assert all(r.ok and r.output_tokens == 7 and r.input_tokens == 6 for r in run.records)
    # The simulator's 0.2 s to the first token, after whatever the runtime held it back.
    assert [r.ttft for r in run.records] == [
        pytest.approx(0.2 + r.queue_wait, abs=1e-6) for r in run.records
    ]
    assert run.aggregates["itl_s"]["count"] == 3 * 6
    waits = [r.queue_wait for r in run.records]
    if respect:  # the quota holds the second and third back a minute
        assert waits[0] == 0.0 and all(55.0 < w < 125.0 for w in waits[1:])
    else:
        assert waits == [0.0, 0.0, 0.0]


def test_the_command_load_tests_responses(tmp_path, capsys):
    out = tmp_path / "r.json"
    args = ["loadtest", "--model", MODEL_R, "--endpoint", "responses", "--rate", "20"]
    args += ["--requests", "6", "--output-tokens", "5", "--max-lag", "2s"]
    assert main([*args, "--out", str(out)]) == 0
    document = orjson.loads(out.read_bytes())
    assert document["config"]["endpoint"] == "responses"
    agg = document["aggregates"]
    assert agg["requests"]["ok"] == 6 and agg["throughput"]["output_tokens"] == 30
    assert "TTFT" in capsys.readouterr().out
