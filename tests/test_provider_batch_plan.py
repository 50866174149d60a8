"""The provider lane's pure parts: the planner, the gate, the journal, the batch price."""

from __future__ import annotations

import orjson
import pytest

from sluice._errors import ConfigError
from sluice._jobs.provider_batch.backend import BatchLimits
from sluice._jobs.provider_batch.journal import Journal, journal_path
from sluice._jobs.provider_batch.plan import Gate, Packer, Planned, Sealed, affordable, pack
from sluice._ledger.prices import ModelPrice, PriceTable
from sluice._messages import Usage


def line(n, size=10, tokens=5, micros=3):
    return Planned(f"w{n}", n, f"c{n}", b"x" * size, tokens, micros)


def test_batches_fit_the_request_limit():
    batches = pack((line(n) for n in range(120_000)), BatchLimits(50_000, 1 << 40))
    assert [len(b.lines) for b in batches] == [50_000, 50_000, 20_000]
    assert [b.lines[0].lineno for b in batches] == [0, 50_000, 100_000]


def test_batches_fit_the_byte_limit_and_the_enqueued_tokens():
    by_bytes = pack((line(n, size=30) for n in range(10)), BatchLimits(100, 100))
    assert [len(b.lines) for b in by_bytes] == [3, 3, 3, 1]
    assert all(b.size <= 100 for b in by_bytes)
    by_tokens = pack(
        (line(n, tokens=40) for n in range(10)), BatchLimits(100, 10**6), max_tokens=100
    )
    assert [len(b.lines) for b in by_tokens] == [2, 2, 2, 2, 2]


def test_a_line_larger_than_a_limit_goes_alone():
    batches = pack([line(0), line(1, size=500), line(2)], BatchLimits(100, 100))
    assert [[p.lineno for p in b.lines] for b in batches] == [[0], [1], [2]]


def test_a_full_batch_is_sealed_at_once():
    packer = Packer("p", "m", BatchLimits(2, 10**6))
    assert packer.add(line(0)) is None
    sealed = packer.add(line(1))
    assert sealed is not None and len(sealed.lines) == 2
    assert packer.seal() is None


def test_the_gate_holds_a_model_at_its_enqueued_tokens():
    gate = Gate(limits={"p:m": 100})
    batch = Sealed("p", "m")
    for n in range(12):
        batch.add(line(n))  # 60 tokens
    assert gate.fits_queue(batch)
    gate.enter("p", "m", batch.tokens, batch.micros)
    assert not gate.fits_queue(batch)
    assert gate.fits_queue(Sealed("p", "other"))
    gate.leave("p", "m", batch.tokens, batch.micros)
    assert gate.fits_queue(batch) and gate.running == 0 and gate.micros == 0


def test_affordable_is_the_prefix_that_fits():
    lines = [line(n, micros=10) for n in range(10)]
    assert affordable(lines, 35) == 3
    assert affordable(lines, 100) == 10
    assert affordable(lines, 0) == 0
    batch = Sealed("p", "m")
    for p in lines:
        batch.add(p)
    rest = batch.split(3)
    assert (len(batch.lines), batch.micros, len(rest.lines), rest.micros) == (3, 30, 7, 70)


def test_the_batch_price_is_half_by_default_and_configurable():
    table = PriceTable(
        {"x:half": ModelPrice.usd(2.0, 8.0), "x:tenth": ModelPrice.usd(2.0, 8.0, batch_discount=10)}
    )
    usage = Usage(input_tokens=1_000_000, output_tokens=1_000_000)
    assert table.cost("x", "half", usage) == 10_000_000
    assert table.cost("x", "half", usage, batch=True) == 5_000_000
    assert table.cost("x", "tenth", usage, batch=True) == 9_000_000
    sonnet = table.lookup("anthropic", "claude-sonnet-4-5")
    assert sonnet is not None
    batch = sonnet.for_batch()
    assert batch.input * 2 == sonnet.input and batch.long_context is not None
    assert sonnet.long_context is not None
    assert batch.long_context[1].output * 2 == sonnet.long_context[1].output


def test_the_journal_replays_every_step_and_drops_a_torn_tail(tmp_path):
    path = journal_path(str(tmp_path / "out.jsonl"))
    assert path.endswith("out.batches.jsonl")
    journal = Journal(path)
    journal.start("run1")
    one = journal.intend(
        provider="p",
        model="m",
        fingerprint="fp1",
        at=1.0,
        lines=[("a", 1, "a"), ("b", 2, "b")],
        tokens=10,
        micros=5,
    )
    journal.uploaded(one, "file-1")
    journal.created(one, "batch-1")
    two = journal.intend(
        provider="p",
        model="m",
        fingerprint="fp2",
        at=2.0,
        lines=[("c", 3, "c")],
        tokens=1,
        micros=1,
    )
    journal.finished(one)
    journal.close()
    with open(path, "ab") as f:
        f.write(b'{"t": "batch", "n": 2, "bat')  # killed mid-write
    again = Journal(path)
    assert again.run_id == "run1"
    assert [(s.seq, s.batch_id, s.done) for s in again.submissions.values()] == [
        (1, "batch-1", True),
        (2, None, False),
    ]
    assert again.active()[0].fingerprint == "fp2" and two.seq == 2
    assert again.lines(again.submissions[1]) == [("a", 1, "a"), ("b", 2, "b")]
    assert again.next_seq == 3
    again.created(again.submissions[2], "batch-2")  # appended after the cut tail
    again.close()
    last = Journal(path)
    assert last.submissions[2].batch_id == "batch-2"
    last.close()


def test_a_file_that_is_not_a_journal_is_refused(tmp_path):
    path = tmp_path / "out.batches.jsonl"
    path.write_bytes(
        orjson.dumps({"other": 1}) + b"\n" + orjson.dumps({"t": "run", "id": "x"}) + b"\n"
    )
    with pytest.raises(ConfigError, match="not a sluice batch journal"):
        Journal(str(path))
