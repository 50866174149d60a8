"""The HTML report: every chart is there, each is well-formed SVG, and nothing outside the
file is referenced (no scripts, stylesheets, fonts or images to fetch)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import sluice
from sluice._config import RuntimeConfig
from sluice._jobs.loadtest import (
    Lengths,
    LoadTest,
    OpenLoop,
    SweepPlan,
    Workload,
    loadtest_config,
    run_sweep,
)
from sluice._jobs.loadtest.report import CHARTS, SWEEP_CHARTS, render_report
from sluice._jobs.loadtest.results import results_document
from sluice._jobs.loadtest.svg import nice_ticks
from sluice.simulator import SimulatorApp, SimulatorConfig

from .helpers import memory_transport, virtual_deadline

SVG_NS = "http://www.w3.org/2000/svg"


async def sweep_document(nursery):
    app = SimulatorApp(
        SimulatorConfig(
            ttft=0.1,
            ttft_jitter=0.03,
            tokens_per_second=40,
            itl_jitter=0.005,
            output_tokens=1000,
            capacity=2,
        )
    )
    template = LoadTest(
        model="sim:sim-small",
        shape=OpenLoop.at_rate(1),
        duration=10,
        workload=Workload(output_tokens=Lengths("fixed", 6), input_tokens=Lengths("fixed", 5)),
    )
    transport = memory_transport(app, nursery)
    config = loadtest_config(RuntimeConfig(), "sim", respect_limits=False)
    async with sluice.open_runtime(config, transport=transport) as rt:
        result = await run_sweep(rt, template, SweepPlan(rates=(2.0, 4.0, 16.0)))
    await transport.aclose()
    return results_document(result.best.run, sweep=result)


def svgs(html: str) -> dict[str, ET.Element]:
    found = {}
    for text in re.findall(r"<svg\b.*?</svg>", html, flags=re.S):
        element = ET.fromstring(text)  # well-formed, or this raises
        found[element.attrib["data-chart"]] = element
    return found


@virtual_deadline(600)
async def test_every_chart_is_in_the_report_and_nothing_is_external(autojump_clock, nursery):
    document = await sweep_document(nursery)
    html = render_report(document)
    charts = svgs(html)
    assert set(charts) == set(CHARTS) | set(SWEEP_CHARTS)
    for chart_id, element in charts.items():
        drawn = [
            e
            for e in element.iter()
            if e.tag in {f"{{{SVG_NS}}}{t}" for t in ("polyline", "circle", "rect")}
        ]
        assert drawn, f"{chart_id} draws nothing"
    lowered = html.lower()
    for forbidden in ("<script", "<link", "<img", "<iframe", "src=", "@import", "url("):
        assert forbidden not in lowered, forbidden
    addresses = set(re.findall(r"https?://[^\s\"'<>)]+", html))
    assert addresses <= {SVG_NS}
    assert "INVALID" not in html and "saturation rate" in html


@virtual_deadline(600)
async def test_an_invalid_run_says_why_at_the_top(autojump_clock, nursery):
    document = await sweep_document(nursery)
    document["valid"] = False
    document["invalid_reason"] = "the client fell behind its own schedule: lag"
    html = render_report(document)
    assert html.index("INVALID") < html.index("<h2>Latency")
    assert "the client fell behind its own schedule" in html


def test_ticks_are_round_and_cover_the_range():
    assert nice_ticks(0, 1) == [0, 0.2, 0.4, 0.6, 0.8, 1.0]
    ticks = nice_ticks(3.2, 47.9)
    assert ticks[0] <= 3.2 and ticks[-1] >= 47.9 and ticks[1] - ticks[0] == 10
    assert nice_ticks(5, 5)[0] == 5
