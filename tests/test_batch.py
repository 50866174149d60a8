"""run_batch through a real runtime and the in-process simulator (loopback, real clock).

These assert behaviour, never timing; each has a ``trio.fail_after`` guard.
"""

from __future__ import annotations

import httpx
import orjson
import pytest
import trio

from sluice import ConfigError, RetryConfig, RuntimeConfig, open_runtime
from sluice._jobs.batch import BatchProgress, run_batch
from sluice.simulator import SimulatorConfig

GUARD = 30


def request_line(custom_id, content="Hi", model="sim:sim-small", **body):
    return orjson.dumps(
        {
            "custom_id": custom_id,
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {"model": model, "messages": [{"role": "user", "content": content}], **body},
        }
    ).decode()


def read_output(path):
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


async def test_every_line_gets_exactly_one_output_line(tmp_path):
    lines = [
        request_line("a", "first"),
        "{this is not json",
        orjson.dumps({"method": "POST", "body": {"model": "sim:x", "messages": []}}).decode(),
        request_line("b", model="nowhere:model"),
        "",
        request_line("c", model="gpt-4o-mini"),
        request_line(
            "d",
            "with a tool",
            tools=[{"type": "function", "function": {"name": "f"}}],
            tool_choice="required",
        ),
        request_line("e", "short", max_tokens=3),
    ]
    source = tmp_path / "in.jsonl"
    source.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out.jsonl"
    with trio.fail_after(GUARD):
        async with open_runtime(RuntimeConfig()) as rt:
            summary = await run_batch(source, out, runtime=rt)

    got = read_output(out)
    assert len(got) == 7  # the blank line is not a request
    assert sorted(str(o["custom_id"]) for o in got) == ["None", "None", "a", "b", "c", "d", "e"]
    assert all(o["id"].startswith("batch_req_") for o in got)
    by_id = {o["custom_id"]: o for o in got if o["custom_id"]}
    for ok in "ade":
        assert by_id[ok]["error"] is None
        assert by_id[ok]["response"]["status_code"] == 200
        assert by_id[ok]["response"]["body"]["object"] == "chat.completion"
    tool_message = by_id["d"]["response"]["body"]["choices"][0]["message"]
    assert tool_message["tool_calls"][0]["function"]["name"] == "f"
    assert by_id["d"]["response"]["body"]["choices"][0]["finish_reason"] == "tool_calls"
    assert by_id["e"]["response"]["body"]["usage"]["completion_tokens"] <= 3

    errors = {o["error"]["message"].split(":")[0]: o for o in got if o["error"]}
    assert set(errors) == {"line 2", "line 3", "line 4", "line 6"}
    assert errors["line 2"]["error"]["code"] == "invalid_json_line"
    assert "custom_id missing" in errors["line 3"]["error"]["message"]
    assert "unknown provider 'nowhere'" in errors["line 4"]["error"]["message"]
    assert "provider:model" in errors["line 6"]["error"]["message"]

    assert (summary.lines, summary.ok, summary.failed, summary.calls) == (7, 3, 4, 4)
    assert summary.input_tokens > 0
    assert summary.output_tokens > 0


async def test_failed_calls_carry_the_providers_status(tmp_path):
    source = tmp_path / "in.jsonl"
    source.write_text("\n".join(request_line(f"r{i}") for i in range(3)) + "\n")
    out = tmp_path / "out.jsonl"
    # Batch lines wait out retriable failures with no attempt limit unless one is configured.
    config = RuntimeConfig(retry=RetryConfig(max_attempts=1, wait_max_attempts=1))
    with trio.fail_after(GUARD):
        async with open_runtime(config, simulator=SimulatorConfig(rate_500=1.0)) as rt:
            summary = await run_batch(source, out, runtime=rt)
    got = read_output(out)
    assert sorted(o["custom_id"] for o in got) == ["r0", "r1", "r2"]
    for o in got:
        assert o["response"]["status_code"] == 500
        assert o["response"]["body"]["error"]["message"]
        assert o["error"]["code"]
        assert o["error"]["message"].startswith("line ")
    assert (summary.ok, summary.failed, summary.calls) == (0, 3, 3)


async def test_model_override_and_output_replaced(tmp_path):
    source = tmp_path / "in.jsonl"
    source.write_text("\n".join(request_line(f"r{i}", model="gpt-4o-mini") for i in range(5)))
    out = tmp_path / "out.jsonl"
    out.write_text("old line that must disappear\n" * 10)
    with trio.fail_after(GUARD):
        async with open_runtime(RuntimeConfig()) as rt:
            # Like the CLI: an output holding lines is kept unless told to replace it.
            with pytest.raises(ConfigError, match="already holds results"):
                await run_batch(source, out, runtime=rt, model="sim:sim-large")
            assert out.read_text() == "old line that must disappear\n" * 10
            summary = await run_batch(
                source, out, runtime=rt, model="sim:sim-large", max_in_flight=2, overwrite=True
            )
    got = read_output(out)
    assert sorted(o["custom_id"] for o in got) == [f"r{i}" for i in range(5)]
    assert {o["response"]["body"]["model"] for o in got} == {"sim-large"}
    assert summary.ok == 5


async def test_each_line_counted_in_progress_is_on_disk(tmp_path):
    source = tmp_path / "in.jsonl"
    source.write_text("\n".join([request_line(f"r{i}") for i in range(20)] + ["oops"]))
    out = tmp_path / "out.jsonl"
    seen: list[tuple[int, int]] = []

    def progress(p: BatchProgress) -> None:
        seen.append((p.summary.written, len(out.read_bytes().splitlines())))
        assert p.summary.todo == 21

    with trio.fail_after(GUARD):
        async with open_runtime(RuntimeConfig()) as rt:
            summary = await run_batch(
                source, out, runtime=rt, max_in_flight=4, progress=progress, progress_interval=0.001
            )
    assert len(seen) >= 2  # at least one on the way and the final one
    assert all(written <= on_disk for written, on_disk in seen)
    assert seen[-1] == (21, 21)
    assert summary.written == 21


async def test_missing_input_raises_a_plain_os_error(tmp_path):
    with trio.fail_after(GUARD):
        async with open_runtime(RuntimeConfig()) as rt:
            with pytest.raises(FileNotFoundError):
                await run_batch(tmp_path / "missing.jsonl", tmp_path / "out.jsonl", runtime=rt)


async def test_a_model_override_without_provider_is_refused(tmp_path):
    source = tmp_path / "in.jsonl"
    source.write_text(request_line("a") + "\n")
    with trio.fail_after(GUARD):
        async with open_runtime(RuntimeConfig()) as rt:
            with pytest.raises(ConfigError, match="provider:model"):
                await run_batch(source, tmp_path / "out.jsonl", runtime=rt, model="gpt-4o")


async def test_no_stream_sends_plain_requests_and_writes_the_same_lines(tmp_path):
    """``stream=False`` (``--no-stream``) changes how calls go, never the output's shape."""
    from sluice.simulator import mock_transport

    source = tmp_path / "in.jsonl"
    # A body asking to stream does not decide either way.
    source.write_text(request_line("a", "first", stream=True) + "\n" + request_line("b") + "\n")
    seen: list[bool] = []
    inner = mock_transport(SimulatorConfig())

    async def handler(request):
        seen.append(bool(orjson.loads(request.content).get("stream")))
        return await inner.handle_async_request(request)

    outputs = {}
    for stream in (True, False):
        out = tmp_path / f"out-{stream}.jsonl"
        seen.clear()
        with trio.fail_after(GUARD):
            async with open_runtime(RuntimeConfig(), transport=httpx.MockTransport(handler)) as rt:
                summary = await run_batch(source, out, runtime=rt, stream=stream)
        assert seen == [stream, stream]
        assert (summary.ok, summary.failed) == (2, 0)
        outputs[stream] = sorted(read_output(out), key=lambda o: o["custom_id"])

    def shape(line):
        body = line["response"]["body"]
        return (line["custom_id"], sorted(body), body["choices"][0]["message"]["content"])

    assert [shape(o) for o in outputs[True]] == [shape(o) for o in outputs[False]]


async def test_progress_counts_only_calls_that_started(tmp_path):
    """ "in flight" never passes max_in_flight: a line handed to rt.map that still waits for
    one of its slots is not in flight."""
    source = tmp_path / "in.jsonl"
    source.write_text("\n".join(request_line(f"r{i}") for i in range(12)) + "\n")
    out = tmp_path / "out.jsonl"
    seen: list[int] = []

    def progress(p: BatchProgress) -> None:
        seen.append(p.in_flight)

    with trio.fail_after(GUARD):
        async with open_runtime(RuntimeConfig(), simulator=SimulatorConfig(ttft=0.05)) as rt:
            summary = await run_batch(
                source, out, runtime=rt, max_in_flight=3, progress=progress, progress_interval=0.01
            )
    assert summary.written == 12
    assert max(seen) == 3  # calls did overlap, and never more than three
    assert seen[-1] == 0


async def test_run_batch_refuses_to_write_over_its_input(tmp_path):
    source = tmp_path / "in.jsonl"
    source.write_text(request_line("a") + "\n")
    (tmp_path / "link.jsonl").symlink_to(source)
    before = source.read_bytes()
    with trio.fail_after(GUARD):
        async with open_runtime(RuntimeConfig()) as rt:
            for output in (source, tmp_path / "link.jsonl", tmp_path / "." / "in.jsonl"):
                with pytest.raises(ConfigError, match="is the input file"):
                    await run_batch(source, output, runtime=rt)
    assert source.read_bytes() == before
