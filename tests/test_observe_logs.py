"""Log lines of notable events under the ``sluice`` logger, and the JSON formatter."""

from __future__ import annotations

import logging

import orjson
import trio

import sluice
from sluice import RateLimitConfig, RetryConfig, RuntimeConfig, Secret
from sluice._config import ProviderConfig
from sluice._observe.logs import JsonFormatter
from sluice.simulator import SimulatorConfig, mock_transport

from .helpers import virtual_deadline

KEY = "sk-do-not-log-me-123"


@virtual_deadline(60)
async def test_retry_cooldown_and_failure_each_log_one_line_without_the_key(
    autojump_clock, caplog
):
    caplog.set_level(logging.INFO, logger="sluice")
    sim = SimulatorConfig(script=("429:retry_after=3", "ok", "disconnect:2", "ok", "400"))
    config = RuntimeConfig(
        providers={
            "sim": ProviderConfig(
                api_key=Secret(KEY), rate_limit=RateLimitConfig(cooldown_jitter=0.0)
            )
        },
        retry=RetryConfig(jitter=0.0),
    )
    async with sluice.open_runtime(config, transport=mock_transport(sim)) as rt:
        await rt.chat("sim:sim-small", "one")  # 429, a 3 s cooldown, then ok
        async with rt.stream("sim:sim-small", "two") as call:  # reset mid-stream, then ok
            async for _ in call:
                pass
        try:
            await rt.chat("sim:sim-small", "three")
        except sluice.BadRequest:
            pass
        await trio.sleep(2)  # the watcher looks once a second
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("sluice")]
    text = "\n".join(lines)
    assert KEY not in text
    assert sum("failed: RateLimited" in line for line in lines) == 1
    assert sum("retry, attempt 2" in line for line in lines) == 2
    assert sum("stream reset after" in line for line in lines) == 1
    assert sum("failed: BadRequest" in line for line in lines) == 1
    assert sum(line.startswith("call c3 to sim:sim-small failed") for line in lines) == 1
    assert sum("sim: cooling down for" in line for line in lines) == 1
    assert sum("sim: cooldown over" in line for line in lines) == 1

    formatter = JsonFormatter()
    for record in caplog.records:
        parsed = orjson.loads(formatter.format(record))
        assert parsed["logger"].startswith("sluice") and parsed["msg"] == record.getMessage()
        assert {"ts", "level"} <= parsed.keys()


def test_the_json_formatter_keeps_extra_fields_and_tracebacks():
    record = logging.makeLogRecord(
        {"name": "sluice.x", "levelname": "INFO", "msg": "hello %s", "args": ("you",)}
    )
    record.provider = "sim"
    try:
        raise ValueError("boom")
    except ValueError:
        import sys

        record.exc_info = sys.exc_info()
    parsed = orjson.loads(JsonFormatter().format(record))
    assert parsed["msg"] == "hello you" and parsed["provider"] == "sim"
    assert "ValueError: boom" in parsed["exc"]
