"""Prometheus metrics: scraped over loopback after a known sequence of calls, parsed with
prometheus_client's own parser; every counter equals what happened."""

from __future__ import annotations

import httpx
import orjson
import pytest
import trio
from prometheus_client.parser import text_string_to_metric_families

import sluice
from sluice import MetricsConfig, RateLimitConfig, RetryConfig, RuntimeConfig, TextDelta
from sluice._config import ProviderConfig
from sluice.simulator import SimulatorConfig, mock_transport

MODEL = "sim:sim-small"


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(text: str) -> Samples:
    found: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            found[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return found


def value(found: Samples, name: str, **labels: str) -> float:
    return found.get((name, tuple(sorted(labels.items()))), 0.0)


def total(found: Samples, name: str, **labels: str) -> float:
    """Sum over every sample of ``name`` whose labels include ``labels``."""
    return sum(
        v
        for (n, ls), v in found.items()
        if n == name and all(dict(ls).get(k) == want for k, want in labels.items())
    )


async def test_scrape_after_ok_429_failed_and_abandoned_calls_counts_each():
    sim = SimulatorConfig(
        script=("ok", "429:retry_after=1", "ok", "400", "stall_after:3:30"),
        ttft=0.0,
        tokens_per_second=10_000,
    )
    config = RuntimeConfig(
        providers={"sim": ProviderConfig(rate_limit=RateLimitConfig(cooldown_jitter=0.0))},
        retry=RetryConfig(jitter=0.0),
        metrics=MetricsConfig(port=0),
    )
    with trio.fail_after(20):
        async with sluice.open_runtime(config, transport=mock_transport(sim)) as rt:
            assert rt.metrics_port
            ok = await rt.chat(MODEL, "one")  # ok
            retried = await rt.chat(MODEL, "two")  # 429, then ok
            with pytest.raises(sluice.BadRequest):
                await rt.chat(MODEL, "three")  # failed for good
            async with rt.stream(MODEL, "four") as call:  # abandoned after its first delta
                async for event in call:
                    if isinstance(event, TextDelta):
                        break
            assert await rt.drain(5)  # the abandoned attempt reports its usage as it ends
            ledger = (await rt.ledger_totals())[MODEL]
            async with httpx.AsyncClient() as client:
                reply = await client.get(f"http://127.0.0.1:{rt.metrics_port}/metrics")
    assert reply.status_code == 200
    assert reply.headers["content-type"].startswith("text/plain")
    assert ok.attempts == 1 and retried.attempts == 2
    found = samples(reply.text)
    sim_labels = {"provider": "sim", "model": "sim-small"}

    calls = "sluice_calls_total"
    assert value(found, calls, **sim_labels, outcome="ok", error_type="") == 2
    assert value(found, calls, **sim_labels, outcome="error", error_type="BadRequest") == 1
    assert value(found, calls, **sim_labels, outcome="abandoned", error_type="") == 1
    assert total(found, calls) == 4

    attempts = "sluice_attempts_total"
    assert value(found, attempts, **sim_labels, outcome="ok", error_type="") == 2
    assert value(found, attempts, **sim_labels, outcome="error", error_type="RateLimited") == 1
    assert value(found, attempts, **sim_labels, outcome="error", error_type="BadRequest") == 1
    assert value(found, attempts, **sim_labels, outcome="abandoned", error_type="") == 1
    assert total(found, attempts) == 5

    # Histograms count every call (and every attempt that was admitted).
    assert total(found, "sluice_call_duration_seconds_count") == 4
    assert value(found, "sluice_call_duration_seconds_count", **sim_labels, outcome="ok") == 2
    assert value(found, "sluice_time_to_first_token_seconds_count", **sim_labels) == 2
    assert value(found, "sluice_admission_wait_seconds_count", key="sim") == 5
    assert value(found, "sluice_inter_token_seconds_count", **sim_labels) == 2

    # Tokens: exactly what the ledger counted, attempt by attempt.
    tokens = "sluice_tokens_total"
    assert value(found, tokens, **sim_labels, kind="input") == ledger.input_tokens > 0
    assert value(found, tokens, **sim_labels, kind="output") == ledger.output_tokens > 0

    # Gauges, read at scrape time: nothing left in flight.
    assert value(found, "sluice_calls_in_flight") == 0
    assert value(found, "sluice_attempts_in_flight", provider="sim") == 0
    assert value(found, "sluice_breaker_state", provider="sim", state="closed") in (0, 1)
    assert value(found, "sluice_retry_budget_available") > 0
    assert value(found, "sluice_hook_drops_total") == 0


async def test_the_endpoint_answers_404_elsewhere_and_the_registry_renders_without_it():
    config = RuntimeConfig(metrics=MetricsConfig(port=0))
    with trio.fail_after(20):
        async with sluice.open_runtime(config, transport=mock_transport()) as rt:
            await rt.chat(MODEL, "hi")
            async with httpx.AsyncClient() as client:
                missing = await client.get(f"http://127.0.0.1:{rt.metrics_port}/nope")
            rendered = (await rt.render_metrics()).decode()
    assert missing.status_code == 404
    assert "sluice_calls_total" in rendered


async def test_metrics_are_off_by_default_and_say_so(autojump_clock):
    async with sluice.open_runtime(RuntimeConfig(), transport=mock_transport()) as rt:
        assert rt.metrics is None and rt.metrics_port is None
        with pytest.raises(sluice.ConfigError, match="metrics are off"):
            await rt.render_metrics()


class CrashingTransport(httpx.AsyncBaseTransport):
    """Raises a bug-like exception on the second request: the provider actor crashes."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.seen = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.seen += 1
        if self.seen == 2:
            raise RuntimeError("injected crash")
        return await self.inner.handle_async_request(request)


async def test_an_actor_restart_is_counted(autojump_clock):
    config = RuntimeConfig(metrics=MetricsConfig(enabled=True))
    transport = CrashingTransport(mock_transport(SimulatorConfig(ttft=0.5)))
    with trio.fail_after(60):
        async with sluice.open_runtime(config, transport=transport) as rt:
            async with trio.open_nursery() as nursery:
                for i in range(3):
                    nursery.start_soon(rt.chat, MODEL, f"call {i}")
            found = samples((await rt.render_metrics()).decode())
    assert value(found, "sluice_actor_restarts_total", actor="provider sim") == 1
    ok = {"provider": "sim", "model": "sim-small", "outcome": "ok", "error_type": ""}
    assert value(found, "sluice_calls_total", **ok) == 3


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_sluice_sim_serves_its_replies_by_status_with_metrics_port():
    import subprocess

    from .helpers import SLUICE

    port, metrics_port = _free_port(), _free_port()
    command = [SLUICE, "sim", "--port", str(port), "--metrics-port", str(metrics_port)]
    process = await trio.lowlevel.open_process(command, stdout=subprocess.DEVNULL)
    try:
        with trio.fail_after(30):
            async with httpx.AsyncClient() as client:
                while True:
                    try:
                        before = await client.get(f"http://127.0.0.1:{metrics_port}/metrics")
                        break
                    except httpx.TransportError:
                        assert process.poll() is None, "sluice sim exited"
                        await trio.sleep(0.05)
                body = {"model": "sim-small", "messages": [{"role": "user", "content": "hi"}]}
                url = f"http://127.0.0.1:{port}/v1/chat/completions"
                assert (await client.post(url, json=body)).status_code == 200
                bad = await client.post(url, json=body, headers={"x-sim-fault": "429"})
                assert bad.status_code == 429
                after = await client.get(f"http://127.0.0.1:{metrics_port}/metrics")
    finally:
        process.terminate()
        with trio.move_on_after(10):
            await process.wait()
    assert value(samples(before.text), "sluice_sim_replies_total") == 0
    found = samples(after.text)
    path = "/v1/chat/completions"
    assert value(found, "sluice_sim_replies_total", status="200", path=path) == 1
    assert value(found, "sluice_sim_replies_total", status="429", path=path) == 1


def test_batch_serves_metrics_with_metrics_port(tmp_path):
    """``sluice batch --metrics-port`` runs its job with the endpoint up (and still answers
    every line)."""
    import subprocess

    from .helpers import SLUICE

    lines = [
        orjson.dumps(
            {
                "custom_id": f"r{i}",
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": {"model": "sim:sim-small", "messages": [{"role": "user", "content": "x"}]},
            }
        )
        for i in range(3)
    ]
    (tmp_path / "in.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    command = [SLUICE, "batch", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "out.jsonl")]
    command += ["--metrics-port", str(_free_port())]
    done = subprocess.run(command, capture_output=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert len((tmp_path / "out.jsonl").read_bytes().splitlines()) == 3
    command[4] = str(tmp_path / "other.jsonl")
    bad = subprocess.run([*command[:-1], "70000"], capture_output=True, timeout=60, check=False)
    assert bad.returncode == 2 and b"--metrics-port" in bad.stderr
    assert not (tmp_path / "other.jsonl").exists()


def test_histogram_buckets_are_cumulative_and_a_value_on_a_bound_counts_in_it():
    from sluice._observe.metrics import Histogram

    h = Histogram("x_seconds", "x", ("k",), (0.1, 1.0))
    for v in (0.05, 0.1, 0.5, 1.0, 3.0):
        h.observe(("a",), v)
    (metric,) = [h.family()]
    got = {(s.name, s.labels.get("le")): s.value for s in metric.samples}
    assert got[("x_seconds_bucket", "0.1")] == 2
    assert got[("x_seconds_bucket", "1.0")] == 4
    assert got[("x_seconds_bucket", "+Inf")] == 5
    assert got[("x_seconds_count", None)] == 5
    assert got[("x_seconds_sum", None)] == pytest.approx(4.65)


def test_metrics_and_tracing_load_from_a_config_file_with_clear_errors():
    config = sluice.load_config({"metrics": {"port": 9464}, "tracing": {"enabled": True}})
    assert config.metrics.port == 9464 and config.metrics.active and config.tracing.enabled
    with pytest.raises(sluice.ConfigError, match=r"unknown key 'prot' \(did you mean 'port'\?\)"):
        sluice.load_config({"metrics": {"prot": 1}})
    with pytest.raises(sluice.ConfigError, match="metrics"):
        sluice.load_config({"metrics": {"port": 70000}})


async def test_a_synchronous_render_shows_gauges_at_most_five_seconds_old(autojump_clock):
    config = RuntimeConfig(metrics=MetricsConfig(enabled=True))
    sim = SimulatorConfig(ttft=30.0)
    with trio.fail_after(120):
        async with (
            sluice.open_runtime(config, transport=mock_transport(sim)) as rt,
            trio.open_nursery() as nursery,
        ):
            for i in range(3):
                nursery.start_soon(rt.chat, MODEL, f"call {i}")
            await trio.sleep(6)
            assert rt.metrics is not None
            found = samples(rt.metrics.render().decode())
            assert value(found, "sluice_calls_in_flight") == 3
            assert value(found, "sluice_pending", key="sim") == 3


def test_a_label_keeps_its_first_values_and_counts_the_rest_under_other():
    from sluice._observe.metrics import OTHER, LabelValues

    models = LabelValues(2)
    assert [models.fold(m) for m in ("a", "b", "c", "a", "d", "b")] == [
        "a",
        "b",
        OTHER,
        "a",
        OTHER,
        "b",
    ]
    assert len(models) == 2
    with pytest.raises(ValueError, match="at least one"):
        LabelValues(0)
    assert sluice.load_config({"metrics": {"max_label_values": 5}}).metrics.max_label_values == 5
    with pytest.raises(sluice.ConfigError, match="max_label_values"):
        sluice.load_config({"metrics": {"max_label_values": 0}})


async def test_models_past_the_label_cap_are_counted_under_other_counters_and_gauges(
    autojump_clock,
):
    """Ten models with a cap of three: three keep their series, the other seven are summed
    under ``other`` in every family, the gauges' quota keys and breakers included."""
    config = RuntimeConfig(
        providers={"sim": ProviderConfig(rate_limit=RateLimitConfig(key="model"))},
        metrics=MetricsConfig(enabled=True, max_label_values=3),
    )
    sim = SimulatorConfig(ttft=0.0, tokens_per_second=10_000)
    with trio.fail_after(60):
        async with sluice.open_runtime(config, transport=mock_transport(sim)) as rt:
            for i in range(10):
                await rt.chat(f"sim:m-{i}", "hi", max_tokens=4)
            text = (await rt.render_metrics()).decode()
    found = samples(text)
    models = {dict(ls).get("model") for (_, ls) in found} - {None}
    assert models == {"m-0", "m-1", "m-2", "other"}
    ok = {"provider": "sim", "outcome": "ok", "error_type": ""}
    assert value(found, "sluice_calls_total", model="m-0", **ok) == 1
    assert value(found, "sluice_calls_total", model="other", **ok) == 7
    assert value(found, "sluice_attempts_total", model="other", **ok) == 7
    assert (
        value(
            found, "sluice_call_duration_seconds_count", provider="sim", model="other", outcome="ok"
        )
        == 7
    )
    keys = {dict(ls).get("key") for (_, ls) in found} - {None}
    assert keys == {"sim:m-0", "sim:m-1", "sim:m-2", "other"}
    assert value(found, "sluice_admission_wait_seconds_count", key="other") == 7
    assert value(found, "sluice_open_streams", key="other") == 0
    breakers = {dict(ls)["provider"] for (n, ls) in found if n == "sluice_breaker_state"}
    assert breakers == {"sim:m-0", "sim:m-1", "sim:m-2", "other"}
    assert value(found, "sluice_breaker_state", provider="other", state="closed") == 7
    assert value(found, "sluice_breaker_state", provider="sim:m-0", state="closed") == 1
    assert value(found, "sluice_breaker_state", provider="sim:m-0", state="open") == 0
