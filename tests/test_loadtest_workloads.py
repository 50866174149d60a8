"""Workload shapes, checked on what the server received: multi-turn sessions (the history
grows, turn by turn, with the replies the server gave), shared-prefix prompts (the ratio and
the pool hold) and Mooncake-style trace replay (arrival times, lengths and shared blocks).
Under the autojump clock, through a transport that records each request body and hands it to
the simulator."""

from __future__ import annotations

import itertools
import random
from typing import Any

import httpx
import orjson
import pytest

import sluice
from sluice._config import RuntimeConfig
from sluice._errors import ConfigError
from sluice._jobs.loadtest import (
    ClosedLoop,
    Lengths,
    LoadTest,
    OpenLoop,
    Workload,
    loadtest_config,
    run_load,
)
from sluice._jobs.loadtest.arrivals import load_trace_entries
from sluice._jobs.loadtest.workload import _WORDS, TRACE_BLOCK_TOKENS, draw_words
from sluice.simulator import SimulatorApp, SimulatorConfig, mock_transport
from sluice.simulator._text import count_tokens

from .helpers import virtual_deadline

MODEL = "sim:sim-small"


async def run_recorded(test: LoadTest, config: SimulatorConfig | None = None):
    """Run ``test`` against the simulator; return the run and every request body, in order."""
    seen: list[dict] = []
    inner = mock_transport(SimulatorApp(config or SimulatorConfig(output_tokens=1000)))

    async def handler(request: httpx.Request) -> httpx.Response:
        seen.append(orjson.loads(await request.aread()))
        return await inner.handle_async_request(request)

    runtime_config = loadtest_config(RuntimeConfig(), "sim", respect_limits=False)
    async with sluice.open_runtime(runtime_config, transport=httpx.MockTransport(handler)) as rt:
        run = await run_load(rt, test)
    return run, seen


def words(body: dict[str, Any]) -> list[str]:
    content: str = body["messages"][-1]["content"]
    return content.split()


@virtual_deadline(600)
async def test_multi_turn_sessions_carry_the_history(autojump_clock):
    test = LoadTest(
        model=MODEL,
        shape=ClosedLoop(2),
        requests=4,  # sessions
        workload=Workload(
            input_tokens=Lengths("fixed", 5), output_tokens=Lengths("fixed", 4), turns=3
        ),
        warmup=0,
    )
    run, seen = await run_recorded(test, SimulatorConfig(ttft=0.1, output_tokens=1000))
    assert len(run.records) == 12 and all(r.ok for r in run.records)
    by_key = {(r.session, r.turn): r for r in run.records}
    assert sorted(by_key) == [(s, t) for s in range(4) for t in range(3)]
    # Each body extends an earlier one of the same session by the reply and a new message.
    by_first: dict[str, list[list[dict[str, Any]]]] = {}
    for body in seen:
        messages = body["messages"]
        by_first.setdefault(messages[0]["content"], []).append(messages)
    assert len(by_first) == 4
    for conversation in by_first.values():
        assert [len(m) for m in conversation] == [1, 3, 5]
        for before, after in itertools.pairwise(conversation):
            assert after[: len(before)] == before
            reply = after[len(before)]
            assert reply["role"] == "assistant" and count_tokens(reply["content"]) == 4
            assert after[-1]["role"] == "user" and len(after[-1]["content"].split()) == 5
    # Per turn: the server counts the whole history (5, then 5 + 4 + 5, then 23 tokens).
    sessions = run.aggregates["sessions"]
    assert [t["input_tokens_mean"] for t in sessions["per_turn"]] == [5, 14, 23]
    assert [t["requests"] for t in sessions["per_turn"]] == [4, 4, 4]
    assert sessions["count"] == 4 and sessions["complete"] == 4 and sessions["turns"] == 3
    # Each turn takes the 0.1 s TTFT (4 tokens, unpaced), one after another: 0.3 s a session.
    assert sessions["duration_s"]["min"] == pytest.approx(0.3)
    assert sessions["per_turn"][2]["ttft_p50_s"] == pytest.approx(0.1)


@virtual_deadline(600)
async def test_shared_prefixes_hold_the_ratio_and_the_pool(autojump_clock):
    test = LoadTest(
        model=MODEL,
        shape=OpenLoop.at_rate(20, arrival="constant"),
        requests=20,
        workload=Workload(
            input_tokens=Lengths("fixed", 20),
            output_tokens=Lengths("fixed", 2),
            prefix_ratio=0.5,
            prefix_pool=2,
        ),
        warmup=0,
    )
    run, seen = await run_recorded(test)
    prompts = [words(body) for body in seen]
    assert all(len(p) == 20 for p in prompts)
    prefixes = {tuple(p[:10]) for p in prompts}
    assert len(prefixes) == 2  # the pool
    assert {p[0] for p in prefixes} == {"p0", "p1"}
    # Past the prefix each prompt is its own: the request's name, then its own words.
    assert sorted(p[10] for p in prompts) == sorted(f"r{i}" for i in range(20))
    assert all(r.input_tokens == r.requested_input_tokens == 20 for r in run.records)


@virtual_deadline(600)
async def test_a_mooncake_trace_sets_times_lengths_and_shared_blocks(autojump_clock, tmp_path):
    trace = tmp_path / "mooncake.jsonl"
    rows = [
        {"timestamp": 1000, "input_length": 600, "output_length": 3, "hash_ids": [1, 2]},
        {"timestamp": 1100, "input_length": 700, "output_length": 4, "hash_ids": [1, 3]},
        {"timestamp": 1250, "input_length": 300, "output_length": 5, "hash_ids": [4]},
        {"timestamp": 1400, "input_length": 600, "output_length": 3, "hash_ids": [1, 2]},
    ]
    trace.write_bytes(b"\n".join(orjson.dumps(r) for r in rows))
    entries = load_trace_entries(trace)
    assert [e.offset for e in entries] == pytest.approx([0.0, 0.1, 0.25, 0.4])
    test = LoadTest(
        model=MODEL,
        shape=OpenLoop.replay([e.offset for e in entries]),
        requests=len(entries),
        workload=Workload(trace=entries),
        warmup=0,
    )
    run, seen = await run_recorded(test)
    records = sorted(run.records, key=lambda r: r.index)
    assert [round(r.scheduled, 9) for r in records] == [0.0, 0.1, 0.25, 0.4]
    assert [body["max_tokens"] for body in seen] == [3, 4, 5, 3]
    assert [r.output_tokens for r in records] == [3, 4, 5, 3]
    prompts = [words(body) for body in seen]
    assert [len(p) for p in prompts] == [600, 700, 300, 600]
    assert [r.input_tokens for r in records] == [600, 700, 300, 600]
    block = TRACE_BLOCK_TOKENS
    assert prompts[0] == prompts[3]  # the same hash ids: the same prompt
    assert prompts[0][:block] == prompts[1][:block]  # block 1 shared
    assert prompts[0][block:] != prompts[1][block : len(prompts[0])]  # blocks 2 and 3 differ
    assert prompts[2][:10] != prompts[0][:10]


def test_trace_lines_are_checked(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 0, "output_length": 3}\n')
    with pytest.raises(ConfigError, match=r"line 1: 'input_length' must be a whole number"):
        load_trace_entries(trace)
    trace.write_text('{"timestamp": 5}\n0.5\n')  # the plain forms still read as seconds
    assert [e.offset for e in load_trace_entries(trace)] == [0.0, 4.5]


@pytest.mark.parametrize("count", [0, 1, 7, 127, 2_000])
def test_drawn_words_are_the_ones_random_choice_draws(count):
    # A prompt's words are drawn without random.choice's calls per word, and must stay the
    # very words it draws: a seed gives the same prompts as before, and the generator is
    # left in the same state for whatever it draws next.
    for seed in range(20):
        fast, plain = random.Random(f"{seed}:workload"), random.Random(f"{seed}:workload")
        assert draw_words(fast, count) == [plain.choice(_WORDS) for _ in range(count)]
        assert fast.random() == plain.random()

    class Own(random.Random):  # a subclass draws its own way: it is asked
        def choice(self, seq):
            return seq[0]

    assert draw_words(Own(1), 3) == [_WORDS[0]] * 3
