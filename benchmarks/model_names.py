"""Can a client choose the gateway's memory? N distinct model names through ``sluice serve``.

    python -m benchmarks.model_names                       # 10,000 names, twice
    python -m benchmarks.model_names --names 2000 --rounds 1
    python -m benchmarks.model_names --models sim:sim-small  # the allow-list refuses them

Starts ``sluice serve --no-auth --port 0`` (a real process, its built-in simulator as the
upstream, ledger in memory, and by default one quota key per model: ``rate_limit.key =
"model"`` with a requests-per-minute limit, the setting that makes most state per name), warms it
up with ``--warmup`` calls to one model, then sends ``--rounds`` rounds of ``--names`` chat
calls, each to a model name never used before (``sim:m-<i>``), ``--concurrency`` at a time.
Before the names and after each round it reads the server's RSS (``/proc/PID/status``) and
scrapes ``/metrics`` (size, lines, distinct ``model`` label values).

It prints one line per sample to stderr, then one JSON line to stdout. Flat RSS and a flat
``/metrics`` from one round to the next is the goal (issues 27 and 29): the state a name makes
is dropped or folded (``other``) once many names exist. The ledger keeps one row per model,
which is the record: in memory by default here (a little growth per new name remains), in a
file with ``--ledger-file`` (then memory should stay flat once the first round is through).
Quota keys are kept while their window counts a call (a minute here), so memory settles once a
round lasts longer than that. ``--sluice`` runs another build
(a command line, split on spaces) to compare with.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import trio

_LISTENING = re.compile(r"listening on (http://\S+)")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.model_names", description=__doc__)
    p.add_argument("--names", type=int, default=10_000, help="new model names per round")
    p.add_argument("--rounds", type=int, default=2, help="rounds of new names (2)")
    p.add_argument("--concurrency", type=int, default=32, help="calls at a time (32)")
    p.add_argument("--warmup", type=int, default=500, help="calls to one model first (500)")
    p.add_argument(
        "--per-provider-quota",
        action="store_true",
        help="one quota key for the provider (the default config) instead of one per model",
    )
    p.add_argument(
        "--ledger-file",
        action="store_true",
        help="keep the ledger in a file (in a temporary folder) instead of in memory, as a"
        " daemon does by default: then the rows are on disk, and memory should stay flat",
    )
    p.add_argument("--models", default=None, help="pass --models to sluice serve")
    p.add_argument(
        "--sluice",
        default=str(Path(sys.executable).with_name("sluice")),
        help="the sluice command to run (default: the one beside this Python)",
    )
    return p.parse_args(argv)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def start_server(args: argparse.Namespace, config: Path) -> tuple[subprocess.Popen[str], str]:
    command = [*args.sluice.split(), "serve", "--no-auth", "--port", "0", "--config", str(config)]
    if args.models:
        command += ["--models", args.models]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    banner = proc.stdout.readline()
    found = _LISTENING.search(banner)
    if found is None:
        proc.kill()
        raise SystemExit(f"sluice serve did not start: {banner}{proc.stdout.read()}")
    return proc, found.group(1)


async def calls(client: httpx.AsyncClient, names: list[str], concurrency: int) -> dict[int, int]:
    """Send one call per name; the count of each status."""
    statuses: dict[int, int] = {}
    it = iter(names)

    async def worker() -> None:
        for name in it:
            body = {"model": name, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
            reply = await client.post("/v1/chat/completions", json=body)
            statuses[reply.status_code] = statuses.get(reply.status_code, 0) + 1

    async with trio.open_nursery() as nursery:
        for _ in range(concurrency):
            nursery.start_soon(worker)
    return statuses


async def scrape(client: httpx.AsyncClient) -> dict[str, Any]:
    started = time.perf_counter()
    text = (await client.get("/metrics", timeout=600)).text
    took = time.perf_counter() - started
    models = set(re.findall(r'model="([^"]*)"', text))
    return {
        "metrics_bytes": len(text),
        "metrics_lines": text.count("\n"),
        "models": len(models),
        "scrape_seconds": round(took, 3),
    }


async def run(args: argparse.Namespace, pid: int, url: str) -> dict[str, Any]:
    limits = httpx.Limits(
        max_connections=args.concurrency, max_keepalive_connections=args.concurrency
    )
    samples = []
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as client:
        await calls(client, ["sim:sim-small"] * args.warmup, args.concurrency)
        await trio.sleep(1)
        samples.append({"names": 0, "rss_mb": rss_mb(pid), **await scrape(client)})
        print(json.dumps(samples[-1]), file=sys.stderr, flush=True)
        for r in range(args.rounds):
            names = [f"sim:m-{r * args.names + i}" for i in range(args.names)]
            started = time.perf_counter()
            statuses = await calls(client, names, args.concurrency)
            elapsed = time.perf_counter() - started
            await trio.sleep(1)
            sample = {
                "names": (r + 1) * args.names,
                "rss_mb": rss_mb(pid),
                **await scrape(client),
                "statuses": statuses,
                "seconds": round(elapsed, 1),
            }
            samples.append(sample)
            print(json.dumps(sample), file=sys.stderr, flush=True)
    first, last = samples[0], samples[-1]
    return {
        "names": last["names"],
        "rss_before_mb": round(first["rss_mb"], 1),
        "rss_after_mb": round(last["rss_mb"], 1),
        "rss_per_round_mb": [round(s["rss_mb"], 1) for s in samples],
        "metrics_bytes": [s["metrics_bytes"] for s in samples],
        "metrics_lines": [s["metrics_lines"] for s in samples],
        "model_label_values": [s["models"] for s in samples],
        "scrape_seconds": [s["scrape_seconds"] for s in samples],
        "statuses": [s["statuses"] for s in samples[1:]],
    }


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    provider: dict[str, Any] = {}
    if not args.per_provider_quota:
        provider["rate_limit"] = {"key": "model", "requests_per_minute": 1_000_000}
    with tempfile.TemporaryDirectory() as tmp:
        ledger = {"path": str(Path(tmp) / "ledger.db")} if args.ledger_file else {"persist": False}
        config_data = {"ledger": ledger, "providers": {"sim": provider}}
        config = Path(tmp) / "config.json"
        config.write_text(json.dumps(config_data))
        proc, url = start_server(args, config)
        try:
            report = trio.run(run, args, proc.pid, url)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.communicate()
    print(
        json.dumps(
            {
                "benchmark": "model_names",
                **report,
                "ledger": "file" if args.ledger_file else "memory",
                "command": args.sluice,
            }
        )
    )


if __name__ == "__main__":
    main()
