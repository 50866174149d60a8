"""A provider's batch API kept in memory, for the provider lane's engine tests.

It stands where a provider's API stands (the other side of :class:`BatchBackend`), with the
counters the exactly-once tests read: uploads, creates per fingerprint, cancels. Each line's
fate is decided by ``fate(wire_id, submission)`` (``ok``, ``error``, ``expired``); a batch
ends after ``polls`` looks at it. Replies echo the request's text, so a test can tell
which line an output line answers.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import orjson

from sluice._conversation import Message
from sluice._errors import CallError
from sluice._jobs.provider_batch.backend import (
    BatchLimits,
    Entry,
    LineOutcome,
    RemoteBatch,
)
from sluice._messages import Usage
from sluice._protocols.base import AttemptOutput


def always_ok(wire_id, submission):
    return "ok"


@attrs.define
class _Batch:
    id: str
    fingerprint: str
    entries: list
    created_at: float
    state: str = "running"
    looks: int = 0
    cancelled: bool = False
    problem: str | None = None


@attrs.define
class MemoryBatchAPI:
    name: str = "memory"
    limits: BatchLimits = BatchLimits(max_requests=100, max_bytes=1 << 20)
    polls: int = 1
    fate: Callable[[str, int], str] = always_ok
    fail_batches: set = attrs.Factory(set)
    """Submission numbers (1-based, in create order) the provider fails whole."""
    lose_create_answer: set = attrs.Factory(set)
    """Create numbers whose batch is made but whose answer is lost (raises)."""
    cancel_keeps: int = 0
    """Lines of a cancelled batch (its first ones) that finished before the cancel."""
    on_create: Callable[[int], Any] | None = None
    """Called with the number of creates so far, after each."""
    uploads: int = 0
    creates: list = attrs.Factory(list)
    cancels: int = 0
    enqueued_at_create: list = attrs.Factory(list)
    """Tokens in batches not ended, the new one's included, at each create."""
    batches: dict = attrs.Factory(dict)
    seen: dict = attrs.Factory(dict)
    """Submissions per wire id so far."""
    _ids: Iterator[int] = attrs.Factory(lambda: itertools.count(1))

    def entry(self, wire_id, request):
        text = request.messages[-1].text
        data = orjson.dumps({"custom_id": wire_id, "model": request.model, "text": text})
        return Entry(wire_id, data + b"\n", 10 + len(text) // 4)

    async def upload(self, entries):
        self.uploads += 1
        return f"file-{self.uploads}"

    async def create(self, entries, file_id, fingerprint):
        n = len(self.creates) + 1
        self.creates.append(fingerprint)
        waiting = sum(
            e.tokens for b in self.batches.values() if b.state != "ended" for e in b.entries
        )
        self.enqueued_at_create.append(waiting + sum(e.tokens for e in entries))
        batch = _Batch(f"batch-{next(self._ids)}", fingerprint, list(entries), time.time())
        if n in self.fail_batches:
            batch.problem = "validation failed"
        self.batches[batch.id] = batch
        if self.on_create is not None:
            self.on_create(n)
        if n in self.lose_create_answer:
            raise CallError("the connection broke after the request was sent", status=None)
        return self._remote(batch)

    async def find(self, fingerprint, *, since):
        for batch in self.batches.values():
            if batch.fingerprint == fingerprint and batch.created_at >= since:
                return self._remote(batch)
        return None

    async def get(self, batch_id):
        batch = self.batches[batch_id]
        batch.looks += 1
        if batch.looks >= self.polls or batch.problem is not None:
            batch.state = "ended"
        return self._remote(batch)

    async def results(self, remote):
        batch = self.batches[remote.id]
        if batch.problem is not None:
            return
        for i, entry in enumerate(batch.entries):
            if batch.cancelled and i >= self.cancel_keeps:
                continue
            data = orjson.loads(entry.data)
            n = self.seen[entry.wire_id] = self.seen.get(entry.wire_id, 0) + 1
            fate = self.fate(entry.wire_id, n)
            if fate == "ok":
                output = AttemptOutput(
                    message=Message.assistant(f"echo {data['text']}"),
                    finish_reason="stop",
                    usage=Usage(input_tokens=6, output_tokens=50),
                    response_id=f"resp-{entry.wire_id}",
                )
                yield LineOutcome(entry.wire_id, "ok", output=output)
            elif fate == "error":
                error = CallError("bad request", status=400, error_type="invalid_request_error")
                yield LineOutcome(entry.wire_id, "error", error=error)
            elif fate == "cancelled":
                yield LineOutcome(entry.wire_id, "cancelled")
            else:
                yield LineOutcome(entry.wire_id, "expired")

    async def cancel(self, batch_id):
        self.cancels += 1
        batch = self.batches[batch_id]
        batch.cancelled = True
        batch.state = "ended"
        return self._remote(batch)

    def _remote(self, batch):
        return RemoteBatch(
            id=batch.id,
            state=batch.state,
            fingerprint=batch.fingerprint,
            total=len(batch.entries),
            done=len(batch.entries) if batch.state == "ended" else 0,
            failed=0,
            created_at=batch.created_at,
            problem=batch.problem,
        )
