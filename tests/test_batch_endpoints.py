"""One batch file mixing the Batch API's three URLs (``/v1/chat/completions``,
``/v1/responses``, ``/v1/embeddings``) through both lanes: one output line per input line, each
body in its endpoint's shape.

The runtime sends through the simulator's transport (no sockets); the provider lane uses the
simulator's own Files + Batches API, which takes a batch of one endpoint's lines, so the file
makes one batch per endpoint. Real clock, short batch times; each test has a trio.fail_after
guard.
"""

from __future__ import annotations

import base64
import math
import struct

import orjson
import pytest
import trio

from sluice import RuntimeConfig, open_runtime
from sluice._jobs.batch import run_batch
from sluice._jobs.provider_batch.engine import LaneOptions
from sluice.simulator import SimulatorApp, SimulatorConfig, mock_transport

GUARD = 60
CHAT, RESPONSES, EMBEDDINGS = "/v1/chat/completions", "/v1/responses", "/v1/embeddings"
LINES = [
    (
        "chat-1",
        CHAT,
        {"model": "sim:sim-small", "messages": [{"role": "user", "content": "hi"}]},
    ),
    (
        "resp-1",
        RESPONSES,
        {
            "model": "sim:sim-small",
            "instructions": "Be brief.",
            "input": "Say something",
            "max_output_tokens": 50,
            "metadata": {"run": "mixed"},
        },
    ),
    (
        "resp-tool",
        RESPONSES,
        {
            "model": "sim:sim-small",
            "input": [{"role": "user", "content": [{"type": "input_text", "text": "weather?"}]}],
            "tools": [
                {
                    "type": "function",
                    "name": "get_weather",
                    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
                }
            ],
            "tool_choice": "required",
        },
    ),
    (
        "emb-2",
        EMBEDDINGS,
        {"model": "sim:text-embedding-3-small", "input": ["first text", "second"], "dimensions": 8},
    ),
    (
        "emb-b64",
        EMBEDDINGS,
        {
            "model": "sim:text-embedding-3-small",
            "input": "packed",
            "dimensions": 8,
            "encoding_format": "base64",
        },
    ),
]


def write_input(path) -> None:
    with open(path, "wb") as f:
        for custom_id, url, body in LINES:
            line = {"custom_id": custom_id, "method": "POST", "url": url, "body": body}
            f.write(orjson.dumps(line) + b"\n")


def check_output(path) -> None:
    got = [orjson.loads(raw) for raw in path.read_bytes().splitlines()]
    assert sorted(line["custom_id"] for line in got) == sorted(c for c, _, _ in LINES)
    by_id = {line["custom_id"]: line for line in got}
    for custom_id, line in by_id.items():
        assert line["error"] is None, (custom_id, line["error"])
        assert line["id"].startswith("batch_req_")
        assert line["response"]["status_code"] == 200

    chat = by_id["chat-1"]["response"]["body"]
    assert chat["object"] == "chat.completion"
    assert chat["choices"][0]["message"]["role"] == "assistant"

    response = by_id["resp-1"]["response"]["body"]
    assert response["object"] == "response" and response["id"].startswith("resp_")
    assert response["status"] == "completed"
    assert response["instructions"] == "Be brief." and response["metadata"] == {"run": "mixed"}
    assert response["max_output_tokens"] == 50
    message = [item for item in response["output"] if item["type"] == "message"]
    assert message[0]["content"][0]["type"] == "output_text"
    assert message[0]["content"][0]["text"]
    assert response["usage"]["input_tokens"] > 0 and response["usage"]["output_tokens"] > 0
    tool = by_id["resp-tool"]["response"]["body"]
    calls = [item for item in tool["output"] if item["type"] == "function_call"]
    assert [c["name"] for c in calls] == ["get_weather"]
    assert "city" in orjson.loads(calls[0]["arguments"])
    assert tool["tools"][0]["name"] == "get_weather"

    embeddings = by_id["emb-2"]["response"]["body"]
    assert embeddings["object"] == "list"
    assert [d["index"] for d in embeddings["data"]] == [0, 1]
    for item in embeddings["data"]:
        assert item["object"] == "embedding" and len(item["embedding"]) == 8
        assert math.isclose(math.fsum(x * x for x in item["embedding"]), 1.0, rel_tol=1e-5)
    assert embeddings["usage"] == {"prompt_tokens": 3, "total_tokens": 3}
    packed = by_id["emb-b64"]["response"]["body"]["data"][0]["embedding"]
    values = struct.unpack("<8f", base64.b64decode(packed))
    assert math.isclose(math.fsum(x * x for x in values), 1.0, rel_tol=1e-5)


async def test_a_mixed_file_on_the_realtime_lane(tmp_path):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_input(source)
    app = SimulatorApp(SimulatorConfig())
    with trio.fail_after(GUARD):
        async with open_runtime(RuntimeConfig(), transport=mock_transport(app)) as rt:
            summary = await run_batch(source, out, runtime=rt)
    check_output(out)
    assert (summary.lines, summary.ok, summary.failed) == (len(LINES), len(LINES), 0)
    assert app.batch_stats.batches_created == 0


async def test_a_mixed_file_on_the_provider_lane_makes_one_batch_per_endpoint(tmp_path):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_input(source)
    app = SimulatorApp(SimulatorConfig(batch_time=0.2))
    lane = LaneOptions(poll_interval=0.05)
    with trio.fail_after(GUARD):
        async with open_runtime(RuntimeConfig(), transport=mock_transport(app)) as rt:
            summary = await run_batch(source, out, runtime=rt, via="provider", lane_options=lane)
    check_output(out)
    assert (summary.lines, summary.ok, summary.failed) == (len(LINES), len(LINES), 0)
    # Chat and responses lines both go as chat completions, in batches of their own (their
    # results are written differently); embeddings in a /v1/embeddings batch.
    assert summary.batch_lines == len(LINES)
    assert app.batch_stats.batches_created == summary.batches == 3


@pytest.mark.parametrize("url", [RESPONSES, EMBEDDINGS])
async def test_a_bad_body_of_each_endpoint_is_an_error_line_naming_the_field(tmp_path, url):
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    body = {"model": "sim:m", "input": 5}
    source.write_bytes(
        orjson.dumps({"custom_id": "x", "method": "POST", "url": url, "body": body}) + b"\n"
    )
    with trio.fail_after(GUARD):
        async with open_runtime(RuntimeConfig()) as rt:
            await run_batch(source, out, runtime=rt)
    (line,) = [orjson.loads(raw) for raw in out.read_bytes().splitlines()]
    assert line["custom_id"] == "x" and line["response"] is None
    assert line["error"]["code"] == "invalid_request"
    assert line["error"]["message"].startswith("line 1: body.input")


async def test_responses_lines_to_anthropic_go_in_a_message_batch_and_embeddings_say_none(
    tmp_path,
):
    """An Anthropic model: the /v1/responses lines go through Message Batches as chat calls
    and come back as response objects; an embeddings line cannot (Anthropic has none), goes
    to the realtime lane and gets an error line that says so."""
    from sluice._config import ProviderConfig
    from sluice._serde import Secret

    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    model = "anthropic:claude-haiku-4-5"
    lines = [
        ("r1", RESPONSES, {"model": model, "input": "one", "instructions": "Be brief."}),
        ("r2", RESPONSES, {"model": model, "input": "two", "max_output_tokens": 20}),
        ("e1", EMBEDDINGS, {"model": model, "input": "no vectors here"}),
    ]
    source.write_bytes(
        b"".join(
            orjson.dumps({"custom_id": c, "method": "POST", "url": url, "body": body}) + b"\n"
            for c, url, body in lines
        )
    )
    app = SimulatorApp(SimulatorConfig(batch_time=0.2))
    anthropic = ProviderConfig(base_url="http://sim.test/v1", api_key=Secret("sk-ant-test"))
    config = RuntimeConfig(providers={"anthropic": anthropic})
    lane = LaneOptions(poll_interval=0.05)
    with trio.fail_after(GUARD):
        async with open_runtime(config, transport=mock_transport(app), environ={}) as rt:
            summary = await run_batch(source, out, runtime=rt, via="provider", lane_options=lane)
    by_id = {o["custom_id"]: o for o in map(orjson.loads, out.read_bytes().splitlines())}
    assert sorted(by_id) == ["e1", "r1", "r2"]
    first, second = by_id["r1"]["response"]["body"], by_id["r2"]["response"]["body"]
    assert first["object"] == second["object"] == "response"
    assert first["model"] == "claude-haiku-4-5"
    assert (first["status"], first["instructions"]) == ("completed", "Be brief.")
    # The simulator's 24-token reply is cut at max_output_tokens: incomplete, as OpenAI says.
    assert (second["status"], second["max_output_tokens"]) == ("incomplete", 20)
    assert second["incomplete_details"] == {"reason": "max_output_tokens"}
    error = by_id["e1"]["error"]
    assert "anthropic protocol, which has no embeddings" in error["message"]
    assert (summary.ok, summary.failed, summary.batches) == (2, 1, 1)
    assert app.batch_stats.batches_created == 1


def test_a_mixed_file_killed_while_its_batches_run_resumes_without_paying_twice(
    tmp_path, monkeypatch
):
    """The real ``sluice batch --via provider`` on 60 lines of the three URLs against a
    ``sluice sim`` process, killed with SIGKILL once its three batches (one per endpoint)
    exist; the resume adopts them from the journal, merges each in its endpoint's shape and
    creates nothing again."""
    import signal
    import subprocess
    import time

    import httpx

    from .helpers import SLUICE, count_lines, sim_process, start_batch, whole_lines

    monkeypatch.delenv("SLUICE_CONFIG", raising=False)
    monkeypatch.setenv("SLUICE_LEDGER_DB", "off")
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    bodies = {
        CHAT: {"model": "sim:m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 4},
        RESPONSES: {"model": "sim:m", "input": "x", "instructions": "Hm.", "max_output_tokens": 50},
        EMBEDDINGS: {"model": "sim:m", "input": ["a b", "c"], "dimensions": 4},
    }
    urls = [CHAT, RESPONSES, EMBEDDINGS] * 20
    source.write_bytes(
        b"".join(
            orjson.dumps({"custom_id": f"q{i}", "method": "POST", "url": u, "body": bodies[u]})
            + b"\n"
            for i, u in enumerate(urls)
        )
    )
    argv = [str(source), "-o", str(out), "--resume", "--via", "provider"]
    argv += ["--poll-interval", "0.1", "--model", "sim:m", "--api-key", "sk-test"]
    with sim_process("--batch-time", "3") as url:
        argv += ["--base-url", url]
        proc = start_batch(*argv)
        journal = out.with_name("out.batches.jsonl")

        def created() -> int:
            return journal.read_bytes().count(b'"t":"batch"') if journal.exists() else 0

        deadline = time.monotonic() + GUARD
        while created() < 3:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "three batches never created"
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=GUARD)
        assert count_lines(out) == 0
        done = subprocess.run([SLUICE, "batch", *argv], capture_output=True, timeout=GUARD)
        assert done.returncode == 0, done.stderr.decode()
        counted = httpx.get(f"{url}/sim/stats").json()
    assert counted["batches_created"] == 3 and counted["duplicate_creates"] == 0
    got = {o["custom_id"]: o for o in whole_lines(out)}
    assert sorted(got) == sorted(f"q{i}" for i in range(len(urls)))
    objects = {"chat.completion": 0, "response": 0, "list": 0}
    for line in got.values():
        assert line["error"] is None
        objects[line["response"]["body"]["object"]] += 1
    assert objects == {"chat.completion": 20, "response": 20, "list": 20}
    assert got["q1"]["response"]["body"]["instructions"] == "Hm."
    assert [len(d["embedding"]) for d in got["q2"]["response"]["body"]["data"]] == [4, 4]


async def test_a_model_served_through_the_responses_api_goes_in_responses_batches(tmp_path):
    """A model its provider serves through the Responses API (``protocol =
    "openai-responses"``): its lines, chat or responses, go to the batch API as /v1/responses
    lines, in /v1/responses batches, and each comes back in its own line's shape."""
    import httpx

    from sluice._config import ModelConfig, ProviderConfig

    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    lines = [line for line in LINES if line[1] != EMBEDDINGS]
    source.write_bytes(
        b"".join(
            orjson.dumps({"custom_id": c, "method": "POST", "url": url, "body": body}) + b"\n"
            for c, url, body in lines
        )
    )
    app = SimulatorApp(SimulatorConfig(batch_time=0.2))
    sim = ProviderConfig(models={"sim-small": ModelConfig(protocol="openai-responses")})
    config = RuntimeConfig(providers={"sim": sim})
    lane = LaneOptions(poll_interval=0.05)
    with trio.fail_after(GUARD):
        async with open_runtime(config, transport=mock_transport(app)) as rt:
            summary = await run_batch(source, out, runtime=rt, via="provider", lane_options=lane)
        async with httpx.AsyncClient(transport=mock_transport(app), base_url="http://s/v1") as c:
            listed = (await c.get("/batches")).json()["data"]
    by_id = {o["custom_id"]: o for o in map(orjson.loads, out.read_bytes().splitlines())}
    assert sorted(by_id) == sorted(c for c, _, _ in lines)
    assert all(o["error"] is None for o in by_id.values())
    assert by_id["chat-1"]["response"]["body"]["object"] == "chat.completion"
    assert by_id["resp-1"]["response"]["body"]["object"] == "response"
    assert (summary.ok, summary.batches) == (3, 2)
    assert [b["endpoint"] for b in listed] == ["/v1/responses", "/v1/responses"]
