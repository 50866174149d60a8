"""``sluice.run_batch`` with a :class:`BatchInterrupt`, in virtual time over in-memory streams:
a drain withdraws the calls the RateLimiter has not admitted, lets the admitted ones finish,
and a resume does exactly the lines left; ``overwrite`` and ``resume`` guard the output."""

from __future__ import annotations

import orjson
import pytest
import trio
import trio.testing

import sluice
from sluice import ConfigError, RuntimeConfig
from sluice._jobs.batch import BatchInterrupt, run_batch
from sluice._jobs.batch_limits import BatchLimits, apply_limits
from sluice.simulator import SimulatorApp, SimulatorConfig

from .helpers import memory_transport, virtual_deadline

N = 40


def write_input(path, n: int):
    lines = (
        orjson.dumps(
            {
                "custom_id": f"r{i}",
                "body": {"model": "sim:sim-small", "messages": [{"role": "user", "content": "hi"}]},
            }
        )
        + b"\n"
        for i in range(n)
    )
    path.write_bytes(b"".join(lines))
    return path


def ids(path) -> list[str]:
    return sorted(orjson.loads(line)["custom_id"] for line in path.read_bytes().splitlines())


@pytest.fixture
def clock():
    """Autojump only after 20 ms of real time with nothing to do: file I/O in threads does not
    move the clock, only the quota's waits and the simulator's replies do."""
    return trio.testing.MockClock(autojump_threshold=0.02)


@pytest.mark.parametrize("ordered", [False, True])
@virtual_deadline(600)
async def test_a_drain_withdraws_what_the_rate_limiter_has_not_admitted(
    clock, nursery, tmp_path, ordered
):
    # 60 a minute, one a second; each reply takes 2.5 s, so at the drain (t = 4.5 s) five
    # calls were admitted (t = 0..4) and three of them are still streaming.
    app = SimulatorApp(SimulatorConfig(ttft=2.5, output_tokens=4))
    config = apply_limits(RuntimeConfig(), BatchLimits(rpm=60), ["sim"])
    source, out = write_input(tmp_path / "in.jsonl", N), tmp_path / "out.jsonl"
    interrupt = BatchInterrupt()

    async def drain_later() -> None:
        await trio.sleep(4.5)
        interrupt.drain()

    async with sluice.open_runtime(config, transport=memory_transport(app, nursery)) as rt:
        nursery.start_soon(drain_later)
        summary = await run_batch(source, out, runtime=rt, interrupt=interrupt, ordered=ordered)
        assert app.chat_requests_seen == 5  # nothing was sent after the drain
        assert summary.interrupted == "drained"
        assert (summary.ok, summary.failed, summary.left) == (5, 0, N - 5)
        assert summary.elapsed == pytest.approx(4 + 2.5, abs=0.1)  # the admitted ones finished
        written = [orjson.loads(line)["custom_id"] for line in out.read_bytes().splitlines()]
        assert len(written) == 5
        if ordered:  # a withdrawn line holds back none of those after it
            assert written == sorted(written, key=lambda custom_id: int(custom_id[1:]))
        saved = orjson.loads((tmp_path / "out.summary.json").read_bytes())
        assert saved["interrupted"] == "drained" and saved["status"]["not_done"] == N - 5

    # A resume does exactly the rest, on a runtime without the limit.
    app2 = SimulatorApp(SimulatorConfig(output_tokens=4))
    async with sluice.open_runtime(transport=memory_transport(app2, nursery)) as rt:
        again = await run_batch(source, out, runtime=rt, resume=True)
    assert (again.ok, again.skipped) == (N - 5, 5)
    assert app2.chat_requests_seen == N - 5
    assert ids(out) == sorted(f"r{i}" for i in range(N))


@virtual_deadline(600)
async def test_an_existing_output_is_replaced_only_when_asked(clock, nursery, tmp_path):
    app = SimulatorApp(SimulatorConfig(output_tokens=4))
    source, out = write_input(tmp_path / "in.jsonl", 3), tmp_path / "out.jsonl"
    out.write_bytes(b'{"custom_id": "paid", "error": null}\n')
    async with sluice.open_runtime(transport=memory_transport(app, nursery)) as rt:
        with pytest.raises(ConfigError, match="already holds results"):
            await run_batch(source, out, runtime=rt)
        with pytest.raises(ConfigError, match="give one"):
            await run_batch(source, out, runtime=rt, resume=True, overwrite=True)
        assert out.read_bytes() == b'{"custom_id": "paid", "error": null}\n'
        assert app.chat_requests_seen == 0
        await run_batch(source, out, runtime=rt, overwrite=True)
    assert ids(out) == ["r0", "r1", "r2"]


@virtual_deadline(600)
async def test_a_second_writer_through_a_link_is_refused(clock, nursery, tmp_path):
    from sluice._jobs.batch_guard import OutputLock

    source, out = write_input(tmp_path / "in.jsonl", 1), tmp_path / "out.jsonl"
    out.write_bytes(b"")
    link = tmp_path / "link.jsonl"
    link.symlink_to(out)
    held = OutputLock(str(tmp_path / "out.jsonl.lock"), "output out.jsonl")
    held.acquire()  # another run writing out.jsonl
    try:
        with pytest.raises(ConfigError, match="being written by process"):
            await run_batch(source, link, resume=True)
    finally:
        held.release()
