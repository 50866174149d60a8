"""The summary ``sluice loadtest`` prints when a run ends, from its result document."""

from __future__ import annotations

from typing import Any

__all__ = ["format_summary", "ms"]


def ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.1f} ms"


def format_summary(document: dict[str, Any]) -> str:
    """The lines printed when a run ends."""
    agg = document["aggregates"]
    reqs, tp = agg["requests"], agg["throughput"]
    lines = [
        f"loadtest {document['config']['model']}: {document['config']['load']}",
        f"  requests: {reqs['total']} sent, {reqs['ok']} ok, {reqs['failed']} failed"
        + (
            f" ({', '.join(f'{k} {v}' for k, v in reqs['errors'].items())})"
            if reqs["failed"]
            else ""
        ),
    ]
    for key, label in (("ttft_s", "TTFT"), ("itl_s", "ITL"), ("tpot_s", "TPOT"), ("e2e_s", "E2E")):
        s = agg[key]
        lines.append(
            f"  {label:<5} p50 {ms(s['p50'])}  p90 {ms(s['p90'])}  p99 {ms(s['p99'])}  "
            f"mean {ms(s['mean'])}"
        )
    lines += _sluice_wait_lines(agg)
    lines.append(
        f"  throughput: {tp['requests_per_s']:.2f} requests/s, "
        f"{tp['output_tokens_per_s']:.1f} output tokens/s over {tp['elapsed_s']:.1f} s"
    )
    if tp.get("embeddings_per_s") is not None:  # --endpoint embeddings: inputs a request
        lines.append(
            f"  embeddings: {tp['requests_per_s']:.2f} requests/s, "
            f"{tp['embeddings_per_s']:.1f} inputs/s "
            f"({document['config'].get('embedding_batch')} inputs a request)"
        )
    lines += _load_lines(agg)
    good = agg["goodput"]
    for check in good["slos"]:
        lines.append(
            f"  SLO {check['slo']} <= {check['bound_s'] * 1000:g} ms: measured "
            f"{ms(check['measured_s'])}, {'met' if check['met'] else 'MISSED'}"
        )
    if good["slos"]:
        lines.append(
            f"  goodput: {good['requests_per_s']:.2f} requests/s "
            f"({good['fraction'] * 100:.1f} % of requests met every SLO)"
        )
    lines.append(f"  client send lag p99: {ms(agg['client_lag_s']['p99'])}")
    lines += _detail_lines(agg)
    lines += _sweep_lines(document)
    if document.get("interrupted"):
        lines.append(f"  INTERRUPTED ({document['interrupted']}): partial results")
    if not document["valid"]:
        lines.append(f"  INVALID RUN: {document['invalid_reason']}")
    return "\n".join(lines)


def _detail_lines(agg: dict[str, Any]) -> list[str]:
    """The lines of what only some runs have: workers, HTTP phases, token counts, sessions."""
    lines: list[str] = []
    workers = agg.get("workers")  # --workers: each process's own send lag
    if workers:
        lines.append(
            f"  workers: {len(workers)} processes, send lag p99 by worker: "
            + ", ".join(ms(w["lag_p99_s"]) for w in workers)
        )
    reuse = agg.get("http_reuse")
    if reuse and reuse["measured"]:
        connect, headers = agg["http_connect_s"], agg["http_headers_s"]
        receive = agg["http_receive_s"]
        lines.append(
            f"  HTTP: connect p50 {ms(connect['p50'])} p99 {ms(connect['p99'])} "
            f"({reuse['new']} new), headers p50 {ms(headers['p50'])} p99 {ms(headers['p99'])},"
            f" receive p50 {ms(receive['p50'])} p99 {ms(receive['p99'])}, "
            f"{reuse['fraction'] * 100:.1f} % reused"
        )
    counts, lengths = agg.get("token_counts"), agg.get("output_length")
    if counts and counts["requests_differing"]:
        lines.append(
            f"  output tokens: server reported {counts['server_reported']}, client counted "
            f"{counts['client_counted']} ({counts['requests_differing']} requests differ)"
        )
    if lengths and (lengths["requests_short"] or lengths["requests_long"]):
        lines.append(
            f"  output length: {lengths['requests_short']} requests shorter and "
            f"{lengths['requests_long']} longer than the max_tokens asked"
        )
    sessions = agg.get("sessions")
    if sessions:
        lines.append(
            f"  sessions: {sessions['complete']} of {sessions['count']} complete "
            f"({sessions['turns']} turns), TTFT p50 by turn: "
            + ", ".join(ms(t["ttft_p50_s"]) for t in sessions["per_turn"])
        )
    return lines


def _load_lines(agg: dict[str, Any]) -> list[str]:
    """An open loop's load as asked, as sent and as completed."""
    load = agg.get("load")
    if not load or load["scheduled_rate_per_s"] is None:
        return []
    shown = [f"scheduled {load['scheduled_rate_per_s']:.3g}/s"]
    if load["offered_rate_per_s"] is not None:
        shown.append(f"sent {load['offered_rate_per_s']:.3g}/s")
    if load["completed_rate_per_s"] is not None:
        shown.append(f"completed {load['completed_rate_per_s']:.3g}/s")
    state = {True: ", SATURATED", False: ", kept up", None: ""}[load["saturated"]]
    return [f"  load: {', '.join(shown)}{state}"]


def _sluice_wait_lines(agg: dict[str, Any]) -> list[str]:
    """Retries and time in sluice's own queue, whenever there were any (``--respect-limits``
    lets quotas, cooldowns and retries act): they are part of the TTFT and E2E above, so the
    two are shown again from the final attempt's admission."""
    waits = agg.get("sluice_waits")
    if not waits or not (waits["requests_retried"] or waits["requests_queued"]):
        return []
    total = agg["requests"]["total"]
    lines = []
    if waits["requests_retried"]:
        backoff = waits["retry_backoff_s"]
        lines.append(
            f"  retries: {waits['requests_retried']} of {total} requests retried, "
            f"{waits['attempts']} attempts in all, backoff p50 {ms(backoff['p50'])} "
            f"max {ms(backoff['max'])}"
        )
    if waits["requests_queued"]:
        queue = agg["queue_wait_s"]
        lines.append(
            f"  queue wait in sluice: {waits['requests_queued']} of {total} requests waited, "
            f"p50 {ms(queue['p50'])}  p99 {ms(queue['p99'])}  max {ms(queue['max'])}"
        )
    ttft, e2e = agg["ttft_after_queue_s"], agg["e2e_after_queue_s"]
    lines.append(
        f"  without sluice's waits (from the last attempt's admission): TTFT p50 "
        f"{ms(ttft['p50'])} p99 {ms(ttft['p99'])}, E2E p50 {ms(e2e['p50'])} "
        f"p99 {ms(e2e['p99'])}"
    )
    return lines


def _sweep_lines(document: dict[str, Any]) -> list[str]:
    """The summary's lines about a rate sweep (its saturation rate) or concurrency levels."""
    lines = []
    sweep = document.get("sweep")
    if sweep:
        rate = sweep["saturation_rate"]
        points = sweep["points"]
        if rate is None:
            shown = "not found (even the lowest rate saturated)"
        elif not any(p["saturated"] for p in points):
            top = max(p["rate"] for p in points)
            shown = (
                f"no saturation found: every rate up to {top:.3g}/s was sustained "
                "(sweep higher rates to find it)"
            )
        else:
            shown = f"{rate:.3g}/s"
        lines.append(f"  saturation rate: {shown}")
    swept = document.get("concurrency_sweep")
    if swept:
        for point in swept:
            lines.append(
                f"  concurrency {point['concurrency']}: {point['requests_per_s']:.3g} requests/s,"
                f" TTFT p50 {ms(point['ttft_p50_s'])}, E2E p99 {ms(point['e2e_p99_s'])}"
            )
    return lines
