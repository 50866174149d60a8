"""run_batch's resume, ordered output and sharding, through a real runtime and the simulator.

These assert behaviour, never timing; each has a ``trio.fail_after`` guard.
"""

from __future__ import annotations

import random

import orjson
import pytest
import trio

from sluice import ConfigError, RuntimeConfig, open_runtime
from sluice._cli import main
from sluice._jobs.batch import run_batch
from sluice._jobs.batch_lines import Shard
from sluice.simulator import SimulatorConfig

GUARD = 30


def request_line(custom_id, content="Hi", model="sim:sim-small", **body):
    return orjson.dumps(
        {
            "custom_id": custom_id,
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {"model": model, "messages": [{"role": "user", "content": content}], **body},
        }
    ).decode()


def read_output(path):
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def write_input(tmp_path, lines):
    source = tmp_path / "in.jsonl"
    source.write_text("\n".join(lines) + "\n")
    return source


async def batch(source, out, simulator=None, **options):
    with trio.fail_after(GUARD):
        async with open_runtime(RuntimeConfig(), simulator=simulator) as rt:
            return await run_batch(source, out, runtime=rt, **options)


INPUT = [request_line(f"r{i}", f"prompt {i}") for i in range(12)]
INPUT[5] = "{not json"  # answered by line number: its output line has no custom_id
INPUT[8] = request_line("r8", model="nowhere:m")  # a bad line that has a custom_id
EXPECTED = sorted(["None", *(f"r{i}" for i in range(12) if i != 5)])


@pytest.mark.parametrize("seed", range(4))
async def test_resume_after_a_crash_gives_one_line_per_input_line(tmp_path, seed):
    source = write_input(tmp_path, INPUT)
    full = tmp_path / "full.jsonl"
    await batch(source, full, max_in_flight=3)
    whole = full.read_bytes().splitlines(keepends=True)
    assert len(whole) == len(INPUT)

    # The crash: some lines written whole, the next one cut short (with or without a newline).
    rng = random.Random(seed)
    kept = rng.randrange(len(whole))
    cut = whole[kept][: rng.randrange(1, len(whole[kept]) - 1)]
    torn = cut + b"\n" if seed % 2 else cut
    out = tmp_path / "out.jsonl"
    out.write_bytes(b"".join(whole[:kept]) + torn)

    summary = await batch(source, out, resume=True, max_in_flight=3)
    got = read_output(out)
    assert sorted(str(o["custom_id"]) for o in got) == EXPECTED
    assert out.read_bytes().startswith(b"".join(whole[:kept]))
    assert (summary.skipped, summary.lines) == (kept, len(INPUT) - kept)
    assert summary.written == len(INPUT) - kept

    # Resuming a finished run does nothing.
    again = await batch(source, out, resume=True)
    assert (again.skipped, again.lines, again.written) == (len(INPUT), 0, 0)
    assert len(read_output(out)) == len(INPUT)


async def test_resume_without_an_output_simply_starts(tmp_path):
    source = write_input(tmp_path, INPUT)
    out = tmp_path / "new" / "out.jsonl"
    out.parent.mkdir()
    summary = await batch(source, out, resume=True)
    assert sorted(str(o["custom_id"]) for o in read_output(out)) == EXPECTED
    assert (summary.skipped, summary.lines) == (0, len(INPUT))


async def test_resume_refuses_a_file_that_is_not_a_batch_output(tmp_path):
    source = write_input(tmp_path, INPUT)
    out = tmp_path / "out.jsonl"
    out.write_bytes(b"some notes\nmore notes\n")
    with pytest.raises(ConfigError, match="output line 1 is not a batch output line"):
        await batch(source, out, resume=True)
    assert out.read_bytes() == b"some notes\nmore notes\n"


async def test_a_duplicated_custom_id_stops_the_run_before_it_starts(tmp_path):
    source = write_input(tmp_path, [request_line("a"), request_line("b"), request_line("a")])
    out = tmp_path / "out.jsonl"
    out.write_bytes(b"untouched\n")
    with pytest.raises(ConfigError, match="custom_id 'a' appears on line 1 and again on line 3"):
        await batch(source, out, overwrite=True)
    assert out.read_bytes() == b"untouched\n"


async def test_ordered_output_follows_the_input_when_later_lines_finish_first(tmp_path):
    # Line i asks for 24 - 4i tokens paced at 100 tokens/s: the last line finishes first.
    lines = [request_line(f"r{i}", max_tokens=24 - 4 * i) for i in range(6)]
    lines.insert(3, "{bad")
    source = write_input(tmp_path, lines)
    simulator = SimulatorConfig(tokens_per_second=100)
    order = ["r0", "r1", "r2", None, "r3", "r4", "r5"]

    unordered = tmp_path / "unordered.jsonl"
    await batch(source, unordered, simulator=simulator, max_in_flight=6)
    assert [o["custom_id"] for o in read_output(unordered)] != order  # the test can tell

    for max_in_flight in (1, 2, 6):
        out = tmp_path / f"ordered-{max_in_flight}.jsonl"
        summary = await batch(
            source, out, simulator=simulator, max_in_flight=max_in_flight, ordered=True
        )
        assert [o["custom_id"] for o in read_output(out)] == order
        assert (summary.ok, summary.failed) == (6, 1)


async def test_ordered_resume_appends_the_rest_in_order(tmp_path):
    source = write_input(tmp_path, INPUT)
    out = tmp_path / "out.jsonl"
    await batch(source, out, ordered=True, max_in_flight=4)
    whole = out.read_bytes().splitlines(keepends=True)
    out.write_bytes(b"".join(whole[:4]) + whole[4][:10])
    await batch(source, out, ordered=True, resume=True, max_in_flight=4)
    got = [str(o["custom_id"]) for o in read_output(out)]
    assert got == [("None" if i == 5 else f"r{i}") for i in range(12)]


async def test_shards_split_the_input_exactly(tmp_path):
    source = write_input(tmp_path, INPUT)
    seen: list[str] = []
    for i in range(3):
        out = tmp_path / f"shard-{i}.jsonl"
        summary = await batch(source, out, shard=Shard(i, 3))
        ids = [str(o["custom_id"]) for o in read_output(out)]
        assert summary.written == len(ids)
        assert all(Shard(i, 3).holds(None if c == "None" else c) for c in ids)
        seen += ids
    assert sorted(seen) == EXPECTED


def test_cli_resume_ordered_and_shard(tmp_path, capsys):
    source = write_input(tmp_path, INPUT)
    out = tmp_path / "out.jsonl"
    argv = ["batch", str(source), "-o", str(out), "--resume", "--ordered"]
    assert main(argv) == 1  # the input has a bad line: a failed line means exit 1 ...
    argv.append("--allow-failures")  # ... unless failures are allowed
    assert [str(o["custom_id"]) for o in read_output(out)] == [
        ("None" if i == 5 else f"r{i}") for i in range(12)
    ]
    whole = out.read_bytes().splitlines(keepends=True)
    out.write_bytes(b"".join(whole[:7]) + b'{"id": "batch_req_')
    capsys.readouterr()
    assert main(argv) == 0
    assert len(read_output(out)) == len(INPUT)
    assert "skipped 7 (already answered)" in capsys.readouterr().out

    shard_out = tmp_path / "shard.jsonl"
    assert main(["batch", str(source), "-o", str(shard_out), "--shard", "1/2"]) == 0
    assert all(Shard(1, 2).holds(o["custom_id"]) for o in read_output(shard_out))


def test_cli_refuses_duplicates_and_bad_shards(tmp_path, capsys):
    dup = write_input(tmp_path, [request_line("a"), request_line("b"), request_line("a")])
    out = str(tmp_path / "out.jsonl")
    assert main(["batch", str(dup), "-o", out]) == 2
    err = capsys.readouterr().err
    assert "custom_id 'a' appears on line 1 and again on line 3" in err
    assert "Traceback" not in err
    for bad in ["2/2", "x"]:
        assert main(["batch", str(dup), "-o", out, "--shard", bad]) == 2
        assert "--shard must be i/n" in capsys.readouterr().err


async def test_batch_calls_are_booked_under_the_job(tmp_path):
    """Every line's call is tagged with the job id, so the ledger books it there."""
    import sluice
    from sluice._config import LedgerConfig
    from sluice._jobs.batch import run_batch
    from sluice.simulator import mock_transport

    source = write_input(tmp_path, INPUT)
    config = sluice.RuntimeConfig(ledger=LedgerConfig(job="job-42", persist=False))
    with trio.fail_after(30):
        async with sluice.open_runtime(config, transport=mock_transport()) as rt:
            await run_batch(source, tmp_path / "out.jsonl", runtime=rt)
            rows = await rt.ledger.snapshot(by=("tag", "job"))
    assert {(row.tag, row.job) for row in rows} == {("job-42", "job-42")}
    assert sum(row.totals.calls for row in rows) == len(INPUT) - 2  # lines 5 and 8 are bad
