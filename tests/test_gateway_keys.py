"""Virtual keys at the gateway, in virtual time: per-key rate limits with 429 + Retry-After,
revocation (in memory and through the key file), budgets, allowed models, ledger tags."""

import orjson
import pytest
import trio

from sluice._gateway import GatewaySettings, KeyRing, issue_key, revoke_key
from sluice._gateway.vkeys import VirtualKey, hash_token, load_keys, save_keys
from sluice._ledger.store import MemoryLedgerStore

from .gateway_helpers import ANTHROPIC, chat_body, gateway_harness, messages_body
from .helpers import virtual_deadline


def _ring(**specs):
    keys: dict[str, VirtualKey] = {}
    tokens: dict[str, str] = {}
    for name, limits in specs.items():
        key, token = issue_key(keys, name, now=0.0, **limits)
        keys[name] = key
        tokens[name] = token
    return KeyRing(None, keys), tokens


@virtual_deadline(300)
async def test_sixty_first_call_in_a_minute_gets_429_with_retry_after(autojump_clock):
    ring, tokens = _ring(alice={"rpm": 60}, bob={"rpm": 60})
    async with gateway_harness(keys=ring) as gw:
        for _ in range(60):
            status, _, _ = await gw.call("/v1/chat/completions", chat_body(), token=tokens["alice"])
            assert status == 200
        status, headers, body = await gw.call(
            "/v1/chat/completions", chat_body(), token=tokens["alice"]
        )
        assert status == 429
        assert headers["retry-after"] == "60"
        error = orjson.loads(body)["error"]
        assert error["code"] == "rate_limit_exceeded" and "alice" in error["message"]
        # The same refusal in the Anthropic format for an Anthropic client.
        status, headers, body = await gw.call(
            "/v1/messages", messages_body(), token=tokens["alice"], headers=ANTHROPIC
        )
        assert status == 429 and headers["retry-after"] == "60"
        assert orjson.loads(body)["error"]["type"] == "rate_limit_error"
        # Another key is not affected.
        status, _, _ = await gw.call("/v1/chat/completions", chat_body(), token=tokens["bob"])
        assert status == 200
        # A minute after the first calls, alice may call again.
        await trio.sleep(60)
        status, _, _ = await gw.call("/v1/chat/completions", chat_body(), token=tokens["alice"])
        assert status == 200
        assert gw.sim.chat_requests_seen == 62


@virtual_deadline(60)
async def test_tokens_per_minute_counts_real_usage(autojump_clock):
    # Each call reserves its prompt estimate + max_tokens (50), then settles with the real
    # usage (24 output tokens from the simulator), so more calls fit than the reservation says.
    ring, tokens = _ring(carol={"tpm": 200})
    async with gateway_harness(keys=ring) as gw:
        statuses = []
        for _ in range(12):
            status, _, _ = await gw.call(
                "/v1/chat/completions", chat_body(max_tokens=50), token=tokens["carol"]
            )
            statuses.append(status)
        assert statuses[:6] == [200] * 6 and 429 in statuses
        status, _, body = await gw.call(
            "/v1/chat/completions", chat_body(max_tokens=500), token=tokens["carol"]
        )
        assert (
            status == 429
            and "more than key 'carol' may use" in orjson.loads(body)["error"]["message"]
        )


@virtual_deadline(60)
async def test_missing_invalid_and_revoked_keys_get_401(autojump_clock):
    ring, tokens = _ring(dave={})
    async with gateway_harness(keys=ring) as gw:
        status, _, body = await gw.call("/v1/chat/completions", chat_body())
        assert status == 401 and orjson.loads(body)["error"]["code"] == "invalid_api_key"
        status, _, _ = await gw.call("/v1/chat/completions", chat_body(), token="sk-sluice-nope")
        assert status == 401
        status, _, _ = await gw.call("/v1/chat/completions", chat_body(), token=tokens["dave"])
        assert status == 200
        ring.put(revoke_key(ring.by_name, "dave"))
        status, _, body = await gw.call("/v1/chat/completions", chat_body(), token=tokens["dave"])
        assert status == 401
        status, _, body = await gw.call(
            "/v1/messages", messages_body(), token=tokens["dave"], headers=ANTHROPIC
        )
        assert status == 401
        assert orjson.loads(body) == {
            "type": "error",
            "error": {"type": "authentication_error", "message": "invalid or revoked API key"},
        }
        assert gw.sim.chat_requests_seen == 1


@virtual_deadline(60)
async def test_a_key_revoked_in_the_file_is_refused_by_the_running_gateway(
    autojump_clock, tmp_path
):
    path = tmp_path / "keys.json"
    key, token = issue_key({}, "erin", now=0.0)
    save_keys(path, [key])
    async with gateway_harness(keys=KeyRing(path)) as gw:
        status, _, _ = await gw.call("/v1/chat/completions", chat_body(), token=token)
        assert status == 200
        keys = load_keys(path)
        save_keys(path, [revoke_key(keys, "erin")])
        await trio.sleep(1.0)  # the ring looks at the file once a second
        status, _, _ = await gw.call("/v1/chat/completions", chat_body(), token=token)
        assert status == 401


@virtual_deadline(60)
async def test_a_spent_budget_fails_in_the_clients_format(autojump_clock):
    # sim models cost $1/M input and $4/M output tokens: a call of 24 output tokens and at
    # most 50 costs 0.0001 to 0.0002 dollars; 0.001 dollars lasts a handful of calls.
    ring, tokens = _ring(frank={"budget_usd": 0.001}, grace={})
    async with gateway_harness(keys=ring) as gw:
        calls = 0
        while True:
            status, headers, body = await gw.call(
                "/v1/chat/completions", chat_body(max_tokens=50), token=tokens["frank"]
            )
            if status != 200:
                break
            calls += 1
            assert calls < 20
        assert calls >= 3
        assert status == 429 and headers["x-should-retry"] == "false"
        error = orjson.loads(body)["error"]
        assert error["type"] == "insufficient_quota" and "tag 'frank' budget" in error["message"]
        status, headers, body = await gw.call(
            "/v1/messages", messages_body(max_tokens=50), token=tokens["frank"], headers=ANTHROPIC
        )
        assert status == 400 and headers["x-should-retry"] == "false"
        assert orjson.loads(body)["error"]["type"] == "invalid_request_error"
        status, _, _ = await gw.call(
            "/v1/chat/completions", chat_body(max_tokens=50), token=tokens["grace"]
        )
        assert status == 200
        rows = await gw.gateway.rt.ledger.snapshot(by=("tag",))
        by_tag = {row.tag: row for row in rows}
        assert by_tag["frank"].totals.calls == calls + 2  # the two refused calls count too
        assert by_tag["grace"].totals.calls == 1


@virtual_deadline(60)
async def test_allowed_models_and_model_list(autojump_clock):
    ring, tokens = _ring(heidi={"models": ["sim:sim-small"]})
    settings = GatewaySettings(aliases={"small": "sim:sim-small", "other": "sim:other"})
    async with gateway_harness(keys=ring, settings=settings) as gw:
        status, _, _ = await gw.call(
            "/v1/chat/completions", chat_body("small"), token=tokens["heidi"]
        )
        assert status == 200
        status, _, body = await gw.call(
            "/v1/chat/completions", chat_body("sim:other"), token=tokens["heidi"]
        )
        assert status == 403 and orjson.loads(body)["error"]["code"] == "model_not_allowed"
        status, _, body = await gw.call("/v1/models", None, token=tokens["heidi"], method="GET")
        assert status == 200
        assert [m["id"] for m in orjson.loads(body)["data"]] == ["sim:sim-small", "small"]
        status, _, body = await gw.call(
            "/v1/chat/completions", chat_body("bare"), token=tokens["heidi"]
        )
        assert status == 400 and "names no provider" in orjson.loads(body)["error"]["message"]


@virtual_deadline(60)
async def test_admin_api_only_with_the_admin_token(autojump_clock):
    admin = "admin-secret-token"
    settings = GatewaySettings(admin_token_hash=hash_token(admin))
    async with gateway_harness(keys=KeyRing(None), settings=settings) as gw:
        status, _, _ = await gw.call("/admin/keys", {"name": "ivan"}, token="wrong")
        assert status == 401
        status, _, body = await gw.call("/admin/keys", {"name": "ivan", "rpm": 5}, token=admin)
        assert status == 200
        issued = orjson.loads(body)
        assert issued["rpm"] == 5 and issued["key"].startswith("sk-sluice-")
        status, _, _ = await gw.call("/v1/chat/completions", chat_body(), token=issued["key"])
        assert status == 200
        status, _, body = await gw.call("/admin/keys", None, token=admin, method="GET")
        assert [k["name"] for k in orjson.loads(body)["keys"]] == ["ivan"]
        assert "token_hash" not in body.decode() and issued["key"] not in body.decode()
        status, _, _ = await gw.call("/admin/keys/ivan", None, token=admin, method="DELETE")
        assert status == 200
        status, _, _ = await gw.call("/v1/chat/completions", chat_body(), token=issued["key"])
        assert status == 401
    # Without an admin token configured, the admin routes do not exist.
    async with gateway_harness(keys=KeyRing(None)) as gw:
        status, _, _ = await gw.call("/admin/keys", None, token=admin, method="GET")
        assert status == 404


def test_issue_refuses_bad_names_and_live_duplicates():
    from sluice._errors import ConfigError

    key, token = issue_key({}, "judy", now=1.0)
    assert token.startswith("sk-sluice-") and key.token_hash == hash_token(token)
    assert token not in repr(key)
    with pytest.raises(ConfigError, match="exists"):
        issue_key({"judy": key}, "judy", now=2.0)
    again, _ = issue_key({"judy": revoke_key({"judy": key}, "judy")}, "judy", now=3.0)
    assert not again.revoked
    with pytest.raises(ConfigError, match="not a key name"):
        issue_key({}, "bad name", now=0.0)
    with pytest.raises(ConfigError, match="provider:model"):
        issue_key({}, "ok", models=["gpt-4o"], now=0.0)


@virtual_deadline(60)
async def test_a_keys_budget_counts_what_the_ledger_holds_from_earlier_runs(autojump_clock):
    store = MemoryLedgerStore()
    ring, tokens = _ring(kim={"budget_usd": 0.001}, lee={"budget_usd": 0.001})
    async with gateway_harness(keys=ring, ledger_store=store) as gw:
        spent = 0
        while True:
            status, _, _ = await gw.call(
                "/v1/chat/completions", chat_body(max_tokens=50), token=tokens["kim"]
            )
            if status != 200:
                break
            spent += 1
        assert status == 429 and spent >= 3
    # A restarted gateway on the same ledger: kim's budget is still spent, lee's is whole.
    async with gateway_harness(keys=ring, ledger_store=store) as gw:
        status, _, _ = await gw.call(
            "/v1/chat/completions", chat_body(max_tokens=50), token=tokens["kim"]
        )
        assert status == 429
        status, _, _ = await gw.call(
            "/v1/chat/completions", chat_body(max_tokens=50), token=tokens["lee"]
        )
        assert status == 200


async def test_workers_sharing_a_redis_store_share_each_keys_rate_limit(redis_url):
    """Two gateways (as two workers would be) on one Redis store and prefix: a key with
    rpm 3 gets three calls in all, wherever they land; its 4th call gets 429."""
    import uuid

    config = {"ledger": {"persist": False}, "store": redis_url, "store_prefix": uuid.uuid4().hex}
    ring, tokens = _ring(mia={"rpm": 3}, noa={"rpm": 3})
    with trio.fail_after(30):
        async with (
            gateway_harness(keys=ring, config=config) as first,
            gateway_harness(keys=ring, config=config) as second,
        ):
            statuses = []
            for gw in (first, second, first, second):
                status, headers, _ = await gw.call(
                    "/v1/chat/completions", chat_body(), token=tokens["mia"]
                )
                statuses.append(status)
            assert statuses == [200, 200, 200, 429]
            assert 1 <= int(headers["retry-after"]) <= 60
            status, _, _ = await second.call(
                "/v1/chat/completions", chat_body(), token=tokens["noa"]
            )
            assert status == 200


async def test_workers_sharing_a_redis_store_share_each_keys_budget(redis_url):
    """Two gateways (two runtimes, as two workers) on one Redis store and prefix: what a key
    spends through one counts against its budget in the other, and once the shared spend
    leaves too little, both refuse it in the client's own format."""
    import uuid

    config = {"ledger": {"persist": False}, "store": redis_url, "store_prefix": uuid.uuid4().hex}
    ring, tokens = _ring(kim={"budget_usd": 0.001}, lee={"budget_usd": 0.001})
    body = chat_body(max_tokens=50)
    with trio.fail_after(30):
        async with (
            gateway_harness(keys=ring, config=config) as first,
            gateway_harness(keys=ring, config=config) as second,
        ):
            # kim spends through the first gateway alone until its budget refuses...
            alone = 0
            while (
                status := (await first.call("/v1/chat/completions", body, token=tokens["kim"]))[0]
            ) == 200:
                alone += 1
            assert status == 429 and alone >= 3
            # ...and the second gateway, where kim spent nothing, refuses it too.
            status, _, raw = await second.call("/v1/chat/completions", body, token=tokens["kim"])
            assert status == 429
            assert "budget" in orjson.loads(raw)["error"]["message"]
            status, _, raw = await second.call(
                "/v1/messages", messages_body(max_tokens=50), token=tokens["kim"], headers=ANTHROPIC
            )
            assert status == 400
            assert orjson.loads(raw)["error"]["type"] == "invalid_request_error"
            # lee spends the same budget alternating between the two: the same number of
            # calls in all, not twice as many.
            calls = 0
            for gw in [first, second] * alone * 2:
                status, _, _ = await gw.call("/v1/chat/completions", body, token=tokens["lee"])
                if status != 200:
                    break
                calls += 1
            assert status == 429 and calls == alone
            assert first.sim.chat_requests_seen + second.sim.chat_requests_seen == 2 * alone
