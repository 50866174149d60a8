"""The simulator's OpenAI Files + Batches API through its httpx transport: the objects and
statuses OpenAI documents, each line's reply equal to the realtime route's, the fault and
limit knobs, and the counters. No sockets; timed tests run on ``autojump_clock``."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest
import trio

from sluice.simulator import SimulatorApp, SimulatorConfig, mock_transport

CHAT = "/v1/chat/completions"


def client(app: SimulatorApp) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=mock_transport(app), base_url="http://sim/v1")


def body(i: int, **more: Any) -> dict[str, Any]:
    return {"model": "sim-small", "messages": [{"role": "user", "content": f"line {i}"}], **more}


def jsonl(n: int, **more: Any) -> bytes:
    return b"".join(
        orjson.dumps({"custom_id": f"r{i}", "method": "POST", "url": CHAT, "body": body(i, **more)})
        + b"\n"
        for i in range(n)
    )


async def upload(c: httpx.AsyncClient, content: bytes) -> str:
    r = await c.post("/files", files={"file": ("in.jsonl", content)}, data={"purpose": "batch"})
    assert r.status_code == 200, r.text
    file_id: str = r.json()["id"]
    return file_id


async def create(c: httpx.AsyncClient, file_id: str, **more: Any) -> dict[str, Any]:
    fields = {"input_file_id": file_id, "endpoint": CHAT, "completion_window": "24h", **more}
    r = await c.post("/batches", json=fields)
    assert r.status_code == 200, r.text
    batch: dict[str, Any] = r.json()
    return batch


async def lines(c: httpx.AsyncClient, file_id: str | None) -> list[dict[str, Any]]:
    if file_id is None:
        return []
    r = await c.get(f"/files/{file_id}/content")
    assert r.status_code == 200
    return [orjson.loads(line) for line in r.content.splitlines()]


def without_ids(reply: dict[str, Any]) -> dict[str, Any]:
    """A chat completion less the two fields that differ between any two calls."""
    return {k: v for k, v in reply.items() if k not in ("id", "created")}


async def test_a_batch_runs_its_timeline_and_each_reply_is_the_realtime_one(
    autojump_clock: trio.testing.MockClock,
) -> None:
    app = SimulatorApp(SimulatorConfig(batch_time=100.0, seed=7))
    async with client(app) as c:
        file_id = await upload(c, jsonl(10))
        file = (await c.get(f"/files/{file_id}")).json()
        assert file["object"] == "file" and file["purpose"] == "batch"
        assert file["bytes"] == len(jsonl(10)) and file["status"] == "processed"
        batch = await create(c, file_id, metadata={"sluice_fingerprint": "fp-1"})
        assert batch["object"] == "batch" and batch["status"] == "validating"
        assert batch["metadata"] == {"sluice_fingerprint": "fp-1"}
        assert batch["request_counts"] == {"total": 10, "completed": 0, "failed": 0}
        assert (
            batch["output_file_id"] is None and batch["expires_at"] == batch["created_at"] + 86400
        )
        await trio.sleep(50.0)
        half = (await c.get(f"/batches/{batch['id']}")).json()
        assert half["status"] == "in_progress"
        assert half["request_counts"] == {"total": 10, "completed": 5, "failed": 0}
        await trio.sleep(45.0)
        assert (await c.get(f"/batches/{batch['id']}")).json()["status"] == "finalizing"
        await trio.sleep(5.0)
        done = (await c.get(f"/batches/{batch['id']}")).json()
        assert done["status"] == "completed" and done["completed_at"] is not None
        assert done["request_counts"] == {"total": 10, "completed": 10, "failed": 0}
        assert done["error_file_id"] is None
        out = await lines(c, done["output_file_id"])
        assert [line["custom_id"] for line in out] == [f"r{i}" for i in range(10)]
        for i, line in enumerate(out):
            assert line["error"] is None and line["id"].startswith("batch_req_")
            assert line["response"]["status_code"] == 200
            realtime = (await c.post("/chat/completions", json=body(i))).json()
            assert without_ids(line["response"]["body"]) == without_ids(realtime)
        output = (await c.get(f"/files/{done['output_file_id']}")).json()
        assert output["purpose"] == "batch_output"
        assert output["bytes"] == len(
            (await c.get(f"/files/{done['output_file_id']}/content")).content
        )


async def test_errored_and_expired_lines_go_to_the_error_file_as_openai_writes_them(
    autojump_clock: trio.testing.MockClock,
) -> None:
    config = SimulatorConfig(batch_time=10.0, batch_error_rate=0.2, batch_expiry_rate=0.1)
    app = SimulatorApp(config)
    async with client(app) as c:
        batch = await create(c, await upload(c, jsonl(200)))
        await trio.sleep(10.0)
        done = (await c.get(f"/batches/{batch['id']}")).json()
        assert done["status"] == "expired" and done["expired_at"] is not None
        out = await lines(c, done["output_file_id"])
        errors = await lines(c, done["error_file_id"])
        expired = [e for e in errors if e["response"] is None]
        failed = [e for e in errors if e["response"] is not None]
        assert len(out) + len(errors) == 200
        assert 20 <= len(failed) <= 60 and 5 <= len(expired) <= 40
        assert done["request_counts"] == {
            "total": 200,
            "completed": len(out),
            "failed": len(errors),
        }
        assert expired[0]["error"]["code"] == "batch_expired"
        assert failed[0]["response"]["status_code"] == 500
        assert failed[0]["response"]["body"]["error"]["type"] == "server_error"
        ids = {line["custom_id"] for line in out + errors}
        assert ids == {f"r{i}" for i in range(200)}
        # The same seed draws the same fates: a second app agrees line for line.
        again = SimulatorApp(config)
        async with client(again) as c2:
            batch2 = await create(c2, await upload(c2, jsonl(200)))
            await trio.sleep(10.0)
            done2 = (await c2.get(f"/batches/{batch2['id']}")).json()
            assert done2["request_counts"] == done["request_counts"]


async def test_a_request_the_route_refuses_is_an_error_line_with_its_400(
    autojump_clock: trio.testing.MockClock,
) -> None:
    app = SimulatorApp(SimulatorConfig())
    async with client(app) as c:
        bad = orjson.dumps(
            {"custom_id": "bad", "method": "POST", "url": CHAT, "body": {"model": "sim-small"}}
        )
        batch = await create(c, await upload(c, jsonl(2) + bad + b"\n"))
        await trio.sleep(1.0)
        done = (await c.get(f"/batches/{batch['id']}")).json()
        assert done["status"] == "completed"
        assert done["request_counts"] == {"total": 3, "completed": 2, "failed": 1}
        [error] = await lines(c, done["error_file_id"])
        assert error["custom_id"] == "bad" and error["response"]["status_code"] == 400
        realtime = await c.post("/chat/completions", json={"model": "sim-small"})
        assert error["response"]["body"] == realtime.json()


@pytest.mark.parametrize(
    ("content", "code"),
    [
        (b"not json\n", "invalid_json_line"),
        (jsonl(1) + jsonl(1), "duplicate_custom_id"),
        (jsonl(1).replace(b"/v1/chat/completions", b"/v1/embeddings"), "mismatched_url"),
        (b"\n", "empty_file"),
    ],
)
async def test_a_file_that_breaks_a_rule_makes_a_failed_batch(
    autojump_clock: trio.testing.MockClock, content: bytes, code: str
) -> None:
    app = SimulatorApp(SimulatorConfig())
    async with client(app) as c:
        batch = await create(c, await upload(c, content))
        await trio.sleep(1.0)
        failed = (await c.get(f"/batches/{batch['id']}")).json()
        assert failed["status"] == "failed" and failed["failed_at"] is not None
        assert failed["errors"]["object"] == "list"
        assert failed["errors"]["data"][0]["code"] == code
        assert failed["output_file_id"] is None and failed["error_file_id"] is None


async def test_limits_requests_per_batch_file_size_and_enqueued_tokens(
    autojump_clock: trio.testing.MockClock,
) -> None:
    config = SimulatorConfig(
        batch_time=100.0, batch_max_requests=5, batch_max_bytes=4000, batch_enqueued_tokens=30
    )
    app = SimulatorApp(config)
    async with client(app) as c:
        too_many = await create(c, await upload(c, jsonl(6)))
        r = await c.post(
            "/files", files={"file": ("big.jsonl", b"x" * 4001)}, data={"purpose": "batch"}
        )
        assert r.status_code == 400 and r.json()["error"]["param"] == "file"
        # Each line's prompt is 2 tokens: 5 lines hold 10 of the 30.
        first = await create(c, await upload(c, jsonl(5)))
        second = await create(c, await upload(c, jsonl(5)))
        third = await create(c, await upload(c, jsonl(5)))
        over = await create(c, await upload(c, jsonl(5)))
        await trio.sleep(1.0)
        states = {
            b["id"]: (await c.get(f"/batches/{b['id']}")).json()
            for b in (too_many, first, second, third, over)
        }
        assert states[too_many["id"]]["errors"]["data"][0]["code"] == "too_many_requests"
        assert [states[b["id"]]["status"] for b in (first, second, third)] == ["in_progress"] * 3
        refused = states[over["id"]]
        assert refused["status"] == "failed"
        error = refused["errors"]["data"][0]
        assert error["code"] == "token_limit_exceeded"
        assert "Limit: 30 enqueued tokens" in error["message"]
        await trio.sleep(100.0)  # the first three end: their tokens are free again
        again = await create(c, await upload(c, jsonl(5)))
        await trio.sleep(1.0)
        assert (await c.get(f"/batches/{again['id']}")).json()["status"] == "in_progress"


async def test_list_pages_newest_first_with_after_and_limit(
    autojump_clock: trio.testing.MockClock,
) -> None:
    app = SimulatorApp(SimulatorConfig())
    async with client(app) as c:
        file_id = await upload(c, jsonl(1))
        made = [(await create(c, file_id))["id"] for _ in range(5)]
        page = (await c.get("/batches", params={"limit": 2})).json()
        assert page["object"] == "list" and page["has_more"] is True
        assert [b["id"] for b in page["data"]] == made[::-1][:2]
        assert page["first_id"] == made[4] and page["last_id"] == made[3]
        rest = (await c.get("/batches", params={"limit": 10, "after": page["last_id"]})).json()
        assert [b["id"] for b in rest["data"]] == made[::-1][2:] and rest["has_more"] is False


async def test_cancel_stops_a_batch_and_keeps_what_was_done(
    autojump_clock: trio.testing.MockClock,
) -> None:
    app = SimulatorApp(SimulatorConfig(batch_time=100.0))
    async with client(app) as c:
        batch = await create(c, await upload(c, jsonl(10)))
        await trio.sleep(30.0)
        cancelling = (await c.post(f"/batches/{batch['id']}/cancel")).json()
        assert cancelling["status"] == "cancelling" and cancelling["cancelling_at"] is not None
        await trio.sleep(1.0)
        cancelled = (await c.get(f"/batches/{batch['id']}")).json()
        assert cancelled["status"] == "cancelled" and cancelled["cancelled_at"] is not None
        assert cancelled["request_counts"] == {"total": 10, "completed": 3, "failed": 0}
        out = await lines(c, cancelled["output_file_id"])
        assert [line["custom_id"] for line in out] == ["r0", "r1", "r2"]
        assert cancelled["error_file_id"] is None
        again = await c.post(f"/batches/{batch['id']}/cancel")
        assert again.status_code == 400
        assert app.batch_stats.cancels == 1


async def test_a_delayed_create_answer_comes_after_the_batch_exists(
    autojump_clock: trio.testing.MockClock,
) -> None:
    app = SimulatorApp(SimulatorConfig(batch_create_delay=30.0))
    async with client(app) as c:
        file_id = await upload(c, jsonl(3))
        seen: list[dict[str, Any]] = []

        async def look() -> None:
            await trio.sleep(10.0)
            seen.extend((await c.get("/batches")).json()["data"])

        async with trio.open_nursery() as nursery:
            nursery.start_soon(look)
            start = trio.current_time()
            batch = await create(c, file_id, metadata={"sluice_fingerprint": "fp"})
            assert trio.current_time() - start == 30.0
        assert [b["id"] for b in seen] == [batch["id"]]
        assert seen[0]["metadata"] == {"sluice_fingerprint": "fp"}
        stats = app.batch_stats
        assert stats.batches_created == 1 and stats.files_uploaded == 1
        assert list(stats.creates_by_content.values()) == [1]
        await create(c, file_id)  # the same lines again: a duplicate paid job
        assert list(app.batch_stats.creates_by_content.values()) == [2]
        served = (await c.get("/sim/stats")).json()
        assert served["duplicate_creates"] == 1 and served["batches_created"] == 2
        assert served["creates_by_metadata"] == {"sluice_fingerprint=fp": 1}


async def test_downloads_are_paced_by_the_download_rate(
    autojump_clock: trio.testing.MockClock,
) -> None:
    app = SimulatorApp(SimulatorConfig(batch_download_rate=1000.0))
    async with client(app) as c:
        content = jsonl(50)
        file_id = await upload(c, content)
        start = trio.current_time()
        r = await c.get(f"/files/{file_id}/content")
        assert r.content == content
        assert trio.current_time() - start == pytest.approx(len(content) / 1000.0)


async def test_bad_creates_are_refused_as_openai_refuses_them(
    autojump_clock: trio.testing.MockClock,
) -> None:
    app = SimulatorApp(SimulatorConfig())
    async with client(app) as c:
        file_id = await upload(c, jsonl(1))
        base: dict[str, Any] = {
            "input_file_id": file_id,
            "endpoint": CHAT,
            "completion_window": "24h",
        }
        changes: list[tuple[dict[str, Any], str]] = [
            ({"input_file_id": "file-nope"}, "input_file_id"),
            ({"completion_window": "1h"}, "completion_window"),
            ({"endpoint": "/v1/nope"}, "endpoint"),
            ({"metadata": {"k": 1}}, "metadata"),
        ]
        for change, param in changes:
            r = await c.post("/batches", json=base | change)
            assert r.status_code == 400 and r.json()["error"]["param"] == param
        assert (await c.get("/batches/batch_nope")).status_code == 404
        assert (await c.get("/files/file-nope/content")).status_code == 404
        r = await c.post(
            "/files", files={"file": ("a.jsonl", b"{}")}, data={"purpose": "fine-tune"}
        )
        assert r.status_code == 400
        assert app.batch_stats.batches_created == 0


def test_sim_flags_set_the_batch_knobs() -> None:
    from sluice._cli import main
    from sluice._cli.sim import SimFlags

    flags = SimFlags(
        batch_time=5.0,
        batch_error_rate=0.02,
        batch_expiry_rate=0.05,
        batch_max_requests=10_000,
        batch_max_bytes=1_000_000,
        batch_enqueued_tokens=90_000,
        batch_upload_delay=1.5,
        batch_create_delay=2.0,
        batch_download_rate=50_000.0,
    )
    config = flags.simulator_config()
    assert (config.batch_time, config.batch_error_rate, config.batch_expiry_rate) == (
        5.0,
        0.02,
        0.05,
    )
    assert (config.batch_max_requests, config.batch_max_bytes) == (10_000, 1_000_000)
    assert config.batch_enqueued_tokens == 90_000 and config.batch_create_delay == 2.0
    assert config.batch_upload_delay == 1.5
    assert config.batch_download_rate == 50_000.0
    assert main(["sim", "--batch-error-rate", "0.7", "--batch-expiry-rate", "0.5"]) == 2
