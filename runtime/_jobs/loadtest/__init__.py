"""``sluice loadtest``: measure what an LLM endpoint sustains.

Pure modules: :mod:`.arrivals` (when requests go out), :mod:`.workload` (what they ask),
:mod:`.metrics` (one request's record, per-token ITL), :mod:`.stats` and :mod:`.aggregate`
(percentiles, throughput over time, goodput, the client-lag verdict), :mod:`.slo`,
:mod:`.limits` (the runtime config of a test), :mod:`.records` (each request's record kept on
disk as it ends, so memory stays flat), :mod:`.results` (the JSON file, written from it),
:mod:`.compare`, :mod:`.svg` and :mod:`.report` (the HTML report), :mod:`.spec` (what one
test is: :class:`LoadTest`), :mod:`.options` (the command line's choices as one checked value,
and the :class:`LoadTest` made of them).
:mod:`.run` and :mod:`.sweep` drive the runtime on trio's clock.

Example::

    async with sluice.open_runtime(loadtest_config(config, "sim", respect_limits=False)) as rt:
        run = await run_load(rt, LoadTest(model="sim:sim-small",
                                          shape=OpenLoop.at_rate(5), duration=30))
    print(run.aggregates["ttft_s"]["p99"])
"""

from .arrivals import ClosedLoop, OpenLoop, Step, load_trace
from .limits import loadtest_config
from .options import LoadTestOptions, build_test
from .run import Interrupt, LoadTest, Progress, RunResult, run_load
from .slo import Slo, parse_slo
from .sweep import SweepPlan, SweepResult, parse_sweep, run_sweep
from .workload import Lengths, Workload, load_dataset, parse_lengths

__all__ = [
    "ClosedLoop",
    "Interrupt",
    "Lengths",
    "LoadTest",
    "LoadTestOptions",
    "OpenLoop",
    "Progress",
    "RunResult",
    "Slo",
    "Step",
    "SweepPlan",
    "SweepResult",
    "Workload",
    "build_test",
    "load_dataset",
    "load_trace",
    "loadtest_config",
    "parse_lengths",
    "parse_slo",
    "parse_sweep",
    "run_load",
    "run_sweep",
]
