"""Model groups through the whole runtime: routing, quotas per deployment, failover before
fallback, breakers, and latency-aware routing, under virtual time over in-memory transports."""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict

import httpx
import orjson
import pytest
import trio

import sluice
from sluice import (
    BreakerConfig,
    ChatRequest,
    ModelGroup,
    ProviderConfig,
    RateLimitConfig,
    RetryConfig,
    RuntimeConfig,
)
from sluice._cli import main
from sluice.simulator import SimulatorApp, SimulatorConfig, mock_transport

from .helpers import virtual_deadline

HOSTS = ("d1", "d2", "d3")


class Fleet:
    """One simulator per deployment host, behind one transport that records every arrival."""

    def __init__(self, configs: dict[str, SimulatorConfig]) -> None:
        self.apps = {host: SimulatorApp(cfg) for host, cfg in configs.items()}
        self.inner = {host: mock_transport(app) for host, app in self.apps.items()}
        self.arrivals: dict[str, list[float]] = defaultdict(list)
        self.delay: dict[str, float] = {}
        self.failing: set[str] = set()

    async def handle(self, request: httpx.Request) -> httpx.Response:
        host = request.url.host
        self.arrivals[host].append(trio.current_time())
        extra = self.delay.get(host, 0.0)
        if extra:
            await trio.sleep(extra)
        if host in self.failing:
            return httpx.Response(
                529, json={"error": {"type": "overloaded_error", "message": "busy"}}
            )
        return await self.inner[host].handle_async_request(request)

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)


def providers(limits: dict[str, RateLimitConfig] | None = None, **extra: object) -> dict:
    limits = limits or {}
    return {
        host: ProviderConfig(
            base_url=f"http://{host}/v1",
            rate_limit=limits.get(host, RateLimitConfig()),
            **extra,  # type: ignore[arg-type]
        )
        for host in HOSTS
    }


def group(strategy: str = "least-busy", **options: object) -> dict[str, ModelGroup]:
    return {
        "fast": ModelGroup(
            deployments=[f"{h}:sim-small" for h in HOSTS],
            strategy=strategy,  # type: ignore[arg-type]
            **options,  # type: ignore[arg-type]
        )
    }


def most_in_any_window(times: list[float], window: float) -> int:
    times = sorted(times)
    best = 0
    for i, start in enumerate(times):
        end = bisect.bisect_left(times, start + window)
        best = max(best, end - i)
    return best


@virtual_deadline(400)
async def test_a_saturated_group_uses_every_deployment_to_its_limit_and_never_past_it(
    autojump_clock,
):
    rpm = {"d1": 60, "d2": 120, "d3": 300}
    fleet = Fleet({h: SimulatorConfig(seed=i) for i, h in enumerate(HOSTS)})
    config = RuntimeConfig(
        providers=providers({h: RateLimitConfig(requests_per_minute=n) for h, n in rpm.items()}),
        groups=group("least-busy"),
    )
    done: list[float] = []
    start = trio.current_time()
    async with sluice.open_runtime(config, transport=fleet.transport(), environ={}) as rt:
        requests = (
            ChatRequest(model="fast", messages=f"q{i}", priority="batch") for i in range(1800)
        )
        with trio.move_on_after(180.0):
            async with rt.map(requests, max_in_flight=400) as outcomes:
                async for outcome in outcomes:
                    assert outcome.error is None, outcome.error
                    done.append(trio.current_time() - start)
    # Three windows of 60 s each: at most 3 x 480 admissions; routing must not waste any.
    assert len(done) >= 0.97 * 3 * sum(rpm.values())
    for host, limit in rpm.items():
        assert most_in_any_window(fleet.arrivals[host], 60.0) <= limit, host
        assert len(fleet.arrivals[host]) >= 0.97 * 3 * limit, host


@virtual_deadline(300)
async def test_traffic_leaves_a_failing_deployment_and_comes_back_after_it_recovers(
    autojump_clock,
):
    fleet = Fleet({h: SimulatorConfig(seed=i) for i, h in enumerate(HOSTS)})
    breaker = BreakerConfig(min_failures=4, failure_rate=0.5, window=10.0, open_for=5.0)
    config = RuntimeConfig(
        providers=providers(breaker=breaker),
        groups=group("least-busy"),
        retry=RetryConfig(max_attempts=6),
    )
    async with sluice.open_runtime(config, transport=fleet.transport(), environ={}) as rt:

        async def wave(n: int) -> Counter[str]:
            counts: Counter[str] = Counter()
            requests = (ChatRequest(model="fast", messages=f"w{i}") for i in range(n))
            async with rt.map(requests, max_in_flight=8) as outcomes:
                async for outcome in outcomes:
                    assert outcome.result is not None, outcome.error
                    counts[outcome.result.models_tried[-1]] += 1
                    await trio.sleep(0.1)
            return counts

        assert set(await wave(60)) == {f"{h}:sim-small" for h in HOSTS}
        await trio.sleep(10.0)  # the healthy wave's attempts leave the breaker's window
        fleet.failing.add("d2")
        before = len(fleet.arrivals["d2"])
        failing = await wave(60)  # d2 fails, its calls fail over, its breaker opens
        during = len(fleet.arrivals["d2"])
        # It opens at its 4th failure (min_failures, every attempt failing); at most the 8
        # calls in flight had been placed on it meanwhile.
        assert during - before <= 4 + 8
        assert "d2:sim-small" not in failing  # no call ended there: each failed over
        later = await wave(60)
        assert "d2:sim-small" not in later  # passed over while its breaker is open
        assert len(fleet.arrivals["d2"]) - during <= 2  # at most the breaker's probes
        fleet.failing.discard("d2")
        await trio.sleep(10.0)
        recovered = await wave(90)
        assert recovered["d2:sim-small"] >= 15  # it gets its share back


@virtual_deadline(600)
async def test_lowest_latency_sends_most_calls_to_the_fastest_and_follows_a_change(
    autojump_clock,
):
    ttft = {"d1": 0.05, "d2": 0.2, "d3": 0.8}
    fleet = Fleet({h: SimulatorConfig(seed=i, ttft=ttft[h]) for i, h in enumerate(HOSTS)})
    config = RuntimeConfig(providers=providers(), groups=group("lowest-latency"))

    async with sluice.open_runtime(config, transport=fleet.transport(), environ={}) as rt:

        async def run(n: int) -> Counter[str]:
            counts: Counter[str] = Counter()
            for i in range(n):
                result = await rt.chat(ChatRequest(model="fast", messages=f"q{i}"))
                counts[result.models_tried[-1].partition(":")[0]] += 1
            return counts

        first = await run(300)
        assert first["d1"] >= 0.8 * 300
        fleet.delay["d1"] = 1.5  # the fastest slows down past the others
        await run(60)  # the moving average catches up
        second = await run(300)
        assert second["d2"] >= 0.8 * 300


@virtual_deadline(60)
async def test_a_529_fails_over_to_another_deployment_before_any_fallback(autojump_clock):
    fleet = Fleet({h: SimulatorConfig(seed=i) for i, h in enumerate(HOSTS)})
    fleet.failing.add("d1")
    config = RuntimeConfig(
        providers={**providers(), "spare": ProviderConfig(base_url="http://d3/v1")},
        groups={
            "fast": ModelGroup(deployments=["d1:sim-small", "d2:sim-small"], strategy="weighted")
        },
    )
    seen: list[str] = []
    async with sluice.open_runtime(config, transport=fleet.transport(), environ={}) as rt:
        for i in range(20):
            result = await rt.chat(
                ChatRequest(model="fast", messages=f"q{i}", fallbacks=["spare:sim-small"])
            )
            seen.append(",".join(result.models_tried))
    assert "d1:sim-small,d2:sim-small" in seen  # A failed with 529, B answered
    assert all(s.endswith("d2:sim-small") for s in seen)
    assert not any("spare" in s for s in seen)
    assert fleet.arrivals["d3"] == []


@virtual_deadline(60)
async def test_affinity_keeps_a_conversation_on_one_deployment(autojump_clock):
    fleet = Fleet({h: SimulatorConfig(seed=i) for i, h in enumerate(HOSTS)})
    config = RuntimeConfig(providers=providers(), groups=group("weighted", affinity="key"))
    async with sluice.open_runtime(config, transport=fleet.transport(), environ={}) as rt:
        where: dict[str, set[str]] = defaultdict(set)
        for turn in range(10):
            for user in ("ann", "bob", "cyd", "dee"):
                result = await rt.chat(
                    ChatRequest(model="fast", messages=f"{user} {turn}", affinity_key=user)
                )
                where[user].add(result.models_tried[-1])
        stats = (await rt.statistics()).groups["fast"]
    assert all(len(places) == 1 for places in where.values())
    assert [d.model for d in stats] == [f"{h}:sim-small" for h in HOSTS]
    assert sum(d.calls for d in stats) == 40
    assert all(d.in_flight == 0 and d.breaker == "closed" for d in stats)


@virtual_deadline(60)
async def test_every_exit_path_gives_back_the_in_flight_count(autojump_clock):
    """Abandoned streams, failures, cache hits and bad requests: nothing stays counted."""
    fleet = Fleet({h: SimulatorConfig(seed=i) for i, h in enumerate(HOSTS)})
    fleet.failing.update(HOSTS)  # every deployment fails: calls fail over, then fail
    config = RuntimeConfig(
        providers=providers(breaker=None), groups=group(), retry=RetryConfig(max_attempts=1)
    )
    async with sluice.open_runtime(config, transport=fleet.transport(), environ={}) as rt:
        for i in range(5):
            with pytest.raises(sluice.Overloaded):
                await rt.chat(ChatRequest(model="fast", messages=f"f{i}"))
        fleet.failing.clear()
        for i in range(5):  # a stream left after its first event
            async with rt.stream(ChatRequest(model="fast", messages=f"s{i}")) as call:
                async for _event in call:
                    break
        cached = ChatRequest(model="fast", messages="same", response_cache=True)
        await rt.chat(cached)
        await rt.chat(cached)  # answered by the cache: never reaches the Supervisor
        with pytest.raises(sluice.ConfigError):
            await rt.chat(ChatRequest(model="fast", messages="hi", tool_choice="required"))
        await trio.sleep(1.0)
        stats = (await rt.statistics()).groups["fast"]
    assert [d.in_flight for d in stats] == [0, 0, 0]
    assert sum(d.calls for d in stats) >= 5 * 3 + 5 + 1


async def test_an_unknown_model_name_without_a_colon_names_the_groups():
    config = RuntimeConfig(providers=providers(), groups=group())
    async with sluice.open_runtime(config, transport=Fleet({}).transport(), environ={}) as rt:
        with pytest.raises(sluice.ConfigError, match="fast"):
            await rt.chat(ChatRequest(model="fats", messages="hi"))


def test_providers_list_shows_groups_and_whether_each_deployment_can_be_used(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)

    path = tmp_path / "config.toml"
    path.write_text(
        """
[providers.east]
base_url = "http://east.example/v1"
[[groups.fast.deployments]]
model = "east:gpt-4o-mini"
weight = 2
[[groups.fast.deployments]]
model = "openai:gpt-4o-mini"
[[groups.fast.deployments]]
model = "nowhere:x"
"""
    )
    assert main(["providers", "list", "--json", "--config", str(path)]) == 0
    (group_row,) = orjson.loads(capsys.readouterr().out)["groups"]
    assert group_row["name"] == "fast" and group_row["strategy"] == "least-busy"
    assert [(d["model"], d["status"]) for d in group_row["deployments"]] == [
        ("east:gpt-4o-mini", "ok"),
        ("openai:gpt-4o-mini", "key missing"),
        ("nowhere:x", "unknown provider"),
    ]
    assert main(["providers", "list", "--config", str(path)]) == 0
    out = capsys.readouterr().out
    assert "group fast (least-busy, affinity none):" in out
    assert "  east:gpt-4o-mini  weight 2  ok" in out
