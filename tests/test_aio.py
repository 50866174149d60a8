"""sluice.aio: the trio runtime inside a running asyncio loop (the default loop and uvloop).

End to end over loopback against the simulator, which runs in a thread of its own and tells
which responses the client cut off (tests/sim_thread.py). Real clock, short timeouts,
assertions on behaviour only. The tests are plain functions that run their own loop.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

import sluice
import sluice.aio
from sluice import ChatRequest, Completed, Failed, ProviderConfig, RuntimeConfig, TextDelta
from sluice.simulator import SimulatorConfig

from .sim_thread import WatchedSimulator, simulator_thread

LIMIT = 20.0
"""Seconds any one test may take on its loop (a hang fails instead of blocking the run)."""

Runner = Callable[[Callable[[], Awaitable[Any]]], Any]


def _uvloop_factory() -> Callable[[], asyncio.AbstractEventLoop]:
    try:
        import uvloop
    except ImportError:
        if os.environ.get("CI"):
            raise  # a dev dependency: CI must have it
        pytest.skip("uvloop is not installed")
    return uvloop.new_event_loop


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request: pytest.FixtureRequest) -> Runner:
    """Runs a coroutine function to its end on a fresh loop of the kind named by the param."""
    factory = _uvloop_factory() if request.param == "uvloop" else None

    def run(main: Callable[[], Awaitable[Any]]) -> Any:
        async def bounded() -> Any:
            async with asyncio.timeout(LIMIT):
                return await main()

        with asyncio.Runner(loop_factory=factory) as runner:
            return runner.run(bounded())

    return run


@pytest.fixture
def sim() -> Iterator[WatchedSimulator]:
    # 40 tokens/s: a whole reply (400 tokens) takes 10 s, so a call cut off early is clearly
    # cut; short() asks for 8 tokens.
    with simulator_thread(SimulatorConfig(tokens_per_second=40, output_tokens=400)) as sim:
        yield sim


def config(sim: WatchedSimulator, **fields: Any) -> RuntimeConfig:
    return RuntimeConfig(providers={"sim": ProviderConfig(base_url=sim.url)}, **fields)


def long(prompt: str = "long") -> ChatRequest:
    """A request whose reply streams for about 10 s."""
    return ChatRequest(model="sim:sim-small", messages=prompt)


def short(prompt: str = "short") -> ChatRequest:
    """A request whose reply streams for about 0.2 s."""
    return ChatRequest(model="sim:sim-small", messages=prompt, max_tokens=8)


async def assert_idle(rt: sluice.aio.Runtime) -> None:
    """Every count of the runtime's statistics is back to zero."""
    for _ in range(100):
        stats = await rt.statistics()
        if stats.calls_in_flight == 0 and not any(stats.attempts_in_flight.values()):
            break
        await asyncio.sleep(0.02)
    assert stats.calls_in_flight == 0
    assert set(stats.attempts_in_flight.values()) <= {0}
    assert all(q.open_streams == 0 and q.pending == 0 for q in stats.quotas.values())


def test_chat_stream_map_statistics_and_ledger(run: Runner, sim: WatchedSimulator) -> None:
    async def main() -> None:
        async with sluice.aio.open_runtime(config(sim)) as rt:
            reply = await rt.chat(short("hi"))
            also = await rt.chat("sim:sim-small", "hi", max_tokens=8)
            async with rt.stream(short("hi")) as call:
                events = [event async for event in call]
            requests = [short(f"q{i}") for i in range(20)]
            async with rt.map(requests, max_in_flight=4) as outcomes:
                done = [o async for o in outcomes]

            async def produce() -> Any:
                for i in range(5):
                    await asyncio.sleep(0)
                    yield short(f"a{i}")

            async with rt.map(produce(), max_in_flight=2) as outcomes:
                from_async = [o async for o in outcomes]
            await assert_idle(rt)
            totals = await rt.ledger_totals()
            snapshot = await rt.ledger.snapshot(by=())
            await rt.ledger.flush()
        assert reply.finish_reason == "length" and reply.text == also.text
        assert isinstance(events[-1], Completed) and call.result is not None
        assert call.result.text == reply.text == "".join(
            e.text for e in events if isinstance(e, TextDelta)
        )
        assert sorted(o.index for o in done) == list(range(20))
        assert all(o.result is not None and o.error is None for o in done)
        assert sorted(o.index for o in from_async) == list(range(5))
        assert totals["sim:sim-small"].calls == 28
        assert snapshot[0].totals.calls == 28

    run(main)
    sim.wait_for(completed=28, cut=0)
    assert sim.completed == 28 and sim.cut == 0


def test_errors_arrive_as_the_same_classes(run: Runner) -> None:
    with simulator_thread(SimulatorConfig(script=("400", "400"))) as sim:

        async def main() -> None:
            async with sluice.aio.open_runtime(config(sim)) as rt:
                with pytest.raises(sluice.BadRequest) as chat_error:
                    await rt.chat(short("hi"))
                async with rt.stream(short("hi")) as call:
                    events = [event async for event in call]
                with pytest.raises(sluice.ConfigError, match="unknown provider 'nope'"):
                    await rt.chat("nope:model", "hi")
                with pytest.raises(sluice.ConfigError, match="unknown provider 'nope'"):
                    async with rt.stream("nope:model", "hi"):
                        pass
                with pytest.raises(ValueError, match="max_in_flight"):
                    async with rt.map([], max_in_flight=0):
                        pass
            assert chat_error.value.status == 400
            assert isinstance(events[-1], Failed) and isinstance(call.error, sluice.BadRequest)

        run(main)


def test_cancelling_the_task_mid_stream_cancels_the_upstream_request(
    run: Runner, sim: WatchedSimulator
) -> None:
    async def main() -> None:
        async with sluice.aio.open_runtime(config(sim)) as rt:
            first = asyncio.Event()

            async def reader() -> None:
                async with rt.stream(long()) as call:
                    async for event in call:
                        if isinstance(event, TextDelta):
                            first.set()

            task = asyncio.create_task(reader())
            await first.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await asyncio.to_thread(sim.wait_for, cut=1)
            # a chat cancelled while it waits for its reply is cut off the same way
            chat = asyncio.create_task(rt.chat(long("chat")))
            await asyncio.to_thread(sim.wait_for, requests=2)
            chat.cancel()
            with pytest.raises(asyncio.CancelledError):
                await chat
            await asyncio.to_thread(sim.wait_for, cut=2)
            # leaving the block early (break) abandons the call too
            async with rt.stream(long("leaver")) as call:
                async for event in call:
                    if isinstance(event, TextDelta):
                        break
            await asyncio.to_thread(sim.wait_for, cut=3)
            after = await rt.chat(short("after"))
            await assert_idle(rt)
        assert after.finish_reason == "length"

    run(main)
    sim.wait_for(completed=1, cut=3)
    assert sim.cut == 3 and sim.completed == 1


def test_a_runtime_opened_again_and_two_at_once_on_one_loop(
    run: Runner, sim: WatchedSimulator
) -> None:
    async def main() -> list[str]:
        texts = []
        for _ in range(3):  # one after another: each gets a fresh guest run
            async with sluice.aio.open_runtime(config(sim)) as rt:
                texts.append((await rt.chat(short("again"))).text)
        async with (
            sluice.aio.open_runtime(config(sim)) as one,
            sluice.aio.open_runtime(config(sim)) as two,
        ):
            both = await asyncio.gather(
                one.chat(short("one")), two.chat(short("two"))
            )
            async with one.stream(short("x")) as call:
                async for _ in call:
                    pass
            # closing one leaves the other (and the shared guest run) working
        async with sluice.aio.open_runtime(config(sim)) as rt:
            async with sluice.aio.open_runtime(config(sim)) as inner:
                await inner.chat(short("inner"))
            texts.append((await rt.chat(short("outer"))).text)
        return texts + [r.text for r in both]

    texts = run(main)
    assert len(texts) == 6 and all(texts)
    assert run(main) == texts  # and in a second loop of the same process


def test_leaving_the_block_finishes_the_calls_in_flight(
    run: Runner, sim: WatchedSimulator
) -> None:
    async def main() -> list[Any]:
        async with sluice.aio.open_runtime(config(sim)) as rt:
            started = sim.app.chat_requests_seen
            tasks = [
                asyncio.create_task(rt.chat("sim:sim-small", f"q{i}", max_tokens=40))
                for i in range(5)  # each streams for about 1 s
            ]
            await asyncio.to_thread(sim.wait_for, requests=started + 5)
        # the block has ended: every call in flight finished first, and new ones are refused
        with pytest.raises(sluice.RuntimeClosed):
            await rt.chat(short("late"))
        return [t.result() for t in tasks if t.done()]

    results = run(main)
    assert len(results) == 5 and all(r.finish_reason == "length" for r in results)
    assert sim.cut == 0


def test_a_block_that_raises_cancels_the_calls_in_flight(
    run: Runner, sim: WatchedSimulator
) -> None:
    tasks: list[asyncio.Task[Any]] = []

    async def fail_inside() -> None:
        async with sluice.aio.open_runtime(config(sim)) as rt:
            tasks.extend(asyncio.create_task(rt.chat(long(f"q{i}"))) for i in range(3))
            await asyncio.to_thread(sim.wait_for, requests=3)
            raise KeyError("boom")

    async def main() -> list[BaseException | None]:
        with pytest.raises(KeyError):
            await fail_inside()
        await asyncio.wait(tasks)
        return [t.exception() for t in tasks]

    errors = run(main)
    assert all(isinstance(e, sluice.RuntimeClosed) for e in errors)
    sim.wait_for(cut=3)


def test_cancelling_the_task_that_holds_the_runtime_stops_it(
    run: Runner, sim: WatchedSimulator
) -> None:
    async def main() -> None:
        opened = asyncio.Event()

        async def holder() -> None:
            async with (
                sluice.aio.open_runtime(config(sim)) as rt,
                rt.stream(long()) as call,
            ):
                async for event in call:
                    if isinstance(event, TextDelta):
                        opened.set()

        task = asyncio.create_task(holder())
        await opened.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(main)  # returns: the loop did not outlive the guest run
    sim.wait_for(cut=1)


def test_run_batch_from_asyncio(run: Runner, sim: WatchedSimulator, tmp_path: Any) -> None:
    source = tmp_path / "in.jsonl"
    lines = [
        f'{{"custom_id": "r{i}", "method": "POST", "url": "/v1/chat/completions", '
        f'"body": {{"model": "sim:sim-small", "max_tokens": 8, '
        f'"messages": [{{"role": "user", "content": "q{i}"}}]}}}}'
        for i in range(6)
    ]
    source.write_text("\n".join(lines) + "\n")

    async def main() -> tuple[Any, Any]:
        async with sluice.aio.open_runtime(config(sim)) as rt:
            on_runtime = await sluice.aio.run_batch(source, tmp_path / "a.jsonl", runtime=rt)
        own = await sluice.aio.run_batch(source, tmp_path / "b.jsonl", config=config(sim))
        return on_runtime, own

    on_runtime, own = run(main)
    assert on_runtime.ok == own.ok == 6
    assert len((tmp_path / "a.jsonl").read_text().splitlines()) == 6


def test_ctrl_c_under_asyncio_run_cancels_the_calls_and_ends_the_run(
    run: Runner, sim: WatchedSimulator
) -> None:
    """asyncio's runner turns Ctrl-C into cancelling the main task; the runtime then stops
    hard, and the loop ends only after the trio guest run has."""
    main_thread = threading.main_thread().ident
    assert main_thread is not None
    streaming = threading.Event()

    def ctrl_c() -> None:
        assert streaming.wait(LIMIT), "the call never streamed"
        signal.pthread_kill(main_thread, signal.SIGINT)

    async def main() -> None:
        async with sluice.aio.open_runtime(config(sim)) as rt, rt.stream(long()) as call:
            async for event in call:
                if isinstance(event, TextDelta):
                    streaming.set()  # Ctrl-C comes while the reply streams

    watcher = threading.Thread(target=ctrl_c)
    watcher.start()
    with pytest.raises(KeyboardInterrupt):
        run(main)
    watcher.join()
    sim.wait_for(cut=1)


def test_a_runtime_answers_only_its_own_loop(sim: WatchedSimulator) -> None:
    async def main() -> None:
        async with sluice.aio.open_runtime(config(sim)) as rt:

            def from_another_loop() -> Any:
                return asyncio.run(rt.chat(short()))

            with pytest.raises(RuntimeError, match="belongs to another event loop"):
                await asyncio.to_thread(from_another_loop)
            assert (await rt.chat(short())).usage.output_tokens == 8

    asyncio.run(main())


def test_a_runtime_that_cannot_open_raises_its_error(run: Runner, tmp_path: Any) -> None:
    (tmp_path / "file").write_text("")
    broken = RuntimeConfig(ledger=sluice.LedgerConfig(path=str(tmp_path / "file" / "l.db")))

    async def main() -> None:
        with pytest.raises(sluice.ConfigError, match="ledger"):
            async with sluice.aio.open_runtime(broken):
                pass
        async with sluice.aio.open_runtime() as rt:  # the loop is fine: the next one opens
            assert (await rt.chat("sim:sim-small", "hi")).finish_reason == "stop"

    run(main)
