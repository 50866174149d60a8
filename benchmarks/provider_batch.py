"""``run_batch(via="provider")``: lines per second and peak RSS of the submit and merge path,
at two file sizes (is memory flat in the number of lines?).

    python -m benchmarks.provider_batch                       # 100,000 and 1,000,000 lines
    python -m benchmarks.provider_batch --lines 20000,200000

What runs is the provider lane's engine with the real OpenAI backend's encoding and decoding
(the codec builds each line's body; each result line is decoded by the codec as a realtime
reply is) and the real ledger, output and journal; what it talks to is a batch API kept on
disk by this benchmark: an upload is written to a file, a batch ends at its first look, and its
results are a canned ``chat.completion`` per line of that file, streamed back. So the numbers
are sluice's cost per line (parse, encode, plan, journal, decode, render, write, book), not a
provider's or the simulator's (whose reply generation costs more than all of that).

Every size runs in a child process (``--child``) so that its peak RSS (``ru_maxrss``) is its
own. One JSON line on stdout: per size lines/s, peak RSS, RSS before the run, batches; then
``rss_growth_mb`` between the largest and the smallest. Exit 1 when a run did not write one
line per input line.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from ._harness import versions

_PAGE_MB = os.sysconf("SC_PAGE_SIZE") / 2**20


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.provider_batch")
    p.add_argument("--lines", default="100000,1000000", help="file sizes (100000,1000000)")
    p.add_argument("--timeout", type=float, default=3600.0)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--input", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--output", type=Path, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def write_input(path: Path, lines: int) -> int:
    with open(path, "wb") as f:
        for i in range(lines):
            body = {
                "model": "sim:sim-small",
                "messages": [{"role": "user", "content": f"Summarize item {i} in one line."}],
                "max_tokens": 24,
            }
            line = {"custom_id": f"req-{i:07d}", "method": "POST", "url": "/v1/chat/completions"}
            f.write(orjson.dumps({**line, "body": body}) + b"\n")
    return path.stat().st_size


def _rss_mb() -> float:
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[1]) * _PAGE_MB


_REPLY = {
    "object": "chat.completion",
    "created": 1_700_000_000,
    "model": "sim-small",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "A one-line summary of the item."},
            "finish_reason": "stop",
        }
    ],
    "usage": {"prompt_tokens": 14, "completion_tokens": 8, "total_tokens": 22},
}


class DiskBatchAPI:
    """Uploads kept as files in ``folder``; a batch ends at its first look; its results are
    a canned reply per line of its file, read back line by line (memory flat)."""

    def __init__(self, real: Any, folder: Path) -> None:
        self._real = real
        self._folder = folder
        self.name = "openai"
        self.limits = real.limits
        self._files = 0

    def entry(self, wire_id: str, request: Any) -> Any:
        return self._real.entry(wire_id, request)

    async def upload(self, entries: Any) -> str:
        import trio

        self._files += 1
        path = self._folder / f"file-{self._files}.jsonl"

        def write() -> None:
            with open(path, "wb") as f:
                f.writelines(e.data for e in entries)

        await trio.to_thread.run_sync(write)
        return str(path)

    async def create(self, entries: Any, file_id: str | None, fingerprint: str) -> Any:
        return self._remote(f"batch:{file_id}", "running", fingerprint, len(entries))

    async def find(self, fingerprint: str, *, since: float) -> Any:
        return None

    async def get(self, batch_id: str) -> Any:
        return self._remote(batch_id, "ended", None, 0)

    async def results(self, batch: Any) -> Any:
        path = batch.id.removeprefix("batch:")
        with open(path, "rb") as f:  # noqa: ASYNC230 (a benchmark's stand-in for a download)
            for n, raw in enumerate(f):
                wire_id = orjson.loads(raw)["custom_id"]
                line = {
                    "id": f"batch_req_{n}",
                    "custom_id": wire_id,
                    "response": {
                        "status_code": 200,
                        "request_id": f"req_{n}",
                        "body": {**_REPLY, "id": f"chatcmpl-{n}"},
                    },
                    "error": None,
                }
                yield self._real.decode_line(orjson.dumps(line))
        os.unlink(path)

    async def cancel(self, batch_id: str) -> Any:
        return self._remote(batch_id, "ended", None, 0)

    @staticmethod
    def _remote(batch_id: str, state: str, fingerprint: str | None, total: int) -> Any:
        from sluice._jobs.provider_batch.backend import RemoteBatch

        return RemoteBatch(batch_id, state, fingerprint, total, total, 0, time.time())  # type: ignore[arg-type]


def child(a: argparse.Namespace) -> int:
    import trio

    import sluice
    from sluice._jobs.provider_batch.backends import backend_for
    from sluice._jobs.provider_batch.engine import LaneOptions

    folder = Path(tempfile.mkdtemp(prefix="pbatch-api-"))

    def backends(rt: Any, provider: str) -> Any:
        real = backend_for(rt, provider)
        return None if real is None else DiskBatchAPI(real, folder)

    async def run() -> dict[str, Any]:
        config = sluice.RuntimeConfig(ledger=sluice.LedgerConfig(persist=False))
        rss_before = _rss_mb()
        t0 = time.perf_counter()
        summary = await sluice.run_batch(
            a.input,
            a.output,
            config=config,
            write_summary=False,
            via="provider",
            lane_options=LaneOptions(poll_interval=0.01, backends=backends),
        )
        wall = time.perf_counter() - t0
        return {
            "wall_s": round(wall, 2),
            "lines": summary.lines,
            "ok": summary.ok,
            "batches": summary.batches,
            "lines_per_s": round(summary.lines / wall),
            "rss_before_mb": round(rss_before, 1),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "cpu_s": round(time.process_time(), 2),
        }

    sys.stdout.buffer.write(orjson.dumps(trio.run(run)) + b"\n")
    return 0


def run_child(a: argparse.Namespace, source: Path, out: Path) -> dict[str, Any]:
    command = [sys.executable, "-m", "benchmarks.provider_batch", "--child"]
    command += ["--input", str(source), "--output", str(out)]
    env = {**os.environ, "SLUICE_LEDGER_DB": "off"}
    env.pop("SLUICE_CONFIG", None)
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        command, cwd=root, env=env, capture_output=True, timeout=a.timeout, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(done.stderr.decode(errors="replace")[-3000:])
    result: dict[str, Any] = orjson.loads(done.stdout.strip().splitlines()[-1])
    with open(out, "rb") as f:
        ids = {orjson.loads(line)["custom_id"] for line in f}
    result["one_line_per_input_line"] = len(ids) == result["lines"] == result["ok"]
    return result


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    if a.child:
        return child(a)
    sizes = [int(n) for n in a.lines.split(",")]
    runs = []
    with tempfile.TemporaryDirectory(prefix="pbatch-bench-") as tmp:
        for n in sizes:
            source, out = Path(tmp) / f"in-{n}.jsonl", Path(tmp) / f"out-{n}.jsonl"
            size = write_input(source, n)
            print(f"provider lane: {n} lines ({size / 2**20:.1f} MB)...", file=sys.stderr)
            run = run_child(a, source, out)
            run["input_mb"] = round(size / 2**20, 1)
            runs.append(run)
            print(f"  {run}", file=sys.stderr)
            source.unlink()
            out.unlink()
    report = {
        "benchmark": "provider_batch",
        **versions(),
        "runs": runs,
        "rss_growth_mb": round(runs[-1]["peak_rss_mb"] - runs[0]["peak_rss_mb"], 1),
    }
    sys.stdout.buffer.write(orjson.dumps(report) + b"\n")
    return 0 if all(r["one_line_per_input_line"] for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
