"""The runtime gives the C allocator's free memory back on a schedule (glibc's malloc_trim)."""

from __future__ import annotations

import sys

import pytest
import trio

import sluice
from sluice import RuntimeConfig
from sluice._errors import ConfigError
from sluice._memory import memory_trimmer
from sluice.simulator import mock_transport

from .helpers import virtual_deadline

linux_only = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="malloc_trim is glibc's (CI runs on Linux)"
)


@linux_only
def test_glibc_trim_gives_freed_heap_pages_back() -> None:
    trim = memory_trimmer()
    assert trim is not None

    def rss_kb() -> int:
        with open("/proc/self/status") as status:
            line = next(line for line in status if line.startswith("VmRSS:"))
        return int(line.split()[1])

    # 64 MB in blocks of 4 KB (the C allocator's heap, not mmap), one in eight kept: the
    # freed runs sit in the heap's middle, which trimming only its top would not give back.
    blocks = [bytearray(4096) for _ in range(16_384)]
    kept = blocks[::8]
    del blocks
    before = rss_kb()
    trim()
    after = rss_kb()
    assert len(kept) == 2_048
    assert before - after > 32_000, (before, after)


@linux_only
@virtual_deadline(600)
async def test_the_runtime_trims_every_interval_and_stops_with_it(autojump_clock) -> None:
    config = RuntimeConfig(trim_memory_every=60.0)
    async with sluice.open_runtime(config, transport=mock_transport()) as rt:
        await rt.chat("sim:sim-small", "hi")
        start = trio.current_time()
        await trio.sleep(150)
        assert rt._trims.done == 2  # at 60 s and 120 s
        assert trio.current_time() - start == 150
    trims = rt._trims.done
    await trio.sleep(120)
    assert rt._trims.done == trims  # the task ended with the runtime


@virtual_deadline(600)
async def test_trimming_can_be_turned_off(autojump_clock) -> None:
    async with sluice.open_runtime(
        RuntimeConfig(trim_memory_every=None), transport=mock_transport()
    ) as rt:
        await trio.sleep(300)
        assert rt._trims.done == 0


def test_a_trim_interval_must_be_positive() -> None:
    with pytest.raises(ConfigError, match="trim_memory_every"):
        sluice.load_config({"trim_memory_every": 0})
