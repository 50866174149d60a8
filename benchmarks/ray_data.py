"""sluice.ray beside Ray Data's own ``HttpRequestProcessor`` (``ray.data.llm``): same simulator,
same rows, one run.

    python -m benchmarks.ray_data                                   # 400 rows, quota 1200/min
    python -m benchmarks.ray_data --rows 1200 --rpm 600 --actors 4 --store redis://127.0.0.1:6379/0

The simulator (on loopback, in this process) enforces a provider quota of ``--rpm`` requests a
minute and answers 429 past it. The same rows (one short question each) go through three
pipelines on a local Ray of ``--cpus`` CPUs, each with ``--actors`` actors:

- ``sluice``: :class:`sluice.ray.Caller` with ``requests_per_minute = rpm`` in its config and
  the quota shared through Redis (``--store``, else a ``redis-server`` started here).
- ``ray_qps_as_documented``: ``HttpRequestProcessorConfig(qps=rpm // 60, max_retries=...)``:
  the quota's rate given as ``qps``, which each actor applies on its own.
- ``ray_qps_split``: the same with ``qps`` divided by the number of actors by hand (at least 1).

Reported for each: rows out, rows/s (rows over the wall time of the pipeline, actors' start
included), rows/s over the span of the calls at the server (first to last request, so
without the actors' start), rows answered, rows that ended as error rows, the 429s the
server sent, and whether the configured quota held at the server: the most requests it
admitted (answered other than 429) in any 60 s window, against ``--rpm``. Ray's processor
has no error rows (``HttpRequestProcessorConfig`` takes no ``should_continue_on_error``): a
request that still fails after ``max_retries`` fails its task, and the pipeline with it,
which is reported as ``failed`` with the error.

One JSON line on stdout; progress on stderr. ``ray.data.llm`` needs aiohttp; when it cannot be
imported, its pipelines are reported as not run, with the reason.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from ._harness import versions

if TYPE_CHECKING:
    from collections.abc import Iterator


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.ray_data",
        description="sluice.ray beside ray.data.llm's HttpRequestProcessor on one simulator.",
    )
    p.add_argument("--rows", type=int, default=400, help="rows (400)")
    p.add_argument("--rpm", type=int, default=1200, help="the server's quota a minute (1200)")
    p.add_argument("--actors", type=int, default=4, help="actors of each pipeline (4)")
    p.add_argument("--cpus", type=int, default=2, help="the local Ray's CPUs (2)")
    p.add_argument("--batch-size", type=int, default=25, help="rows per batch (25)")
    p.add_argument("--max-retries", type=int, default=3, help="Ray processor's retries (3)")
    p.add_argument("--store", default=None, help="redis://... (default: start a redis-server)")
    return p.parse_args(argv)


def _log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


@contextlib.contextmanager
def _simulator(rpm: int) -> Iterator[tuple[str, Any]]:
    """The simulator with a quota of ``rpm``, recording each generation request's arrival
    time and status, served from a thread."""
    from sluice.simulator import SimulatorApp, SimulatorConfig, serve_simulator

    class Recording(SimulatorApp):
        def __init__(self) -> None:
            super().__init__(SimulatorConfig(output_tokens=8, rpm=rpm))
            self.log: list[tuple[float, int]] = []

        async def handle(self, method: str, path: str, headers: Any, body: bytes) -> Any:
            arrived = time.monotonic()
            response = await super().handle(method, path, headers, body)
            if path.startswith("/v1/chat/completions"):
                self.log.append((arrived, response.status))
            return response

    app = Recording()
    ready = threading.Event()
    state: dict[str, Any] = {}

    async def main() -> None:
        state["token"] = trio.lowlevel.current_trio_token()
        with trio.CancelScope() as scope:
            state["scope"] = scope
            async with trio.open_nursery() as nursery:
                state["port"] = await nursery.start(serve_simulator, app)
                ready.set()

    thread = threading.Thread(target=trio.run, args=(main,), daemon=True)
    thread.start()
    if not ready.wait(10):
        raise RuntimeError("the simulator did not start")
    try:
        yield f"http://127.0.0.1:{state['port']}/v1", app
    finally:
        with contextlib.suppress(trio.RunFinishedError):
            state["token"].run_sync_soon(state["scope"].cancel)
        thread.join(10)


def _most_in_window(times: list[float], period: float) -> int:
    times = sorted(times)
    return max((bisect.bisect_left(times, t + period) - i for i, t in enumerate(times)), default=0)


def _server_view(log: list[tuple[float, int]], rpm: int) -> dict[str, Any]:
    admitted = [t for t, status in log if status != 429]
    busiest = _most_in_window(admitted, 60.0)
    span = max(t for t, _ in log) - min(t for t, _ in log) if log else 0.0
    return {
        "requests": len(log),
        "calls_span_s": round(span, 2),
        "429s": sum(1 for _, status in log if status == 429),
        "busiest_minute": busiest,
        "quota_held": busiest <= rpm,
    }


def _rows(n: int) -> list[dict[str, Any]]:
    return [{"id": i, "question": f"question number {i}"} for i in range(n)]


def run_sluice(args: argparse.Namespace, url: str, store: str) -> dict[str, Any]:
    import ray

    import sluice
    from sluice.ray import Caller, Calls

    config = sluice.load_config(
        {
            "providers": {
                "loop": {
                    "base_url": url,
                    "api_key": "k",
                    "rate_limit": {"requests_per_minute": args.rpm},
                }
            },
            "store": store,
            "store_prefix": f"bench-{uuid.uuid4().hex}",
            "ledger": {"persist": False},
        }
    )
    calls = Calls(model="loop:sim-small", prompt="question", params={"max_tokens": 8})
    ds = ray.data.from_items(_rows(args.rows)).map_batches(
        Caller,
        fn_constructor_kwargs={"calls": calls, "config": config, "progress_interval": None},
        compute=ray.data.ActorPoolStrategy(size=args.actors),
        num_cpus=args.cpus / (args.actors + 1),
        batch_size=args.batch_size,
        batch_format="pyarrow",
    )
    out = ds.take_all()
    return {
        "rows_out": len(out),
        "answered": sum(1 for r in out if r["error_type"] is None),
        "errors": sum(1 for r in out if r["error_type"] is not None),
    }


def run_ray_processor(args: argparse.Namespace, url: str, qps: int) -> dict[str, Any]:
    import ray
    from ray.data.llm import HttpRequestProcessorConfig, build_processor

    options: dict[str, Any] = {
        "url": f"{url}/chat/completions",
        "headers": {"Authorization": "Bearer k"},
        "qps": qps,
        "max_retries": args.max_retries,
        "concurrency": args.actors,
        "batch_size": args.batch_size,
    }
    config = HttpRequestProcessorConfig(**options)
    processor = build_processor(
        config,
        preprocess=lambda row: {
            "payload": {
                "model": "sim-small",
                "messages": [{"role": "user", "content": row["question"]}],
                "max_tokens": 8,
            }
        },
        postprocess=lambda row: {
            "id": row.get("id"),
            "ok": bool(row.get("http_response")) and not row.get("__inference_error__"),
        },
    )
    out = processor(ray.data.from_items(_rows(args.rows))).take_all()
    answered = sum(1 for r in out if r.get("ok") is True)  # error rows skip the postprocess
    return {
        "rows_out": len(out),
        "answered": answered,
        "errors": len(out) - answered,
        "qps_per_actor": qps,
    }


def _measured(name: str, args: argparse.Namespace, run: Any) -> dict[str, Any]:
    with _simulator(args.rpm) as (url, app):
        started = time.monotonic()
        found: dict[str, Any]
        try:
            found = run(url)
        except Exception as exc:  # a pipeline that fails is a result here, not a crash
            found = {"failed": f"{type(exc).__name__}: {str(exc)[:300]}"}
        wall = time.monotonic() - started
        view = _server_view(list(app.log), args.rpm)
    found.update(view, wall_s=round(wall, 2))
    if "answered" in found:
        found["rows_per_s"] = round(found["answered"] / wall, 2)
        span = found["calls_span_s"]
        found["rows_per_s_calls"] = round(found["answered"] / span, 2) if span else None
    _log(f"# {name}: {found}")
    return found


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import ray

    ray.init(
        num_cpus=args.cpus,
        include_dashboard=False,
        object_store_memory=128 * 1024 * 1024,
        log_to_driver=False,
        configure_logging=False,
        runtime_env={"env_vars": {"SLUICE_LEDGER_DB": "off"}},
    )
    ray.data.DataContext.get_current().enable_progress_bars = False
    report: dict[str, Any] = {
        "rows": args.rows,
        "rpm": args.rpm,
        "actors": args.actors,
        "cpus": args.cpus,
        "ray": ray.__version__,
        "versions": versions(),
    }
    with contextlib.ExitStack() as stack:
        store = args.store or _start_redis(stack)
        report["sluice"] = _measured("sluice", args, lambda url: run_sluice(args, url, store))
        try:
            import ray.data.llm
        except ImportError as exc:
            report["ray_processor"] = f"not run: ray.data.llm cannot be imported ({exc})"
        else:
            per_minute = max(1, args.rpm // 60)
            split = max(1, per_minute // args.actors)
            for name, qps in (("ray_qps_as_documented", per_minute), ("ray_qps_split", split)):
                report[name] = _measured(
                    name, args, lambda url, qps=qps: run_ray_processor(args, url, qps)
                )
    ray.shutdown()
    import orjson

    print(orjson.dumps(report).decode(), flush=True)
    return 0


def _start_redis(stack: contextlib.ExitStack) -> str:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.redis_server import RedisServer

    server = RedisServer(Path(stack.enter_context(tempfile.TemporaryDirectory())))
    server.start()
    stack.callback(server.stop)
    return server.url


if __name__ == "__main__":
    raise SystemExit(main())
