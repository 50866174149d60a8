"""What waking the load tester's scheduler costs, and how late it wakes, per way of waking.

    python -m benchmarks.loadtest_wake                     # 500 arrivals/s, 2,000 of them
    python -m benchmarks.loadtest_wake --rate 1000 --count 5000

Poisson due times at ``--rate``, slept to one after another with nothing else to do, by each
waker of :mod:`sluice._jobs.loadtest.wake`: the Linux timerfd the scheduler uses, the spin it
falls back to (sleep to :data:`~sluice._jobs.loadtest.wake.SPIN_MARGIN` before, then yield in
a loop), and a plain ``trio.sleep_until`` (epoll's whole milliseconds). Per waker: the process
CPU per wake (``time.process_time``) and how late each wake came (p50, p99, max), rounds
alternating so a busy moment of the machine hits them alike. One JSON line on stdout.

What a waker costs in CPU is what each request of ``sluice loadtest`` pays on top of the
request itself; its lateness is the floor of the send lag on an idle client. On a shared
machine the lateness shows the other processes (a sleeping process waits for a core when it
wakes); the CPU figure holds up better.
"""

from __future__ import annotations

import argparse
import datetime
import os
import random
import sys
import time
from typing import TYPE_CHECKING, Any

import orjson
import trio

from sluice._jobs.loadtest import wake

from ._harness import versions

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

WAYS = ("timerfd", "spin", "plain")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.loadtest_wake",
        description="CPU per wake and lateness of the load tester's ways of waking.",
    )
    p.add_argument("--rate", type=float, default=500.0, help="due times per second (500)")
    p.add_argument("--count", type=int, default=2000, help="wakes per waker (2000)")
    p.add_argument("--rounds", type=int, default=2, help="alternating rounds (2)")
    a = p.parse_args(argv)
    if a.rate <= 0 or a.count < 10 or a.rounds < 1:
        p.error("--rate must be above 0, --count at least 10, --rounds at least 1")
    return a


async def one_way(sleep: Callable[[float], Awaitable[None]], a: argparse.Namespace, seed: int):
    """``a.count`` wakes at Poisson due times: (CPU seconds, lateness of each)."""
    rng = random.Random(seed)
    late: list[float] = []
    now = trio.current_time
    cpu = time.process_time()
    due = now()
    for _ in range(a.count):
        due += rng.expovariate(a.rate)
        await sleep(due)
        late.append(now() - due)
    return time.process_time() - cpu, late


async def measure(a: argparse.Namespace) -> dict[str, Any]:
    cpu: dict[str, float] = dict.fromkeys(WAYS, 0.0)
    late: dict[str, list[float]] = {way: [] for way in WAYS}
    timerfd = wake._timerfd()
    if timerfd is None:
        raise SystemExit("no timerfd on this system: nothing to compare")
    fd_waker = wake._TimerFd(*timerfd)
    sleepers = {
        "timerfd": fd_waker.sleep_until,
        "spin": wake._Spin().sleep_until,
        "plain": trio.sleep_until,
    }
    try:
        for round_ in range(a.rounds):
            for way in WAYS:
                spent, lates = await one_way(sleepers[way], a, round_)
                cpu[way] += spent
                late[way] += lates
    finally:
        fd_waker.close()
    found = {}
    for way in WAYS:
        lates = sorted(late[way])
        found[way] = {
            "cpu_per_wake_us": round(cpu[way] / len(lates) * 1e6, 1),
            "late_p50_us": round(lates[len(lates) // 2] * 1e6, 1),
            "late_p99_us": round(lates[int(len(lates) * 0.99)] * 1e6, 1),
            "late_max_us": round(lates[-1] * 1e6, 1),
        }
        print(f"loadtest_wake: {way:8s} {found[way]}", file=sys.stderr, flush=True)
    return found


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    report = {
        "benchmark": "loadtest_wake",
        "when": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "rate": a.rate,
        "count": a.count,
        "rounds": a.rounds,
        "ways": trio.run(measure, a),
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
        "versions": versions(),
    }
    sys.stdout.write(orjson.dumps(report).decode() + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
