"""Resume, duplicate and shard helpers of sluice._jobs.batch_lines (pure, sync)."""

from __future__ import annotations

import orjson
import pytest

from sluice._errors import ConfigError
from sluice._jobs.batch_lines import (
    Answered,
    Shard,
    custom_id_of,
    parse_shard,
    scan_output,
)


def out_line(custom_id, message=None) -> bytes:
    error = None if message is None else {"code": "x", "message": message}
    return orjson.dumps({"id": "batch_req_1", "custom_id": custom_id, "error": error}) + b"\n"


def test_scan_collects_answered_ids_and_keeps_every_whole_line():
    lines = [out_line("a"), out_line("b", "line 2: boom"), out_line(None, "line 7: not JSON")]
    assert scan_output(lines) == Answered(
        frozenset({"a", "b"}), frozenset({7}), sum(len(x) for x in lines), kept_failed=2
    )


def test_scan_of_an_empty_file():
    assert scan_output([]) == Answered(frozenset(), frozenset(), 0)


@pytest.mark.parametrize(
    "torn",
    [
        out_line("c")[:-1],  # whole JSON, but the newline never made it
        out_line("c")[:17],  # cut mid-line
        b'{"id": "x", "custom_id": "c", "resp\n',  # cut, then a newline
        b"\n",  # a lone newline is not an output line
    ],
)
def test_a_torn_last_line_is_cut_off_and_not_answered(torn):
    whole = [out_line("a"), out_line("b")]
    answered = scan_output([*whole, torn])
    assert answered.custom_ids == frozenset({"a", "b"})
    assert answered.keep == len(whole[0]) + len(whole[1])


def test_a_bad_line_before_the_last_is_refused():
    with pytest.raises(ConfigError, match="output line 2 is not a batch output line"):
        scan_output([out_line("a"), b"garbage\n", out_line("b")])


def test_custom_id_of():
    assert custom_id_of(b'{"custom_id": "r1", "body": {}}') == "r1"
    assert custom_id_of(b'{"custom_id": ""}') is None
    assert custom_id_of(b'{"custom_id": 3}') is None
    assert custom_id_of(b"[1]") is None
    assert custom_id_of(b"{nope") is None


def test_shards_partition_every_custom_id_exactly():
    ids = [f"req-{i}" for i in range(1000)]
    for count in (1, 2, 3, 7):
        shards = [Shard(i, count) for i in range(count)]
        homes = [[s.index for s in shards if s.holds(c)] for c in ids]
        assert all(len(home) == 1 for home in homes)
        sizes = [sum(1 for home in homes if home == [i]) for i in range(count)]
        assert min(sizes) > 1000 / count / 2  # spread, not all in one shard
    assert [Shard(i, 3).holds(None) for i in range(3)] == [True, False, False]


def test_the_shard_hash_is_stable():
    """Pinned: every process and host must put a custom_id in the same shard."""
    homes = [next(i for i in range(4) if Shard(i, 4).holds(f"req-{k}")) for k in range(8)]
    assert homes == [3, 1, 2, 2, 1, 3, 1, 2]


def test_parse_shard():
    assert parse_shard("0/1") == Shard(0, 1)
    assert parse_shard("2/3") == Shard(2, 3)
    for bad in ["3/3", "-1/2", "1", "a/b", "1/0", ""]:
        with pytest.raises(ConfigError, match="--shard must be i/n"):
            parse_shard(bad)
