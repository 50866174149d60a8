"""The simulator's Anthropic Message Batches API through its httpx transport: the objects,
statuses and result types Anthropic documents, each result equal to the realtime
``/v1/messages`` reply, and the refusals of a bad create. Socket-free, on ``autojump_clock``."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest
import trio

from sluice.simulator import SimulatorApp, SimulatorConfig, mock_transport

HEADERS = {"anthropic-version": "2023-06-01", "x-api-key": "k"}


def client(app: SimulatorApp) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=mock_transport(app), base_url="http://sim/v1", headers=HEADERS
    )


def params(i: int) -> dict[str, Any]:
    return {
        "model": "sim-small",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": f"line {i}"}],
    }


def requests(n: int) -> list[dict[str, Any]]:
    return [{"custom_id": f"req-{i}", "params": params(i)} for i in range(n)]


async def create(c: httpx.AsyncClient, items: list[dict[str, Any]]) -> dict[str, Any]:
    r = await c.post("/messages/batches", json={"requests": items})
    assert r.status_code == 200, r.text
    batch: dict[str, Any] = r.json()
    return batch


async def results(c: httpx.AsyncClient, batch_id: str) -> list[dict[str, Any]]:
    r = await c.get(f"/messages/batches/{batch_id}/results")
    assert r.status_code == 200, r.text
    return [orjson.loads(line) for line in r.content.splitlines()]


async def test_a_message_batch_runs_and_each_result_is_the_realtime_message(
    autojump_clock: trio.testing.MockClock,
) -> None:
    app = SimulatorApp(SimulatorConfig(batch_time=100.0, seed=5))
    async with client(app) as c:
        batch = await create(c, requests(10))
        assert batch["type"] == "message_batch" and batch["id"].startswith("msgbatch_")
        assert batch["processing_status"] == "in_progress" and batch["results_url"] is None
        assert batch["request_counts"] == {
            "processing": 10,
            "succeeded": 0,
            "errored": 0,
            "canceled": 0,
            "expired": 0,
        }
        assert batch["created_at"].endswith("Z") and batch["archived_at"] is None
        early = await c.get(f"/messages/batches/{batch['id']}/results")
        assert early.status_code == 400 and early.json()["type"] == "error"
        await trio.sleep(50.0)
        half = (await c.get(f"/messages/batches/{batch['id']}")).json()
        assert half["request_counts"]["succeeded"] == 5
        assert half["request_counts"]["processing"] == 5
        await trio.sleep(50.0)
        ended = (await c.get(f"/messages/batches/{batch['id']}")).json()
        assert ended["processing_status"] == "ended" and ended["ended_at"] is not None
        assert ended["results_url"] == f"http://sim/v1/messages/batches/{batch['id']}/results"
        lines = await results(c, batch["id"])
        assert [line["custom_id"] for line in lines] == [f"req-{i}" for i in range(10)]
        for i, line in enumerate(lines):
            assert line["result"]["type"] == "succeeded"
            realtime = (await c.post("/messages", json=params(i))).json()
            message = line["result"]["message"]
            assert {k: v for k, v in message.items() if k != "id"} == {
                k: v for k, v in realtime.items() if k != "id"
            }


async def test_errored_expired_and_canceled_results(
    autojump_clock: trio.testing.MockClock,
) -> None:
    config = SimulatorConfig(batch_time=100.0, batch_error_rate=0.3, batch_expiry_rate=0.2)
    app = SimulatorApp(config)
    async with client(app) as c:
        bad = {"custom_id": "bad", "params": {"model": "sim-small", "max_tokens": 5}}
        batch = await create(c, [*requests(100), bad])
        await trio.sleep(100.0)
        lines = {line["custom_id"]: line["result"] for line in await results(c, batch["id"])}
        kinds = [r["type"] for r in lines.values()]
        assert set(kinds) == {"succeeded", "errored", "expired"} and len(lines) == 101
        refused = lines["bad"]
        assert refused["type"] == "errored"
        assert refused["error"]["error"]["type"] == "invalid_request_error"
        drawn = next(r for k, r in lines.items() if r["type"] == "errored" and k != "bad")
        assert drawn["error"] == {
            "type": "error",
            "error": {"type": "api_error", "message": "Internal server error (simulated)"},
            "request_id": drawn["error"]["request_id"],
        }
        ended = (await c.get(f"/messages/batches/{batch['id']}")).json()
        counts = ended["request_counts"]
        assert counts["errored"] == kinds.count("errored")
        assert counts["expired"] == kinds.count("expired") and counts["processing"] == 0

    plain = SimulatorApp(SimulatorConfig(batch_time=100.0))
    async with client(plain) as c:
        second = await create(c, requests(10))
        await trio.sleep(30.0)
        canceling = (await c.post(f"/messages/batches/{second['id']}/cancel")).json()
        assert canceling["processing_status"] == "canceling"
        assert canceling["cancel_initiated_at"] is not None
        await trio.sleep(1.0)
        lines2 = await results(c, second["id"])
        done = [line["result"]["type"] for line in lines2]
        assert done == ["succeeded"] * 3 + ["canceled"] * 7
        assert (await c.post(f"/messages/batches/{second['id']}/cancel")).status_code == 400


@pytest.mark.parametrize(
    ("items", "status", "kind"),
    [
        ([{"custom_id": "has space", "params": params(0)}], 400, "invalid_request_error"),
        ([{"custom_id": "x" * 65, "params": params(0)}], 400, "invalid_request_error"),
        (requests(1) + requests(1), 400, "invalid_request_error"),
        ([{"custom_id": "a"}], 400, "invalid_request_error"),
        ([], 400, "invalid_request_error"),
        (requests(4), 400, "invalid_request_error"),  # over batch_max_requests
    ],
)
async def test_a_bad_create_is_refused_and_makes_nothing(
    autojump_clock: trio.testing.MockClock, items: list[dict[str, Any]], status: int, kind: str
) -> None:
    app = SimulatorApp(SimulatorConfig(batch_max_requests=3))
    async with client(app) as c:
        r = await c.post("/messages/batches", json={"requests": items})
        assert r.status_code == status and r.json()["error"]["type"] == kind
        assert r.headers["request-id"]
        assert app.batch_stats.batches_created == 0


async def test_size_and_enqueued_token_limits(autojump_clock: trio.testing.MockClock) -> None:
    app = SimulatorApp(
        SimulatorConfig(batch_time=10.0, batch_max_bytes=2000, batch_enqueued_tokens=6)
    )
    async with client(app) as c:
        big = await c.post("/messages/batches", json={"requests": requests(30)})
        assert big.status_code == 413 and big.json()["error"]["type"] == "request_too_large"
        await create(c, requests(3))  # 2 prompt tokens each: 6, the limit
        over = await c.post("/messages/batches", json={"requests": requests(1)})
        assert over.status_code == 429 and over.json()["error"]["type"] == "rate_limit_error"
        await trio.sleep(10.0)
        await create(c, requests(1))
        assert app.batch_stats.batches_created == 2


async def test_list_pages_newest_first(autojump_clock: trio.testing.MockClock) -> None:
    app = SimulatorApp(SimulatorConfig())
    async with client(app) as c:
        made = [(await create(c, requests(1)))["id"] for _ in range(5)]
        page = (await c.get("/messages/batches", params={"limit": 2})).json()
        assert [b["id"] for b in page["data"]] == made[::-1][:2] and page["has_more"] is True
        assert page["first_id"] == made[4] and page["last_id"] == made[3]
        rest = (await c.get("/messages/batches", params={"after_id": made[3]})).json()
        assert [b["id"] for b in rest["data"]] == made[::-1][2:] and rest["has_more"] is False
        back = (await c.get("/messages/batches", params={"before_id": made[1], "limit": 2})).json()
        assert [b["id"] for b in back["data"]] == [made[3], made[2]]
        assert (await c.get("/messages/batches/msgbatch_nope")).status_code == 404
