"""sluice.ray on a local Ray: actors of ``map_batches`` share one quota through a real Redis,
faults end as answers or error rows, a killed actor's rows are written once, and a rerun
after a cancelled job calls only the missing rows.

Every test runs real processes: Ray's actors call the simulator over loopback (it counts what
reaches it, on its own clock), with the quotas in a real ``redis-server``.

The quota test's full size is the issue's (4,000 rows through 4 actors, ``requests_per_minute
= 600``): about seven minutes of real time, so it is marked ``minutes`` and runs only when
asked for (``pytest -m minutes tests/test_ray.py``). The suite runs the same test over windows
twenty times shorter (30 requests per 3 s, the same 600 a minute; 200 rows, so the same six
and two thirds windows).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import ray

from sluice import BadRequest
from sluice.ray import OUTPUT_COLUMNS, Caller, Calls, done_keys, skip_done
from sluice.simulator import SimulatorConfig

from .helpers import SLUICE
from .ray_helpers import (
    ROOT,
    env_for_driver,
    most_in_any_window,
    questions,
    sim_config,
    simulator,
    start_ray,
)

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = [
    # Ray's own deprecations (its DataContext reads every attribute, deprecated ones too).
    pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.*"),
    pytest.mark.filterwarnings("ignore::FutureWarning:ray.*"),
]

TRANSIT_SLACK = 0.1
"""Seconds a request may take from its admission (on Redis's clock) to the simulator's count
(on this one) on a loaded box: the windows the server can hold the store to are this much
shorter than the limit's."""


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    start_ray()
    yield
    ray.shutdown()


@pytest.fixture
def prefix() -> str:
    return f"ray-{uuid.uuid4().hex}"


CALLS = Calls(model="loop:sim-small", prompt="question", params={"max_tokens": 8})


def run(ds: Any, config: Any, *, calls: Calls = CALLS, actors: int = 2, **kwargs: Any) -> Any:
    return ds.map_batches(
        Caller,
        fn_constructor_kwargs={"calls": calls, "config": config, **kwargs},
        compute=ray.data.ActorPoolStrategy(size=actors),
        num_cpus=0.25,
        batch_size=25,
        batch_format="pyarrow",
    )


def assert_each_row_once(rows: list[dict[str, Any]], n: int) -> None:
    assert sorted(r["id"] for r in rows) == list(range(n))
    assert len({r["sluice_key"] for r in rows}) == n


def quota_run(redis_url: str, prefix: str, rows: int, rate_limit: dict[str, Any], period: float):
    with simulator(SimulatorConfig(output_tokens=8)) as (url, sim):
        config = sim_config(url, redis_url, prefix, **rate_limit)
        ds = ray.data.from_items(questions(rows), override_num_blocks=16)
        started = time.monotonic()
        out = run(ds, config, actors=4, max_in_flight=16).take_all()
        took = time.monotonic() - started
        arrivals = list(sim.arrivals)
    exact = most_in_any_window(arrivals, period)
    counted = most_in_any_window(arrivals, period - TRANSIT_SLACK)
    span = max(arrivals) - min(arrivals)
    print(
        f"{rows} rows in {took:.1f} s (first call after {min(arrivals) - started:.1f} s, "
        f"calls over {span:.1f} s); busiest {period:g} s window at the server: {exact}, "
        f"busiest {period - TRANSIT_SLACK:g} s window: {counted}"
    )
    return out, arrivals, counted


def test_four_actors_share_one_quota_through_redis(redis_url, prefix):
    limit, period, rows = 30, 3.0, 200
    windows = [{"dimension": "requests", "limit": limit, "per": period}]
    out, arrivals, counted = quota_run(redis_url, prefix, rows, {"windows": windows}, period)
    assert_each_row_once(out, rows)
    assert all(r["error_type"] is None and r["text"] for r in out)
    assert len(arrivals) == rows
    assert counted <= limit
    # The actors together kept the quota busy: rows / limit windows, the last one partly.
    assert max(arrivals) - min(arrivals) >= (rows // limit - 1) * period


@pytest.mark.minutes
def test_four_thousand_rows_at_600_requests_per_minute(redis_url, prefix):
    """The issue's size: 4,000 rows through 4 actors, ``requests_per_minute = 600``."""
    rows = 4000
    out, arrivals, counted = quota_run(redis_url, prefix, rows, {"requests_per_minute": 600}, 60.0)
    assert_each_row_once(out, rows)
    assert all(r["error_type"] is None for r in out)
    assert len(arrivals) == rows
    assert counted <= 600
    assert max(arrivals) - min(arrivals) >= 6 * 60.0


def test_faults_end_as_answers_or_error_rows_and_none_is_lost(redis_url, prefix):
    """One request in ten fails (429, 500, connection reset): the job succeeds, every row
    comes back once; rows that never got through before ``max_wait`` are error rows."""
    faults = {"429:retry_after=1": 0.04, "500": 0.03, "reset": 0.03}
    rows = 160
    with simulator(SimulatorConfig(output_tokens=8, fault_rates=faults, fault_seed=3)) as (
        url,
        sim,
    ):
        config = sim_config(url, redis_url, prefix)
        calls = Calls(model="loop:sim-small", prompt="question", max_wait=30.0)
        out = run(ray.data.from_items(questions(rows)), config, calls=calls).take_all()
        statuses = list(sim.statuses)
    assert_each_row_once(out, rows)
    answered = [r for r in out if r["error_type"] is None]
    failed = [r for r in out if r["error_type"] is not None]
    assert all(r["text"] and r["finish_reason"] and r["output_tokens"] > 0 for r in answered)
    assert all(r["error_message"] and r["text"] is None for r in failed)
    assert len(answered) + len(failed) == rows
    assert {429, 500, 0} <= set(statuses)  # the faults did happen
    assert statuses.count(200) == len(answered)


def test_a_call_failing_past_max_wait_is_an_error_row_not_a_failed_task(redis_url, prefix):
    """The Caller on its own, in this process (Ray's actors run the same code)."""
    with simulator(SimulatorConfig(output_tokens=8)) as (url, sim):
        calls = Calls(
            model="loop:sim-small",
            prompt="question",
            max_wait=1.0,
            params={"extra_headers": {"x-sim-fault": "500"}},
        )
        caller = Caller(calls, sim_config(url, redis_url, prefix), progress_interval=None)
        try:
            out = caller(pa.Table.from_pylist(questions(6))).to_pylist()
        finally:
            caller.close()
        seen = sim.seen
    assert_each_row_once(out, 6)
    # The error that kept each call waiting: the 500s, or the breaker they opened.
    assert {r["error_type"] for r in out} <= {"ServerError", "CircuitOpen"}
    assert all(r["error_message"] and r["text"] is None for r in out)
    assert seen >= 6  # each was sent, and failed until its max_wait


def test_bad_rows_are_error_rows_and_the_rest_are_called(redis_url, prefix):
    rows = [{"id": 0, "question": "fine"}, {"id": 1, "question": None}, {"id": 2}]
    with simulator(SimulatorConfig(output_tokens=8)) as (url, sim):
        caller = Caller(CALLS, sim_config(url, redis_url, prefix), progress_interval=None)
        try:
            table = pa.Table.from_pylist(rows)
            out = caller(table)
            pandas_out = caller(table.to_pandas())
            numpy_out = caller({"id": np.array([0]), "question": np.array(["fine"])})
        finally:
            caller.close()
        seen = sim.seen
    got = out.to_pylist()
    assert out.column_names == ["id", "question", *OUTPUT_COLUMNS]
    assert [r["error_type"] for r in got] == [None, "BadRow", "BadRow"]
    assert got[0]["text"] and got[0]["model"] == "loop:sim-small"
    assert "column 'question' holds NoneType" in got[1]["error_message"]
    assert seen == 1 + 1 + 1  # only the good row of each batch was sent
    assert pandas_out.to_pylist()[0]["sluice_key"] == got[0]["sluice_key"]
    assert numpy_out.to_pylist()[0]["sluice_key"] == got[0]["sluice_key"]
    assert out.schema.field("input_tokens").type == pa.int64()
    assert out.schema.field("cost_usd").type == pa.float64()


def test_every_actor_books_under_one_job_that_sluice_ledger_store_sums(redis_url, prefix, tmp_path):
    """Two Callers (two actors' worth) with one job: ``sluice ledger --store`` shows the job's
    calls and tokens from both, as the rows' own columns count them."""
    job = f"job-{uuid.uuid4().hex[:8]}"
    out = []
    with simulator(SimulatorConfig(output_tokens=8)) as (url, _sim):
        config = sim_config(url, redis_url, prefix)
        for part in (questions(3), questions(4, start=3)):
            caller = Caller(CALLS, config, job=job, progress_interval=None)
            try:
                out += caller(pa.Table.from_pylist(part)).to_pylist()
            finally:
                caller.close()
    (tmp_path / "c.toml").write_text(f'store_prefix = "{prefix}"\n')
    command = [SLUICE, "ledger", "--store", redis_url, "--config", str(tmp_path / "c.toml")]
    shown = subprocess.run(
        [*command, "--by", "job", "--format", "json"],
        capture_output=True,
        check=True,
        env=env_for_driver(),
    )
    rows = {r["job"]: r for r in orjson.loads(shown.stdout)["rows"]}
    assert rows[job]["calls"] == 7 and rows[job]["failures"] == 0
    assert rows[job]["output_tokens"] == sum(r["output_tokens"] for r in out)
    assert rows[job]["input_tokens"] == sum(r["input_tokens"] for r in out)


def test_each_actor_prints_a_progress_line_of_its_job(redis_url, prefix, capsys):
    rows = pa.Table.from_pylist([{"question": "fine"}, {"question": None}])
    with simulator(SimulatorConfig(output_tokens=8)) as (url, _sim):
        caller = Caller(CALLS, sim_config(url, redis_url, prefix), job="j1", progress_interval=0)
        try:
            caller(rows)
        finally:
            caller.close()
    assert "sluice job j1: this actor 1 done, 1 failed, " in capsys.readouterr().err


def test_raise_errors_makes_a_failed_call_fail_the_batch(redis_url, prefix):
    rows = pa.Table.from_pylist([{"question": "fine"}, {"question": "fails"}])
    with simulator(SimulatorConfig(output_tokens=8, script=("ok", "400"))) as (url, _sim):
        calls = Calls(model="loop:sim-small", prompt="question", raise_errors=True)
        caller = Caller(calls, sim_config(url, redis_url, prefix), max_in_flight=1)
        try:
            with pytest.raises(BadRequest):
                caller(rows)
        finally:
            caller.close()


def test_an_input_column_named_like_an_output_column_needs_a_prefix(redis_url, prefix):
    rows = pa.Table.from_pylist([{"question": "q", "text": "an input column"}])
    with simulator() as (url, _sim):
        config = sim_config(url, redis_url, prefix)
        caller = Caller(CALLS, config, progress_interval=None)
        prefixed = Caller(
            Calls(model="loop:sim-small", prompt="question", prefix="llm_"),
            config,
            progress_interval=None,
        )
        try:
            with pytest.raises(ValueError, match=r"columns \['text'\]: give Calls a prefix="):
                caller(rows)
            (row,) = prefixed(rows).to_pylist()
        finally:
            caller.close()
            prefixed.close()
    assert row["text"] == "an input column"
    assert row["llm_text"] and row["llm_error_type"] is None


@ray.remote(num_cpus=0)
class Registry:
    """Where the test's actors leave their handles, so the test can kill one."""

    def __init__(self) -> None:
        self.handles: list[Any] = []

    def add(self, handle: Any) -> None:
        self.handles.append(handle)

    def all(self) -> list[Any]:
        return self.handles


class RegisteredCaller(Caller):
    """A Caller that leaves its actor's handle with the test's :class:`Registry`."""

    def __init__(self, *args: Any, registry: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        me = ray.get_runtime_context().current_actor
        ray.get(ray.get_actor(registry).add.remote(me))


def test_an_actor_killed_mid_run_is_restarted_and_each_row_is_written_once(redis_url, prefix):
    name = f"registry-{uuid.uuid4().hex}"
    registry = Registry.options(name=name).remote()  # type: ignore[attr-defined]
    rows = 300
    with simulator(SimulatorConfig(output_tokens=8)) as (url, sim):
        # 40 calls a second: the run lasts long enough to be killed in the middle.
        windows = [{"dimension": "requests", "limit": 40, "per": 1.0}]
        config = sim_config(url, redis_url, prefix, windows=windows)
        ds = ray.data.from_items(questions(rows), override_num_blocks=12).map_batches(
            RegisteredCaller,
            fn_constructor_kwargs={"calls": CALLS, "config": config, "registry": name},
            compute=ray.data.ActorPoolStrategy(size=2),
            num_cpus=0.25,
            batch_size=25,
            batch_format="pyarrow",
        )
        it = iter(ds.iter_rows())
        out = [next(it)]  # started: the actors are up
        handles = ray.get(registry.all.remote())
        while sim.seen < rows // 3:
            time.sleep(0.05)
        ray.kill(handles[0], no_restart=False)
        killed_at = sim.seen
        out += list(it)
        seen = sim.seen
        registered = len(ray.get(registry.all.remote()))
    assert killed_at < rows  # it died mid-run
    assert registered == len(handles) + 1  # Ray started it again (its __init__ ran again)
    assert_each_row_once(out, rows)
    assert all(r["error_type"] is None for r in out)
    print(f"server saw {seen} requests for {rows} rows (the killed actor's batch again)")
    assert seen >= rows


def settled(sim: Any) -> int:
    """The simulator's count once it has stopped moving (the cancelled job's actors are gone)."""
    last = -1
    while sim.seen != last:
        last = sim.seen
        time.sleep(2.0)
    return last


def _driver(gcs: str, url: str, redis: str, prefix: str, out: Path, *skip: str) -> list[str]:
    return [
        sys.executable,
        str(ROOT / "tests" / "ray_driver.py"),
        gcs,
        url,
        redis,
        prefix,
        str(out),
        *skip,
    ]


def test_a_rerun_with_skip_done_after_a_cancelled_job_calls_only_the_missing_rows(
    redis_url, prefix, tmp_path
):
    rows = 240
    out = tmp_path / "answers"
    gcs = ray.get_runtime_context().gcs_address
    with simulator(SimulatorConfig(output_tokens=8)) as (url, sim):
        first = subprocess.Popen(
            _driver(gcs, url, redis_url, prefix, out),
            env=env_for_driver(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 120
        while not list(out.glob("*.parquet")) and time.monotonic() < deadline:
            assert first.poll() is None, first.communicate()[0].decode()[-3000:]
            time.sleep(0.1)
        print(f"first file after {time.monotonic() - deadline + 120:.1f} s")
        first.send_signal(signal.SIGINT)  # Ctrl-C: the job is cancelled
        first.communicate(timeout=60)
        calls_first = settled(sim)
        done_first = done_keys(out)
        print(f"first run over after {time.monotonic() - deadline + 120:.1f} s")
        assert 0 < len(done_first) < rows, len(done_first)

        second = subprocess.run(
            _driver(gcs, url, redis_url, prefix, out, "--skip-done"),
            env=env_for_driver(),
            capture_output=True,
            timeout=300,
        )
        assert second.returncode == 0, second.stdout.decode()[-3000:] + second.stderr.decode()
        calls_second = sim.seen - calls_first
        print(f"second run over after {time.monotonic() - deadline + 120:.1f} s")
    assert calls_second == rows - len(done_first)
    final = pq.read_table(out).to_pylist()
    assert_each_row_once(final, rows)
    assert set(OUTPUT_COLUMNS) <= set(final[0])


def test_skip_done_keeps_what_no_output_holds(tmp_path):
    calls = Calls(model="loop:sim-small", prompt="question")
    done = [calls.build(r)[0] for r in questions(5)]
    out = tmp_path / "answers"
    out.mkdir()
    pq.write_table(pa.table({"sluice_key": done[:3]}), out / "a.parquet")
    (out / "b.json").write_bytes(b'{"sluice_key": "%s"}\n' % done[3].encode())
    (out / "c.parquet").write_bytes(b"PAR1 cut short")  # a file a cancelled job left
    assert done_keys(out) == set(done[:4])
    left = skip_done(ray.data.from_items(questions(5)), out, calls).take_all()
    assert [r["id"] for r in left] == [4]
    nothing_done = ray.data.from_items(questions(2))
    assert skip_done(nothing_done, tmp_path / "none", calls) is nothing_done


def test_import_sluice_does_not_import_ray():
    code = "import sys, sluice, sluice.sync; print('ray' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True)
    assert done.stdout.strip() == b"False"
    assert os.environ.get("SLUICE_LEDGER_DB") == "off"
