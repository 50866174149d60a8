"""The gateway's model allow-list: names outside it are refused with 404 in the client's own
error format, before the runtime makes anything (a breaker, a quota key, a series) for them.
Over memory streams, virtual time."""

from __future__ import annotations

import orjson
import pytest

from sluice._gateway import GatewaySettings

from .gateway_helpers import ANTHROPIC, chat_body, gateway_harness, messages_body
from .helpers import virtual_deadline

CONFIG = {
    "ledger": {"persist": False},
    "providers": {"sim": {"rate_limit": {"key": "model"}}},
    "groups": {"pool": {"deployments": [{"model": "sim:sim-large"}]}},
}
ALLOWED = GatewaySettings(
    require_key=False,
    models=frozenset({"sim:sim-small", "tiny"}),
    aliases={"fast": "sim:sim-small"},
    default_provider="sim",
)


async def runtime_names(gw) -> set[str]:
    """Every name the runtime holds state under: breakers, quota keys, metric labels."""
    stats = await gw.gateway.rt.statistics()
    text = (await gw.gateway.rt.render_metrics()).decode()
    return {*stats.breakers, *stats.quotas, text}


@virtual_deadline(60)
async def test_an_unknown_model_gets_404_in_openai_and_anthropic_format_and_makes_nothing(
    autojump_clock,
):
    async with gateway_harness(config=CONFIG, settings=ALLOWED) as gw:
        status, headers, body = await gw.call("/v1/chat/completions", chat_body("sim:m-1"))
        assert status == 404 and headers["content-type"] == "application/json"
        error = orjson.loads(body)["error"]
        assert error["type"] == "invalid_request_error" and error["code"] == "model_not_found"
        assert "'sim:m-1' is not served here" in error["message"]

        status, _, body = await gw.call("/v1/messages", messages_body("sim:m-2"), headers=ANTHROPIC)
        reply = orjson.loads(body)
        assert status == 404 and reply["type"] == "error"
        assert reply["error"]["type"] == "not_found_error"
        assert "'sim:m-2' is not served here" in reply["error"]["message"]

        status, _, body = await gw.call("/v1/chat/completions", chat_body("sim:" + "x" * 5000))
        assert status == 404 and len(body) < 500  # a long name is not echoed back whole
        for refused in ("m-3", "", 7):  # bare, empty, not a string: all outside the list
            status, _, _ = await gw.call("/v1/chat/completions", {**chat_body(), "model": refused})
            assert status == 404
        held = await runtime_names(gw)
        assert not any("m-1" in h or "m-2" in h or "m-3" in h for h in held)
        assert gw.sim.chat_requests_seen == 0


@pytest.mark.parametrize(
    "name",
    [
        "sim:sim-small",  # listed
        "fast",  # an alias: always served
        "pool",  # a group of the config: always served
        "tiny",  # a bare name listed, through the default provider
    ],
)
@virtual_deadline(60)
async def test_listed_names_aliases_and_groups_are_served(autojump_clock, name):
    async with gateway_harness(config=CONFIG, settings=ALLOWED) as gw:
        status, _, body = await gw.call("/v1/chat/completions", chat_body(name))
        assert status == 200, body
        assert orjson.loads(body)["choices"][0]["message"]["content"]
        status, _, _ = await gw.call("/v1/messages", messages_body(name), headers=ANTHROPIC)
        assert status == 200


@virtual_deadline(60)
async def test_the_config_key_is_the_allow_list_unless_settings_give_one(autojump_clock):
    config = {**CONFIG, "gateway": {"models": ["sim:sim-small"]}}
    async with gateway_harness(config=config, settings=GatewaySettings(require_key=False)) as gw:
        assert gw.gateway.settings.models == frozenset({"sim:sim-small"})
        status, _, _ = await gw.call("/v1/chat/completions", chat_body("sim:sim-small"))
        assert status == 200
        status, _, _ = await gw.call("/v1/chat/completions", chat_body("sim:sim-large"))
        assert status == 404
    given = GatewaySettings(require_key=False, models=frozenset({"sim:sim-large"}))
    async with gateway_harness(config=config, settings=given) as gw:  # --models wins
        status, _, _ = await gw.call("/v1/chat/completions", chat_body("sim:sim-small"))
        assert status == 404
        status, _, _ = await gw.call("/v1/chat/completions", chat_body("sim:sim-large"))
        assert status == 200


@virtual_deadline(60)
async def test_without_an_allow_list_any_model_is_served(autojump_clock):
    async with gateway_harness(config=CONFIG, settings=GatewaySettings(require_key=False)) as gw:
        status, _, _ = await gw.call("/v1/chat/completions", chat_body("sim:anything-at-all"))
        assert status == 200


def test_the_config_key_is_checked_with_a_clear_error():
    import sluice

    assert sluice.load_config({"gateway": {"models": ["a:b"]}}).gateway.models == ("a:b",)
    with pytest.raises(sluice.ConfigError, match="gateway"):
        sluice.load_config({"gateway": {"models": [""]}})
    with pytest.raises(sluice.ConfigError, match="unknown key 'model'"):
        sluice.load_config({"gateway": {"model": ["a:b"]}})
