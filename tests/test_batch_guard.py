"""The output's guards, piece by piece: the lock, the input record and its prefix hash, the
probe write; and the input's encoding checks (a byte order mark, UTF-16, bytes not UTF-8)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sluice import ConfigError
from sluice._jobs.batch_guard import (
    InputRecord,
    OutputLock,
    PrefixHasher,
    input_record_path,
    probe_output,
)
from sluice._jobs.batch_lines import LineSplitter
from sluice._jobs.batch_scan import InputCheck, not_text


def test_a_held_lock_refuses_a_second_holder_and_names_the_first(tmp_path):
    path = str(tmp_path / "out.jsonl.lock")
    first = OutputLock(path, "output out.jsonl")
    first.acquire()
    assert Path(path).read_text() == f"{os.getpid()}\n"
    with pytest.raises(ConfigError, match=f"being written by process {os.getpid()}"):
        OutputLock(path, "output out.jsonl").acquire()
    first.release()
    assert not os.path.exists(path)
    second = OutputLock(path, "output out.jsonl")
    second.acquire()  # free again
    second.release()


def test_a_lock_left_by_a_dead_process_is_taken_over(tmp_path):
    path = tmp_path / "out.jsonl.lock"
    # A process that takes the lock and dies without releasing it (as kill -9 would).
    code = (
        "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT);"
        "fcntl.flock(fd, fcntl.LOCK_EX); os.write(fd, b'99999'); os._exit(0)"
    )
    subprocess.run([sys.executable, "-c", code, str(path)], check=True)
    assert path.exists()
    lock = OutputLock(str(path), "output out.jsonl")
    lock.acquire()
    assert path.read_text() == f"{os.getpid()}\n"
    lock.release()


@pytest.mark.parametrize("chunk", [1, 3, 7, 64, 1000])
@pytest.mark.parametrize("prefix", [0, 5, 64, 100])
def test_the_prefix_digest_whatever_the_chunks(chunk, prefix):
    data = bytes(range(100))
    hasher = PrefixHasher(prefix)
    for start in range(0, len(data), chunk):
        hasher.update(data[start : start + chunk])
    assert hasher.size == 100
    assert hasher.hexdigest() == hashlib.sha256(data).hexdigest()
    assert hasher.prefix_digest == hashlib.sha256(data[:prefix]).hexdigest()


def test_a_prefix_longer_than_the_file_has_no_digest():
    hasher = PrefixHasher(10)
    hasher.update(b"short")
    assert hasher.prefix_digest is None


def record(**fields: object) -> InputRecord:
    base: dict[str, object] = {
        "input": "in.jsonl",
        "size": 5,
        "sha256": "abc",
        "model": None,
        "shard": None,
    }
    return InputRecord(**{**base, **fields})  # type: ignore[arg-type]


def test_the_record_accepts_the_same_input_and_says_what_differs():
    old = record()
    assert old.mismatch(record(size=9, sha256="new"), "abc", "out.jsonl") is None  # appended
    assert "answers another input" in (old.mismatch(record(), "xyz", "out.jsonl") or "")
    assert "is shorter than" in (old.mismatch(record(size=2), None, "out.jsonl") or "")
    assert "--model" in (old.mismatch(record(model="a:b"), "abc", "out.jsonl") or "")
    assert "--shard" in (old.mismatch(record(shard="0/2"), "abc", "out.jsonl") or "")


def test_the_record_round_trips_and_a_foreign_file_is_refused(tmp_path):
    path = input_record_path(str(tmp_path / "out.jsonl"))
    assert path.endswith("out.input.json")
    assert InputRecord.read(path) is None
    written = record(model="sim:x", shard="1/3")
    written.write(path)
    assert InputRecord.read(path) == written
    with open(path, "w") as f:
        f.write("[]")
    with pytest.raises(ConfigError, match="not a sluice input record"):
        InputRecord.read(path)


def test_the_probe_leaves_a_file_as_it_was(tmp_path):
    path = tmp_path / "out.jsonl"
    path.write_bytes(b"kept\npartial")
    with open(path, "r+b") as out:
        probe_output(out, str(path))
    assert path.read_bytes() == b"kept\npartial"


def test_the_probe_finds_a_full_disk():
    with open("/dev/full", "wb") as out, pytest.raises(ConfigError, match="No space left"):
        probe_output(out, "/dev/full")


def test_a_byte_order_mark_is_dropped_from_line_one_only():
    splitter = LineSplitter()
    bom = b"\xef\xbb\xbf"
    lines = splitter.feed(bom[:2]) + splitter.feed(bom[2:] + b"a\r\n" + bom + b"b\n")
    assert lines == [(1, b"a"), (2, bom + b"b")]
    closing = LineSplitter()
    assert closing.feed(bom + b"x") == [] and closing.close() == [(1, b"x")]


@pytest.mark.parametrize(
    ("raw", "found"),
    [
        (b'\xff\xfe{\x00"\x00', "UTF-16 byte order mark"),
        (b'\x00{\x00"\x00c\x00', "NUL bytes"),
        (b'{"custom_id": "caf\xe9"}', "byte 19 (0xe9) is not UTF-8"),
        (b"not json but text", None),
    ],
)
def test_what_is_not_text(raw, found):
    problem = not_text(3, raw)
    if found is None:
        assert problem is None
    else:
        assert problem is not None and problem.startswith("line 3") and found in problem


def test_the_input_check_counts_lines_and_keeps_the_first_encoding_problem():
    check = InputCheck()
    for lineno, raw in enumerate([b"{}", b"", b"caf\xe9", b"\x00x"], start=1):
        check.add(lineno, raw)
    assert check.lines == 3
    assert check.not_text is not None and check.not_text.startswith("line 3")


def test_a_group_counts_the_providers_of_its_deployments():
    check = InputCheck(groups={"fast": frozenset({"openai", "anthropic"})})
    check.add(1, b'{"custom_id": "a", "body": {"model": "fast"}}')
    check.add(2, b'{"custom_id": "b", "body": {"model": "sim:sim-small"}}')
    assert check.providers == {"openai", "anthropic", "sim"}
