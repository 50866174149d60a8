"""Make the example load-test report and its screenshot (``docs/loadtest-report.png``).

    .venv/bin/python docs/make_loadtest_report.py [results.json]   # ~70 s, real clock
    chromium --headless --no-sandbox --hide-scrollbars --window-size=1200,2400 \
        --screenshot=docs/loadtest-report.png file://$PWD/docs/loadtest-report.html

A real run over loopback against sluice's simulator with its latency model: TTFT 150 ms
(deviation 40 ms), 50 tokens/s per stream (ITL deviation 4 ms), 2 tokens per chunk, and 8
generation slots, so it saturates near 8 / (0.15 + 23 x 0.02) = 13 requests/s. An automatic
sweep finds that rate; the report shows the run at the highest sustained rate and the sweep.
"""

from __future__ import annotations

import sys
from pathlib import Path

import trio

import sluice
from sluice._jobs.loadtest import (
    Lengths,
    LoadTest,
    OpenLoop,
    SweepPlan,
    Workload,
    loadtest_config,
    parse_slo,
    run_sweep,
)
from sluice._jobs.loadtest.results import results_document, write_report, write_results
from sluice.simulator import SimulatorConfig, serve_simulator

HERE = Path(__file__).resolve().parent


async def main() -> None:
    sim = SimulatorConfig(
        ttft=0.15,
        ttft_jitter=0.04,
        tokens_per_second=50,
        itl_jitter=0.004,
        tokens_per_chunk=2,
        output_tokens=10_000,
        capacity=8,
    )
    async with trio.open_nursery() as services:
        port = await services.start(serve_simulator, sim)
        provider = sluice.ProviderConfig(base_url=f"http://127.0.0.1:{port}/v1")
        config = loadtest_config(
            sluice.RuntimeConfig(providers={"sim": provider}), "sim", respect_limits=False
        )
        template = LoadTest(
            model="sim:sim-small",
            shape=OpenLoop.at_rate(1),
            duration=10,
            workload=Workload(
                input_tokens=Lengths("uniform", 50, 150), output_tokens=Lengths("fixed", 24)
            ),
            slos=(parse_slo("ttft_p99=400ms"), parse_slo("itl_p95=30ms")),
        )
        async with sluice.open_runtime(config) as rt:
            result = await run_sweep(
                rt,
                template,
                SweepPlan(start=2.0, refine=3),
                on_point=lambda p: print(
                    f"{p.rate:.3g}/s: {'saturated' if p.verdict.saturated else 'sustained'}",
                    file=sys.stderr,
                ),
            )
        services.cancel_scope.cancel()
    document = results_document(
        result.best.run, settings={"base_url": "in-process simulator"}, sweep=result
    )
    if len(sys.argv) > 1:  # the results file too (about 1 MB: not kept in the repository)
        write_results(Path(sys.argv[1]), document)
    write_report(HERE / "loadtest-report.html", document)
    print(f"saturation rate: {result.saturation_rate}", file=sys.stderr)


if __name__ == "__main__":
    trio.run(main)
