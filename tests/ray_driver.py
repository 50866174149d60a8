"""A Ray Data job of the skip_done test, run as its own driver on the test's Ray cluster:
``python tests/ray_driver.py GCS_ADDRESS SIM_URL REDIS_URL PREFIX OUTPUT [--skip-done]``.

240 questions through two sluice actors, paced by a shared window of 30 requests a second so
that the test can cancel it (Ctrl-C) part way; written as Parquet to OUTPUT. With
``--skip-done`` it first drops the rows OUTPUT already holds.
"""

from __future__ import annotations

import sys

import ray

from sluice.ray import Caller, Calls, skip_done
from tests.ray_helpers import questions, sim_config

ROWS = 240


def main(gcs: str, url: str, redis: str, prefix: str, output: str, *flags: str) -> None:
    ray.init(address=gcs, log_to_driver=False, configure_logging=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    windows = [{"dimension": "requests", "limit": 30, "per": 1.0}]
    config = sim_config(url, redis, prefix, windows=windows)
    calls = Calls(model="loop:sim-small", prompt="question", params={"max_tokens": 8})
    ds: ray.data.Dataset = ray.data.from_items(questions(ROWS), override_num_blocks=12)
    if "--skip-done" in flags:
        ds = skip_done(ds, output, calls)
    ds = ds.map_batches(
        Caller,
        fn_constructor_kwargs={"calls": calls, "config": config, "job": "skip-done-test"},
        compute=ray.data.ActorPoolStrategy(size=2),
        num_cpus=0.25,
        batch_size=20,
        batch_format="pyarrow",
    )
    ds.write_parquet(output)


if __name__ == "__main__":
    main(*sys.argv[1:])
