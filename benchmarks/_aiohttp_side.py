"""The asyncio + aiohttp side of ``benchmarks.overhead``, run as a child process.

    python -m benchmarks._aiohttp_side --url URL --model mock --concurrency 64 [--chunks 20]

Modelled on ``shared/perf/client_asyncio_aiohttp.py``: one ``aiohttp.ClientSession`` whose
``TCPConnector`` allows ``concurrency`` connections, ``async for line in resp.content``,
``orjson.loads`` per ``data:`` line. It sends the bytes sluice sends (same body and headers as
``_harness.BareClient``). The process keeps one event loop and one session for its whole life,
so its connection pool stays warm between phases like the other sides' pools do.

Protocol (line based, so the parent can interleave this side's phases with its own):

* on start it prints ``{"ready": true, "aiohttp": VERSION}``;
* each stdin line ``CALLS`` runs one closed-loop phase of that many calls and prints one JSON
  object: ``cpu_s`` (``time.process_time`` around the phase: this process, all threads),
  ``wall_s``, ``ok``, ``errors``, ``mismatched``, ``first_errors``, ``sample_text``,
  ``timed_out``;
* end of stdin (or a line ``quit``) closes the session and exits.

It imports neither trio nor sluice: what it measures is asyncio + aiohttp + orjson alone.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import time
from importlib import metadata
from typing import Any

import aiohttp
import orjson

PROMPT = "hi"
API_KEY = "sk-mock"


class Side:
    def __init__(self, url: str, model: str, concurrency: int, chunks: int | None) -> None:
        self.url = url.rstrip("/") + "/chat/completions"
        self.body = {
            "model": model,
            "messages": [{"role": "user", "content": PROMPT}],
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        self.headers = {
            "content-type": "application/json",
            "accept": "text/event-stream",
            "authorization": f"Bearer {API_KEY}",
        }
        self.concurrency = concurrency
        self.chunks = chunks
        self.session: aiohttp.ClientSession | None = None

    async def open(self) -> None:
        connector = aiohttp.TCPConnector(limit=self.concurrency, limit_per_host=0)
        self.session = aiohttp.ClientSession(
            connector=connector, timeout=aiohttp.ClientTimeout(total=None, sock_read=60)
        )

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()

    async def one(self) -> tuple[int | None, str]:
        assert self.session is not None
        parts: list[str] = []
        output_tokens = None
        async with self.session.post(
            self.url, data=orjson.dumps(self.body), headers=self.headers
        ) as resp:
            if resp.status != 200:
                raise RuntimeError(f"HTTP {resp.status}: {(await resp.read())[:200]!r}")
            async for line in resp.content:
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    continue
                chunk = orjson.loads(data)
                choices = chunk.get("choices")
                if choices:
                    content = choices[0]["delta"].get("content")
                    if content:
                        parts.append(content)
                usage = chunk.get("usage")
                if usage:
                    output_tokens = usage.get("completion_tokens")
        return output_tokens, "".join(parts)

    async def phase(self, calls: int, max_seconds: float) -> dict[str, Any]:
        result: dict[str, Any] = {"ok": 0, "errors": 0, "mismatched": 0}
        first_errors: list[str] = []
        sample: list[str] = []
        left = calls

        def note(what: str) -> None:
            if len(first_errors) < 5:
                first_errors.append(what[:300])

        async def worker() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                try:
                    output_tokens, text = await self.one()
                except Exception as exc:  # every failure is counted
                    result["errors"] += 1
                    note(f"{type(exc).__name__}: {exc}")
                    continue
                if self.chunks is not None and output_tokens != self.chunks:
                    result["mismatched"] += 1
                    note(f"expected {self.chunks} output tokens, got {output_tokens}")
                    continue
                result["ok"] += 1
                if not sample:
                    sample.append(text)

        gc.collect()
        cpu0 = time.process_time()
        t0 = time.perf_counter()
        timed_out = False
        try:
            await asyncio.wait_for(
                asyncio.gather(*(worker() for _ in range(min(calls, self.concurrency)))),
                max_seconds,
            )
        except TimeoutError:
            timed_out = True
        wall = time.perf_counter() - t0
        cpu = time.process_time() - cpu0
        missing = calls - result["ok"] - result["errors"] - result["mismatched"]
        if missing > 0:
            result["errors"] += missing
            note(f"{missing} calls did not finish" + (" (timed out)" if timed_out else ""))
        result.update(
            cpu_s=cpu,
            wall_s=wall,
            timed_out=timed_out,
            first_errors=first_errors,
            sample_text=sample[0] if sample else None,
        )
        return result


def _emit(obj: dict[str, Any]) -> None:
    sys.stdout.buffer.write(orjson.dumps(obj) + b"\n")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks._aiohttp_side")
    p.add_argument("--url", required=True, help="the server's /v1 root")
    p.add_argument("--model", default="mock")
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--chunks", type=int, default=None, help="expected completion_tokens")
    p.add_argument("--max-seconds", type=float, default=600.0)
    p.add_argument(
        "--gc",
        choices=("default", "tuned"),
        default="default",
        help="tuned: the collector settings sluice's own processes use (gc.freeze() once "
        "started, a young-generation threshold of 10,000), so both sides run alike",
    )
    a = p.parse_args(argv)
    side = Side(a.url, a.model, a.concurrency, a.chunks)
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(side.open())
        if a.gc == "tuned":
            gc.freeze()
            young, middle, old = gc.get_threshold()
            gc.set_threshold(max(young, 10_000), middle, old)
        _emit({"ready": True, "aiohttp": metadata.version("aiohttp")})
        for line in sys.stdin:
            command = line.strip()
            if not command:
                continue
            if command == "quit":
                break
            _emit(loop.run_until_complete(side.phase(int(command), a.max_seconds)))
        loop.run_until_complete(side.close())
    finally:
        loop.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
