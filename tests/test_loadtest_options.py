"""``LoadTestOptions``: the loadtest's flags as one checked value; a bad one is refused when
the options are made, with a message naming the flag. Pure (but for the files a test names)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sluice._errors import ConfigError
from sluice._jobs.loadtest import ClosedLoop, OpenLoop
from sluice._jobs.loadtest.options import LoadTestOptions, build_test

OUT = Path("results.json")


def options(**given):
    return LoadTestOptions(model="sim:sim-small", out=OUT, **given)


@pytest.mark.parametrize(
    ("given", "named"),
    [
        ({"duration": 5}, "give exactly one load shape"),
        ({"rate": 2, "concurrency": "3", "duration": 5}, "(got --rate, --concurrency)"),
        ({"rate": float("nan"), "duration": 5}, "--rate must be a finite number"),
        ({"concurrency": "2", "burstiness": 0.5, "duration": 5}, "--burstiness applies to"),
        ({"rate": 2, "arrival": "bursty", "duration": 5}, "--arrival 'bursty'"),
        ({"rate": 2, "max_error_rate": 2, "duration": 5}, "--max-error-rate must be a fraction"),
        ({"concurrency": "2", "max_in_flight": 3, "duration": 5}, "--max-in-flight"),
        ({"sweep": "1,2", "requests": 9}, "--sweep runs each rate for --duration"),
        ({"rate": 2, "duration": 0}, "--duration must be above 0"),
        ({"rate": 2}, "bound the run"),
        ({"rate": 2, "duration": 5, "timeout": 0}, "--timeout must be above 0"),
        ({"concurrency": "2,x", "duration": 5}, "--concurrency '2,x'"),
        ({"ramp": "2:30,0:5"}, "--ramp '2:30,0:5'"),
        ({"rate": 2, "duration": 5, "warmup": "soon"}, "--warmup 'soon'"),
        ({"rate": 2, "duration": 5, "input_tokens": "lots"}, "--input-tokens 'lots'"),
        ({"rate": 2, "duration": 5, "turns": 0}, "--turns and --prefix-pool"),
        ({"rate": 2, "duration": 5, "slo": ("fast",)}, "--slo 'fast'"),
        ({"rate": 2, "duration": 5, "max_lag": "a while"}, "--max-lag 'a while'"),
        ({"rate": 2, "duration": 5, "endpoint": "images"}, "--endpoint 'images'"),
        ({"rate": 2, "duration": 5, "embedding_batch": 0}, "--embedding-batch"),
        ({"rate": 2, "duration": 5, "server_metrics": "ftp://x"}, "--server-metrics 'ftp://x'"),
        ({"rate": -1, "duration": 5}, "--rate/--burstiness"),
    ],
)
def test_a_bad_flag_is_refused_when_the_options_are_made(given, named):
    with pytest.raises(ConfigError) as refused:
        options(**given)
    assert named in str(refused.value)


def test_the_model_must_name_its_provider():
    with pytest.raises(ConfigError, match="provider:model"):
        LoadTestOptions(model="gpt-4o", out=OUT, rate=2, duration=5)
    with pytest.raises(ConfigError, match="--base-url and --api-key need --model"):
        LoadTestOptions(model="gpt-4o", out=OUT, rate=2, duration=5, base_url="http://x")


def test_the_api_key_stays_out_of_the_repr():
    assert "sk-secret" not in repr(options(rate=2, duration=5, api_key="sk-secret"))


def test_build_test_makes_the_job_of_the_options(tmp_path):
    built = build_test(options(concurrency="1,2,4", requests=6, warmup="2s", slo=("ttft_p99=1s",)))
    assert built.levels == (1, 2, 4) and built.plan is None
    assert built.test.shape == ClosedLoop(1)
    assert (built.test.warmup, built.test.warmup_seconds) == (0, 2.0)
    assert [s.name for s in built.test.slos] == ["ttft_p99"]
    ramp = build_test(options(ramp="2:3,4:1.5"))
    assert ramp.test.duration == 4.5 and isinstance(ramp.test.shape, OpenLoop)
    trace = tmp_path / "arrivals.txt"
    trace.write_text("0\n0.5\n1.25\n")
    replay = build_test(options(trace=trace))
    assert replay.test.requests == 3
    assert replay.test.shape.describe == "replay of arrivals.txt"
    swept = build_test(options(sweep="1,2", duration=2))
    assert swept.plan is not None and swept.test.duration == 2
