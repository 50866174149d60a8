"""Does ``sluice loadtest`` stay flat over a long run? Its RSS, sampled while it runs.

    python -m benchmarks.loadtest_soak --minutes 30                       # the soak (issue 28)
    python -m benchmarks.loadtest_soak --minutes 0.5 --sample-every 2    # a smoke run

A simulator runs as its own process (``sluice sim``: a short time to first token, fast
tokens, several tokens per streamed chunk), and ``sluice loadtest`` runs as another, at
``--rate`` requests per second for ``--minutes``, with the default workload (128 output
tokens, so each record carries 128 per-token latencies). Every ``--sample-every`` seconds this
script reads the load tester's RSS from ``/proc/PID/status`` and how many requests it has
finished (from its progress lines on stderr). When it ends: the table of samples, the kernel's
peak RSS of the process (which includes writing the results at the end), the least-squares
RSS slope over the last two thirds of the run (after ``--warmup``) in MB per hour and in KB
per 1,000 requests, and one JSON line with everything.

Before the records went to disk as they finished, memory grew with every request (issue 28:
about 32 KB each); a flat line is the goal.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shlex
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import orjson


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.loadtest_soak", description=__doc__)
    p.add_argument("--minutes", type=float, default=30.0, help="length of the load (30)")
    p.add_argument("--rate", type=float, default=50.0, help="requests per second (50)")
    p.add_argument("--sample-every", type=float, default=30.0, help="seconds between samples")
    p.add_argument("--output-tokens", type=int, default=128, help="tokens per reply (128)")
    p.add_argument("--tokens-per-chunk", type=int, default=4, help="tokens per streamed chunk (4)")
    p.add_argument(
        "--warmup",
        type=float,
        default=None,
        help="seconds left out of the RSS fit at least (10%% of the run, at most 120)",
    )
    p.add_argument(
        "--folder", type=Path, default=None, help="where the results go (a temporary folder)"
    )
    a = p.parse_args(argv)
    if a.minutes <= 0 or a.rate <= 0 or a.sample_every <= 0:
        p.error("--minutes, --rate and --sample-every must be above 0")
    if a.warmup is None:
        a.warmup = min(120.0, a.minutes * 60 * 0.1)
    return a


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def sluice_command(*args: str) -> list[str]:
    return [
        sys.executable,
        "-c",
        "import sys; from sluice._cli import main; sys.exit(main())",
        *args,
    ]


def wait_listening(port: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError("the simulator exited before it listened")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("the simulator did not listen within 30 s")


def rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


_PROGRESS = re.compile(r"sent (\d+)\s+done (\d+)")


class Progress:
    """The load tester's stderr, read in a thread: its latest counts, and every line."""

    def __init__(self, stream: Any) -> None:
        self.sent = self.done = 0
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: Any) -> None:
        for raw in stream:
            line = raw.decode(errors="replace").rstrip()
            self.lines.append(line)
            found = _PROGRESS.search(line)
            if found:
                self.sent, self.done = int(found[1]), int(found[2])

    def join(self) -> None:
        self._thread.join(10)


def slope(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of (x, y)."""
    if len(points) < 2:
        return None
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx == 0:
        return None
    return sum((x - mx) * (y - my) for x, y in points) / sxx


def run(a: argparse.Namespace, folder: Path) -> dict[str, Any]:
    port = free_port()
    sim = subprocess.Popen(
        sluice_command(
            "sim",
            "--port",
            str(port),
            "--ttft",
            "0.02",
            "--tps",
            "4000",
            "--tokens-per-chunk",
            str(a.tokens_per_chunk),
            "--output-tokens",
            "100000",
        ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_listening(port, sim)
        out = folder / "soak.json"
        command = sluice_command(
            "loadtest", "--model", "sim:sim-small", "--base-url", f"http://127.0.0.1:{port}/v1",
            "--rate", str(a.rate), "--duration", str(a.minutes * 60),
            "--output-tokens", str(a.output_tokens), "--out", str(out), "--timeout", "60",
        )  # fmt: skip
        started = time.monotonic()
        tester = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert tester.stderr is not None and tester.stdout is not None
        progress = Progress(tester.stderr)
        samples: list[dict[str, Any]] = []
        while tester.poll() is None:
            time.sleep(min(a.sample_every, 1.0))
            t = time.monotonic() - started
            if samples and t - samples[-1]["t"] < a.sample_every:
                continue
            rss = rss_mb(tester.pid)
            if rss is None:
                break
            samples.append({"t": round(t, 1), "rss_mb": round(rss, 2), "done": progress.done})
            print(f"{t:8.1f} s  RSS {rss:8.2f} MB  done {progress.done}", file=sys.stderr)
        summary = tester.stdout.read().decode()
        status = tester.wait()
        # The load tester is the only child waited for so far: this is its peak RSS, the
        # writing of the results at the end included.
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        progress.join()
        wall = time.monotonic() - started
    finally:
        sim.terminate()
        sim.wait(10)
    seconds = a.minutes * 60
    fit_from = max(a.warmup, seconds / 3)
    fit = [s for s in samples if fit_from <= s["t"] <= seconds]
    per_hour = slope([(s["t"], s["rss_mb"]) for s in fit])
    per_request = slope([(s["done"], s["rss_mb"]) for s in fit])
    document = orjson.loads(out.read_bytes()) if out.exists() else None
    requests = document["aggregates"]["requests"] if document else None
    return {
        "command": shlex.join(command),
        "minutes": a.minutes,
        "rate": a.rate,
        "wall_s": round(wall, 1),
        "exit_status": status,
        "requests": requests,
        "valid": document["valid"] if document else None,
        "invalid_reason": document["invalid_reason"] if document else None,
        "results_bytes": out.stat().st_size if out.exists() else None,
        "samples": samples,
        "rss_first_mb": samples[0]["rss_mb"] if samples else None,
        "rss_fit_first_mb": fit[0]["rss_mb"] if fit else None,
        "rss_last_mb": samples[-1]["rss_mb"] if samples else None,
        "rss_peak_mb": round(peak, 2),
        "rss_slope_mb_per_hour": None if per_hour is None else round(per_hour * 3600, 3),
        "rss_slope_kb_per_1000_requests": (
            None if per_request is None else round(per_request * 1024 * 1000, 2)
        ),
        "rss_fit_samples": len(fit),
        "summary": summary,
        "stderr_tail": progress.lines[-3:],
    }


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    if a.folder is not None:
        a.folder.mkdir(parents=True, exist_ok=True)
        report = run(a, a.folder)
    else:
        with tempfile.TemporaryDirectory() as folder:
            report = run(a, Path(folder))
    for s in report["samples"]:
        print(f"{s['t']:8.1f} s  RSS {s['rss_mb']:8.2f} MB  done {s['done']}")
    print(report["summary"], end="")
    print(
        f"# {report['command']}\n# exit {report['exit_status']}; RSS first {report['rss_first_mb']}"
        f" MB, at the fit's start {report['rss_fit_first_mb']} MB, last {report['rss_last_mb']} MB,"
        f" peak {report['rss_peak_mb']} MB; slope over the last 2/3: "
        f"{report['rss_slope_mb_per_hour']} MB/h, {report['rss_slope_kb_per_1000_requests']} KB"
        f" per 1,000 requests ({report['rss_fit_samples']} samples)"
    )
    sys.stdout.buffer.write(orjson.dumps(report) + b"\n")
    sys.stdout.flush()
    return 0 if report["exit_status"] in (0, 1) else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
