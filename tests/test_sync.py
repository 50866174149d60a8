"""sluice.sync: the trio runtime on a background thread, called from blocking code.

End to end over loopback against the simulator, which runs in a thread of its own and tells
which responses the client cut off (tests/sim_thread.py). Real clock, short timeouts,
assertions on behaviour only.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import pytest

import sluice
import sluice.sync
from sluice import ChatRequest, Completed, Failed, ProviderConfig, RuntimeConfig, TextDelta
from sluice._portal import Outcome
from sluice.simulator import SimulatorConfig

from .sim_thread import WatchedSimulator, simulator_thread

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator


@pytest.fixture
def sim() -> Iterator[WatchedSimulator]:
    # 40 tokens/s: a whole reply (400 tokens) takes 10 s; short() asks for 8 tokens.
    with simulator_thread(SimulatorConfig(tokens_per_second=40, output_tokens=400)) as sim:
        yield sim


def config(sim: WatchedSimulator) -> RuntimeConfig:
    return RuntimeConfig(providers={"sim": ProviderConfig(base_url=sim.url)})


def long(prompt: str = "long") -> ChatRequest:
    """A request whose reply streams for about 10 s."""
    return ChatRequest(model="sim:sim-small", messages=prompt)


def short(prompt: str = "short") -> ChatRequest:
    """A request whose reply streams for about 0.2 s."""
    return ChatRequest(model="sim:sim-small", messages=prompt, max_tokens=8)


def runtime_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "sluice runtime"]


def wait_until(predicate: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def idle(stats: sluice.RuntimeStatistics) -> bool:
    """Nothing in flight anywhere: calls, attempts, and the RateLimiter's slots."""
    return (
        stats.calls_in_flight == 0
        and set(stats.attempts_in_flight.values()) <= {0}
        and all(q.open_streams == 0 and q.pending == 0 for q in stats.quotas.values())
    )


def assert_idle(rt: sluice.sync.Runtime) -> None:
    # A call ends before its attempt's settlement reaches the RateLimiter (a tell, delivered
    # without waiting): wait for every count, not only the calls.
    wait_until(lambda: idle(rt.statistics()))


def interrupt_main_thread_when(
    predicate: Any, *, waiting_in: Callable[..., Any] | None = Outcome.wait
) -> threading.Thread:
    """Send SIGINT to the main thread (Ctrl-C) once ``predicate()`` holds and the main thread
    is inside ``waiting_in`` (by default the blocking wait of a call; None: anywhere)."""
    main = threading.main_thread().ident
    assert main is not None

    def inside() -> bool:
        # A C call (a lock's acquire) has no frame: the innermost one is the function waiting.
        frame = sys._current_frames().get(main)
        return waiting_in is None or (frame is not None and frame.f_code is waiting_in.__code__)

    def watch() -> None:
        wait_until(predicate)
        wait_until(inside)
        signal.pthread_kill(main, signal.SIGINT)

    thread = threading.Thread(target=watch)
    thread.start()
    return thread


def test_chat_stream_map_statistics_and_ledger(sim: WatchedSimulator) -> None:
    with sluice.sync.open_runtime(config(sim)) as rt:
        reply = rt.chat(short("hi"))
        also = rt.chat("sim:sim-small", "hi", max_tokens=8)
        call = rt.stream(short("hi"))
        events = list(call)
        with rt.stream(short("hi")) as again:
            waited = again.wait()
        done = list(rt.map([short(f"q{i}") for i in range(20)], max_in_flight=4))
        generated = list(rt.map((short(f"g{i}") for i in range(5)), max_in_flight=2))
        assert_idle(rt)
        totals = rt.ledger_totals()
        snapshot = rt.ledger.snapshot(by=())
        rt.ledger.flush()
        assert rt.ledger.budgets() == []
    assert reply.text == also.text == waited.text
    assert isinstance(events[-1], Completed) and call.result is not None
    assert call.result.text == "".join(e.text for e in events if isinstance(e, TextDelta))
    assert sorted(o.index for o in done) == list(range(20))
    assert all(o.result is not None for o in done + generated)
    assert sorted(o.index for o in generated) == list(range(5))
    assert totals["sim:sim-small"].calls == snapshot[0].totals.calls == 29
    sim.wait_for(completed=29, cut=0)
    assert sim.completed == 29 and sim.cut == 0
    assert runtime_threads() == []


def test_one_shot_chat(sim: WatchedSimulator) -> None:
    reply = sluice.sync.chat("sim:sim-small", "hi", max_tokens=8, config=config(sim))
    assert reply.usage.output_tokens == 8
    assert runtime_threads() == []


def test_many_threads_share_one_runtime(sim: WatchedSimulator) -> None:
    def one(i: int) -> int:
        if i % 2:
            return rt.chat(short(f"c{i}")).usage.output_tokens
        return sum(1 for e in rt.stream(short(f"s{i}")) if isinstance(e, TextDelta))

    with sluice.sync.open_runtime(config(sim)) as rt, ThreadPoolExecutor(64) as pool:
        counts = list(pool.map(one, range(256)))
        assert_idle(rt)
    assert len(counts) == 256 and all(counts)
    sim.wait_for(completed=256)
    assert sim.completed == 256 and sim.cut == 0


def test_errors_arrive_as_the_same_classes() -> None:
    with (
        simulator_thread(SimulatorConfig(script=("400", "400"))) as sim,
        sluice.sync.open_runtime(config(sim)) as rt,
    ):
        with pytest.raises(sluice.BadRequest) as chat_error:
            rt.chat("sim:sim-small", "hi")
        call = rt.stream("sim:sim-small", "hi")
        events = list(call)
        with pytest.raises(sluice.ConfigError, match="unknown provider 'nope'"):
            rt.chat("nope:model", "hi")
        with pytest.raises(sluice.ConfigError, match="unknown provider 'nope'"):
            rt.stream("nope:model", "hi")
        with pytest.raises(ValueError, match="max_in_flight"):
            rt.map([], max_in_flight=0)
    assert chat_error.value.status == 400
    assert isinstance(events[-1], Failed) and isinstance(call.error, sluice.BadRequest)


def test_map_reads_a_generator_in_the_readers_thread(sim: WatchedSimulator) -> None:
    readers: set[str] = set()

    def requests(n: int, fail_at: int | None = None) -> Iterator[ChatRequest]:
        for i in range(n):
            readers.add(threading.current_thread().name)
            if i == fail_at:
                raise KeyError(f"bad line {i}")
            yield short(f"g{i}")

    with sluice.sync.open_runtime(config(sim)) as rt:
        done = list(rt.map(requests(30), max_in_flight=4))
        outcomes = rt.map(requests(30, fail_at=10), max_in_flight=4)
        with pytest.raises(KeyError, match="bad line 10"):
            list(outcomes)
        assert_idle(rt)
    assert sorted(o.index for o in done) == list(range(30))
    assert readers == {threading.current_thread().name}


def test_leaving_a_stream_early_cancels_the_upstream_request(sim: WatchedSimulator) -> None:
    with sluice.sync.open_runtime(config(sim)) as rt:
        for event in rt.stream(long("dropped")):  # the stream is dropped after the break
            if isinstance(event, TextDelta):
                break
        sim.wait_for(cut=1)
        with rt.stream(long("closed")) as call:
            next(e for e in call if isinstance(e, TextDelta))
        sim.wait_for(cut=2)
        with rt.map([long("a"), long("b")]) as outcomes:
            sim.wait_for(requests=4)
        sim.wait_for(cut=4)
        after = rt.chat(short("after"))
        assert_idle(rt)
    assert after.usage.output_tokens == 8
    sim.wait_for(completed=1, cut=4)
    assert sim.cut == 4 and sim.completed == 1
    assert list(outcomes) == []


def test_ctrl_c_during_a_call_cancels_it(sim: WatchedSimulator) -> None:
    with sluice.sync.open_runtime(config(sim)) as rt:
        watcher = interrupt_main_thread_when(lambda: sim.app.chat_requests_seen == 1)
        with pytest.raises(KeyboardInterrupt):
            rt.chat(long())
        watcher.join()
        sim.wait_for(cut=1)
        assert rt.chat(short()).usage.output_tokens == 8
        assert_idle(rt)


def test_ctrl_c_in_the_block_stops_the_calls_in_flight_and_the_thread(
    sim: WatchedSimulator,
) -> None:
    pool = ThreadPoolExecutor(8)
    calls: list[Future[sluice.ChatResult]] = []

    def interrupted() -> None:
        with sluice.sync.open_runtime(config(sim)) as rt:
            calls.extend(pool.submit(rt.chat, long(f"q{i}")) for i in range(8))
            interrupt_main_thread_when(
                lambda: sim.app.chat_requests_seen == 8, waiting_in=None
            ).join()
            time.sleep(10)  # Ctrl-C arrives here

    with pytest.raises(KeyboardInterrupt):
        interrupted()
    assert runtime_threads() == []
    assert all(isinstance(c.exception(timeout=5), sluice.RuntimeClosed) for c in calls)
    pool.shutdown()
    sim.wait_for(cut=8)


def test_leaving_the_block_finishes_the_calls_in_flight(sim: WatchedSimulator) -> None:
    pool = ThreadPoolExecutor(5)
    with sluice.sync.open_runtime(config(sim)) as rt:
        # each streams for about 1 s
        calls = [pool.submit(rt.chat, "sim:sim-small", f"q{i}", max_tokens=40) for i in range(5)]
        sim.wait_for(requests=5)
    assert runtime_threads() == []
    assert all(c.result(timeout=5).usage.output_tokens == 40 for c in calls)
    with pytest.raises(sluice.RuntimeClosed):
        rt.chat(short("late"))
    pool.shutdown()
    assert sim.cut == 0


def test_a_runtime_opened_again(sim: WatchedSimulator) -> None:
    texts = []
    for _ in range(3):
        with sluice.sync.open_runtime(config(sim)) as rt:
            texts.append(rt.chat(short("again")).text)
        assert runtime_threads() == []
    with sluice.sync.open_runtime(config(sim)) as one, sluice.sync.open_runtime(config(sim)) as two:
        texts += [one.chat(short("again")).text, two.chat(short("again")).text]
    assert len(set(texts)) == 1 and texts[0]


def test_run_batch_from_blocking_code(sim: WatchedSimulator, tmp_path: Any) -> None:
    source = tmp_path / "in.jsonl"
    lines = [
        f'{{"custom_id": "r{i}", "method": "POST", "url": "/v1/chat/completions", '
        f'"body": {{"model": "sim:sim-small", "max_tokens": 8, '
        f'"messages": [{{"role": "user", "content": "q{i}"}}]}}}}'
        for i in range(6)
    ]
    source.write_text("\n".join(lines) + "\n")
    with sluice.sync.open_runtime(config(sim)) as rt:
        on_runtime = sluice.sync.run_batch(source, tmp_path / "a.jsonl", runtime=rt)
    own = sluice.sync.run_batch(source, tmp_path / "b.jsonl", config=config(sim))
    assert on_runtime.ok == own.ok == 6
    assert len((tmp_path / "b.jsonl").read_text().splitlines()) == 6


def test_a_runtime_that_cannot_open_raises_its_error(tmp_path: Any) -> None:
    (tmp_path / "file").write_text("")
    broken = RuntimeConfig(ledger=sluice.LedgerConfig(path=str(tmp_path / "file" / "l.db")))
    with pytest.raises(sluice.ConfigError, match="ledger"), sluice.sync.open_runtime(broken):
        pass
    assert runtime_threads() == []
