"""The HTML report: one self-contained file (inline CSS and SVG, no scripts, nothing fetched)
built from a results document. Pure.

Charts, each an ``<svg data-chart="ID">`` (:data:`CHARTS`, plus :data:`SWEEP_CHARTS` when the
run was a sweep): the distributions of TTFT, ITL, TPOT and end-to-end latency; TTFT, ITL,
throughput and client lag over the run; the sweep's achieved-versus-offered curve and its
latency curve.
"""

from __future__ import annotations

from html import escape
from typing import Any

from .stats import PERCENTILES
from .svg import PALETTE, Series, histogram, xy_chart

__all__ = ["CHARTS", "SWEEP_CHARTS", "render_report"]

CHARTS = (
    "ttft-histogram",
    "itl-histogram",
    "tpot-histogram",
    "e2e-histogram",
    "ttft-over-time",
    "itl-over-time",
    "throughput-over-time",
    "client-lag-over-time",
)
SWEEP_CHARTS = ("sweep-throughput", "sweep-latency")

_MAX_DOTS = 4000

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px auto;
max-width:1160px;color:#111827;background:#fff;padding:0 16px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;
border-bottom:1px solid #e5e7eb;padding-bottom:4px}
.meta{color:#4b5563}.badge{display:inline-block;padding:2px 8px;border-radius:10px;
font-weight:600}.ok{background:#d1fae5;color:#065f46}.bad{background:#fee2e2;color:#991b1b}
.warn{background:#fef3c7;border:1px solid #f59e0b;padding:8px 12px;border-radius:6px}
table{border-collapse:collapse;margin:6px 0}td,th{padding:3px 10px;text-align:right;
border-bottom:1px solid #f3f4f6}th:first-child,td:first-child{text-align:left}
th{background:#f9fafb}.grid-2{display:grid;grid-template-columns:repeat(2,1fr);gap:12px}
figure{margin:0}svg{max-width:100%;height:auto;background:#fff}
svg .title{font-size:13px;font-weight:600;fill:#111827}
svg .tick{font-size:10px;fill:#4b5563}svg .label{font-size:11px;fill:#374151}
svg .grid{stroke:#e5e7eb;stroke-width:1}svg .axis{stroke:#6b7280;stroke-width:1}
svg .marker{stroke:#111827;stroke-dasharray:3 3;stroke-width:1}
"""


def _ms(value: Any) -> str:
    return "-" if value is None else f"{value * 1000:.2f}"


def _num(value: Any, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, int):
        return str(value)
    return f"{value:.{digits}f}"


def _latency_table(agg: dict[str, Any]) -> str:
    names = [name for name, _ in PERCENTILES]
    head = "".join(f"<th>{n}</th>" for n in ["metric (ms)", "count", "mean", *names, "max"])
    rows = []
    for key, label in (
        ("ttft_s", "time to first token"),
        ("ttst_s", "time to second token"),
        ("itl_s", "inter-token latency (per token)"),
        ("icl_s", "inter-chunk latency"),
        ("tpot_s", "time per output token"),
        ("e2e_s", "end-to-end latency"),
        ("queue_wait_s", "queue wait (in sluice)"),
        ("ttft_after_queue_s", "TTFT from admission (sluice's waits left out)"),
        ("e2e_after_queue_s", "E2E from admission (sluice's waits left out)"),
        ("client_lag_s", "client send lag"),
        ("http_connect_s", "HTTP connect (new connections)"),
        ("http_headers_s", "HTTP request sent to headers"),
        ("http_receive_s", "HTTP headers to last byte"),
    ):
        s = agg.get(key)
        if s is None or (key.startswith(("http_", "ttft_after", "e2e_after")) and not s["count"]):
            continue  # a results file from before the metric existed, or nothing measured
        cells = [escape(label), str(s["count"]), _ms(s["mean"])]
        cells += [_ms(s[n]) for n in names] + [_ms(s["max"])]
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


def _kv_table(pairs: list[tuple[str, str]]) -> str:
    body = "".join(f"<tr><td>{escape(k)}</td><td>{escape(v)}</td></tr>" for k, v in pairs)
    return f"<table>{body}</table>"


def _markers(summary: dict[str, Any]) -> list[tuple[str, float]]:
    return [(f"{n} {summary[n] * 1000:.1f} ms", summary[n]) for n in ("p50", "p99") if summary[n]]


_MAX_VALUES = 200_000
"""Values a distribution chart is drawn from at most: past it, every k-th (by request, or by
token for ITL), evenly through the run, so the report of a long run needs bounded memory."""


def _every(count: int, most: int) -> int:
    """The stride that keeps at most about ``most`` of ``count`` items."""
    return max(1, -(-count // most))


def _collect(document: dict[str, Any]) -> dict[str, list[Any]]:
    """What the charts plot, from one pass over the records (which may be read from disk):
    the distributions' values (thinned past :data:`_MAX_VALUES`) and the dots (thinned to
    about :data:`_MAX_DOTS`: every k-th point)."""
    agg = document["aggregates"]
    requests = document["requests"]
    n = len(requests)
    per_request = _every(agg["requests"]["ok"], _MAX_VALUES)
    per_token = _every(agg["itl_s"]["count"] or 0, _MAX_VALUES)
    ttft_step = max(1, (agg["ttft_s"]["count"] or 0) // _MAX_DOTS)
    lag_step = max(1, n // _MAX_DOTS)
    got: dict[str, list[Any]] = {k: [] for k in ("ttft", "itl", "tpot", "e2e", "dots", "lag")}
    ok = tokens = with_ttft = 0
    for number, r in enumerate(requests):
        if number % lag_step == 0:
            got["lag"].append((r["scheduled_s"], r["lag_s"] * 1000))
        if not r["ok"]:
            continue
        if r["ttft_s"] is not None:
            if with_ttft % ttft_step == 0:
                got["dots"].append((r["sent_s"], r["ttft_s"] * 1000))
            with_ttft += 1
        for x in r["itls_s"]:
            if tokens % per_token == 0:
                got["itl"].append(x * 1000)
            tokens += 1
        if ok % per_request == 0:
            if r["ttft_s"] is not None:
                got["ttft"].append(r["ttft_s"] * 1000)
            if r["tpot_s"] is not None:
                got["tpot"].append(r["tpot_s"] * 1000)
            got["e2e"].append(r["e2e_s"] * 1000)
        ok += 1
    return got


def _histograms(agg: dict[str, Any], got: dict[str, Any]) -> list[str]:
    """The distribution of each latency, with its percentiles marked."""
    out = []
    for key, label, values in (
        ("ttft", "TTFT", got["ttft"]),
        ("itl", "ITL (per token)", got["itl"]),
        ("tpot", "TPOT", got["tpot"]),
        ("e2e", "end-to-end latency", got["e2e"]),
    ):
        markers = [(name, value * 1000) for name, value in _markers(agg[f"{key}_s"])]
        out.append(
            histogram(
                f"{key}-histogram",
                f"{label} distribution",
                values,
                x_label="milliseconds",
                markers=markers,
            )
        )
    return out


def _charts(document: dict[str, Any]) -> list[str]:
    agg = document["aggregates"]
    timeline = agg["timeline"]
    got = _collect(document)
    out = _histograms(agg, got)
    mid = [b["t_s"] + b["width_s"] / 2 for b in timeline]

    def line(name: str, key: str, color: str, scale: float = 1000.0) -> Series:
        points = [
            (t, b[key] * scale) for t, b in zip(mid, timeline, strict=True) if b[key] is not None
        ]
        return Series(name, points, color)

    ttft_dots = got["dots"]
    out.append(
        xy_chart(
            "ttft-over-time",
            "TTFT over the run (by send time)",
            [
                Series("each request", ttft_dots, PALETTE[0], line=False, dots=True),
                line("p50", "ttft_p50_s", PALETTE[1]),
                line("p99", "ttft_p99_s", PALETTE[3]),
            ],
            x_label="seconds since start",
            y_label="milliseconds",
        )
    )
    out.append(
        xy_chart(
            "itl-over-time",
            "Inter-token latency over the run",
            [line("p50", "itl_p50_s", PALETTE[0]), line("p99", "itl_p99_s", PALETTE[1])],
            x_label="seconds since start",
            y_label="milliseconds",
        )
    )
    out.append(
        xy_chart(
            "throughput-over-time",
            "Throughput over the run",
            [
                line("output tokens/s", "output_tokens_per_s", PALETTE[2], 1.0),
                line("requests/s x100", "requests_per_s", PALETTE[4], 100.0),
            ],
            x_label="seconds since start",
            y_label="per second",
        )
    )
    lag_dots = got["lag"]
    out.append(
        xy_chart(
            "client-lag-over-time",
            "Client send lag (how late each request went out)",
            [Series("lag", lag_dots, PALETTE[1], line=False, dots=True)],
            x_label="seconds since start (scheduled)",
            y_label="milliseconds",
        )
    )
    out += _sweep_charts(document)
    return [f"<figure>{chart}</figure>" for chart in out]


def _sweep_charts(document: dict[str, Any]) -> list[str]:
    """A rate sweep's charts: completed against offered rate, latency against offered rate."""
    out: list[str] = []
    sweep = document.get("sweep")
    if sweep:
        points = sorted(sweep["points"], key=lambda p: p["rate"])
        rates = [p["rate"] for p in points]
        top = max(rates)
        out.append(
            xy_chart(
                "sweep-throughput",
                "Sweep: completed vs offered rate",
                [
                    Series("offered", [(0.0, 0.0), (top, top)], "#9ca3af"),
                    Series(
                        "completed",
                        [(p["rate"], p["achieved_requests_per_s"]) for p in points],
                        PALETTE[0],
                        dots=True,
                    ),
                ],
                x_label="offered requests/s",
                y_label="requests/s",
            )
        )
        out.append(
            xy_chart(
                "sweep-latency",
                "Sweep: latency vs offered rate",
                [
                    Series(
                        name,
                        [(p["rate"], p[key] * 1000) for p in points if p[key] is not None],
                        color,
                        dots=True,
                    )
                    for name, key, color in (
                        ("TTFT p50", "ttft_p50_s", PALETTE[0]),
                        ("TTFT p99", "ttft_p99_s", PALETTE[1]),
                        ("E2E p50", "e2e_p50_s", PALETTE[2]),
                    )
                ],
                x_label="offered requests/s",
                y_label="milliseconds",
            )
        )
    return out


def render_report(document: dict[str, Any]) -> str:
    """The report for a results document (as :func:`.results.results_document` makes it)."""
    config = document["config"]
    agg = document["aggregates"]
    valid = document["valid"]
    badge = (
        '<span class="badge ok">valid</span>' if valid else '<span class="badge bad">INVALID</span>'
    )
    parts = [
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
        f"<title>sluice loadtest: {escape(config['model'])}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>sluice loadtest: {escape(config['model'])} {badge}</h1>",
        f'<p class="meta">{escape(config["load"])} &middot; started '
        f"{escape(document['started_at'])} &middot; sluice "
        f"{escape(document['versions']['sluice'])}</p>",
    ]
    if not valid:
        parts.append(f'<p class="warn">{escape(document["invalid_reason"] or "")}</p>')
    parts.append("<h2>Latency</h2>" + _latency_table(agg))
    parts.append("<h2>Requests and throughput</h2>" + _kv_table(_summary_rows(document)))
    parts += _sessions_and_server(document)
    parts.append('<h2>Charts</h2><div class="grid-2">' + "".join(_charts(document)) + "</div>")
    settings = [(k, str(v)) for k, v in config.items() if k != "workload"]
    settings += [(f"workload {k}", str(v)) for k, v in config["workload"].items()]
    parts.append("<h2>Configuration</h2>" + _kv_table(settings))
    parts.append("</body></html>\n")
    return "".join(parts)


def _load_and_waits(agg: dict[str, Any]) -> list[tuple[str, str]]:
    """The load as scheduled, sent and completed, and sluice's own retries and queueing."""
    rows = []
    load = agg.get("load")
    if load and load["offered_rate_per_s"] is not None:
        shown = [
            f"{name} {_num(load[key])}/s"
            for name, key in (
                ("scheduled", "scheduled_rate_per_s"),
                ("sent", "offered_rate_per_s"),
                ("completed", "completed_rate_per_s"),
            )
            if load[key] is not None
        ]
        state = {True: ": SATURATED", False: ": kept up", None: ""}[load["saturated"]]
        rows.append(("load", ", ".join(shown) + state))
    waits = agg.get("sluice_waits")
    if waits and (waits["requests_retried"] or waits["requests_queued"]):
        rows.append(
            (
                "sluice's own waits",
                f"{waits['requests_retried']} requests retried ({waits['attempts']} attempts), "
                f"{waits['requests_queued']} queued",
            )
        )
    return rows


def _summary_rows(document: dict[str, Any]) -> list[tuple[str, str]]:
    """The "Requests and throughput" table: counts, rates, goodput, SLOs and the checks."""
    agg = document["aggregates"]
    reqs, tp, good = agg["requests"], agg["throughput"], agg["goodput"]
    errors = ", ".join(f"{k}: {v}" for k, v in reqs["errors"].items()) or "none"
    summary = [
        ("requests", f"{reqs['total']} ({reqs['ok']} ok, {reqs['failed']} failed)"),
        ("error rate", f"{reqs['error_rate'] * 100:.2f} %"),
        ("errors", errors),
        ("elapsed", f"{tp['elapsed_s']:.2f} s"),
        ("requests/s", _num(tp["requests_per_s"])),
        (
            "output tokens/s (peak)",
            f"{_num(tp['output_tokens_per_s'])} ({_num(tp['peak_output_tokens_per_s'])})",
        ),
        ("input tokens/s", _num(tp["input_tokens_per_s"])),
        ("goodput requests/s", f"{_num(good['requests_per_s'])} ({good['fraction'] * 100:.1f} %)"),
    ]
    for check in good["slos"]:
        verdict = "met" if check["met"] else "MISSED"
        summary.append(
            (
                f"SLO {check['slo']} <= {check['bound_s'] * 1000:g} ms",
                f"{_ms(check['measured_s'])} ms: {verdict}",
            )
        )
    summary += _load_and_waits(agg)
    sweep = document.get("sweep")
    if sweep:
        rate = sweep["saturation_rate"]
        summary.append(("saturation rate", "-" if rate is None else f"{rate:.3g} requests/s"))
    ci = agg["ttft_s"].get("ci95") or {}
    if ci:
        summary.append(
            (
                "TTFT 95 % intervals",
                ", ".join(f"{k} {_ms(lo)}-{_ms(hi)} ms" for k, (lo, hi) in ci.items()),
            )
        )
    lengths, counts = agg.get("output_length"), agg.get("token_counts")
    if lengths:
        summary.append(
            (
                "output length requested / received",
                f"{lengths['requested']} / {lengths['received']} tokens "
                f"({lengths['requests_short']} short, {lengths['requests_long']} long)",
            )
        )
    if counts:
        summary.append(
            (
                "output tokens server / client",
                f"{counts['server_reported']} / {counts['client_counted']} "
                f"({counts['requests_differing']} requests differ; client rule: "
                f"{counts['client_rule']})",
            )
        )
    reuse = agg.get("http_reuse")
    if reuse and reuse["measured"]:
        summary.append(
            (
                "HTTP connections reused",
                f"{reuse['reused']} of {reuse['measured']} requests "
                f"({reuse['fraction'] * 100:.1f} %), {reuse['new']} opened a connection",
            )
        )
    return summary


def _sessions_and_server(document: dict[str, Any]) -> list[str]:
    """The multi-turn sessions' and the scraped server metrics' sections, when there are."""
    agg = document["aggregates"]
    parts = []
    sessions = agg.get("sessions")
    if sessions:
        rows = [
            (
                f"turn {t['turn']}",
                f"{t['ok']}/{t['requests']} ok, input {_num(t['input_tokens_mean'] or 0)} "
                f"tokens, TTFT p50 {_ms(t['ttft_p50_s'])} ms, E2E p50 {_ms(t['e2e_p50_s'])} ms",
            )
            for t in sessions["per_turn"]
        ]
        rows.append(
            (
                "sessions",
                f"{sessions['complete']}/{sessions['count']} complete, duration p50 "
                f"{_ms(sessions['duration_s']['p50'])} ms",
            )
        )
        parts.append("<h2>Multi-turn sessions</h2>" + _kv_table(rows))
    server = document.get("server_metrics")
    if server:
        rows = [
            (
                key,
                f"{_num(v['first'])} -> {_num(v['last'])}"
                + (f" ({_num(v['per_second'])}/s)" if v["per_second"] else ""),
            )
            for key, v in server["series"].items()
            if v["change"]
        ]
        head = (
            f"{escape(server['url'])}: {server['scrapes']} scrapes every "
            f"{server['interval_s']:g} s, {server['failures']} failed; series that changed:"
        )
        parts.append(f"<h2>Server metrics</h2><p>{head}</p>" + _kv_table(rows))
    return parts
