"""Reshape a response's timed events for a fault: cut, insert, stall, truncate. Pure.

A :data:`Schedule` is the body of one response as ``(offset, events)`` slots: the events of a
slot go out together, ``offset`` seconds after the first slot. Every function returns a new
schedule and leaves the last event of the stream (``[DONE]``, ``message_stop``) for last:
a fault never lands after the stream has visibly finished.
"""

from __future__ import annotations

from typing import TypeAlias

__all__ = ["Schedule", "cut_after", "half", "insert_after", "schedule", "stall_after", "truncate"]

Schedule: TypeAlias = list[tuple[float, list[bytes]]]


def schedule(slots: list[list[bytes]], interval: float) -> Schedule:
    """Slot ``i`` at ``i * interval``."""
    return [(i * interval, slot) for i, slot in enumerate(slots)]


def _events(plan: Schedule) -> int:
    return sum(len(events) for _, events in plan)


def cut_after(plan: Schedule, keep: int) -> Schedule:
    """The first ``keep`` events, and never the last one (so a cut stream is incomplete).

    Slots left empty are dropped.
    """
    keep = min(keep, _events(plan) - 1)
    out: Schedule = []
    for at, events in plan:
        if keep <= 0:
            break
        out.append((at, events[:keep]))
        keep -= len(out[-1][1])
    return out


def insert_after(plan: Schedule, after: int, event: bytes) -> Schedule:
    """``event`` placed after the first ``after`` events (before the last event at the latest),
    in the slot of the event before it (slot 0 when ``after`` is 0)."""
    after = max(0, min(after, _events(plan) - 1))
    out: Schedule = []
    seen = 0
    done = False
    for at, events in plan:
        if not done and after <= seen + len(events):
            k = after - seen
            out.append((at, [*events[:k], event, *events[k:]]))
            done = True
        else:
            out.append((at, events))
        seen += len(events)
    return out


def stall_after(plan: Schedule, after: int, seconds: float) -> Schedule:
    """Every event after the first ``after`` (at most all but the last) ``seconds`` later.

    The slot holding the boundary is split in two: the events before it keep their time.
    """
    after = max(0, min(after, _events(plan) - 1))
    out: Schedule = []
    seen = 0
    split = False
    for at, events in plan:
        if split:
            out.append((at + seconds, events))
        else:
            k = after - seen
            if k < len(events):
                if k > 0 or not out:  # slot 0 keeps its place (it may be empty) for the head
                    out.append((at, events[:k]))
                out.append((at + seconds, events[k:]))
                split = True
            else:
                out.append((at, events))
        seen += len(events)
    return out


def half(data: bytes) -> bytes:
    """The first half of ``data``, cut at a UTF-8 character boundary."""
    return data[: _boundary(data, len(data) // 2)]


def _boundary(data: bytes, k: int) -> int:
    while 0 < k < len(data) and data[k] & 0xC0 == 0x80:  # a continuation byte
        k -= 1
    return k


def truncate(plan: Schedule) -> Schedule:
    """The first half of the body's bytes (at a character boundary), at their usual times.

    Each slot becomes one joined piece; slots past the cut are dropped.
    """
    pieces = [(at, b"".join(events)) for at, events in plan]
    keep = _boundary(b"".join(p for _, p in pieces), sum(len(p) for _, p in pieces) // 2)
    out: Schedule = []
    for at, piece in pieces:
        if keep <= 0 and out:
            break
        out.append((at, [piece[:keep]]))
        keep -= len(piece)
    return out
