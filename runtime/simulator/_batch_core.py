"""What the simulator's two batch APIs share: the timeline of a batch, the fate of each of its
lines, the replies, the counters, and the paced body that carries a results file.

A batch does not run in a task: its state is worked out from trio's clock whenever someone
looks (so under ``MockClock`` it is virtual, and nothing is left running when the app is
dropped). Created at ``t0``, it processes its lines in order, evenly over
``config.batch_time`` seconds; a line's fate (ok, errored, expired) is drawn when the batch is
created, from a generator seeded with ``fault_seed`` and the batch's id, so a run repeats. A
line that expires is never processed; the batch then ends as expired. A line whose request
the realtime route would refuse (400) is an errored line carrying that refusal.

Each reply is exactly what the realtime route answers, unstreamed and without faults, for the
same request: the same seed rule, the same body, only its ``id`` and ``created`` differ, as they
do between two realtime calls. An endpoint that is not a generation route (embeddings) answers
its lines through a :class:`LineEndpoint`.
"""

from __future__ import annotations

import hashlib
import math
import random
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Literal

import attrs
import orjson
import trio

from ._reply import plan_reply
from ._request import RequestError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from ._config import SimulatorConfig
    from ._routes import Route

__all__ = ["BatchCore", "BatchReply", "BatchStats", "LineEndpoint", "PacedBody", "SimBatch"]

OK, ERRORED, INVALID, EXPIRED = b"o", b"e", b"i", b"x"
"""A line's fate: processed, failed at random, refused as the realtime route would, expired."""

_PIECE = 65536


class LineEndpoint(ABC):
    """A batch endpoint other than a generation :class:`~.routes.Route`: how it answers one
    line's request and what the request holds."""

    @abstractmethod
    def line_reply(self, body: bytes, *, seed: int) -> tuple[int, bytes]:
        """``(status, body)`` the realtime endpoint answers for the request ``body``."""

    @abstractmethod
    def line_check(self, body: bytes) -> tuple[str, int] | None:
        """``(model, prompt tokens)`` of a request the endpoint takes, None for one it
        refuses."""


@attrs.frozen
class BatchReply:
    """One answer of a batch route, which the app turns into its response."""

    status: int
    headers: list[tuple[bytes, bytes]]
    content: bytes | None
    """The whole body; None for a streamed one (``body``)."""
    body: AsyncIterator[bytes] | None = None


def json_reply(
    status: int, content: bytes, request_id_header: bytes, request_id: bytes
) -> BatchReply:
    head = [
        (b"content-type", b"application/json"),
        (b"content-length", b"%d" % len(content)),
        (request_id_header, request_id),
    ]
    return BatchReply(status, head, content)


@attrs.define(eq=False)
class BatchStats:
    """Counters a test reads (``SimulatorApp.batch_stats``, ``GET /sim/stats``)."""

    files_uploaded: int = 0
    batches_created: int = 0
    """Creates that made a batch, on both APIs (refused ones not counted)."""
    creates_by_content: dict[str, int] = attrs.field(factory=dict)
    """Creates per digest of what the batch asked for (the input file's bytes, or the
    ``requests`` of an Anthropic create): a count above 1 is a duplicate paid job."""
    creates_by_metadata: dict[str, int] = attrs.field(factory=dict)
    """Creates per ``key=value`` of their ``metadata`` (OpenAI's; sluice's fingerprint is
    ``sluice_fingerprint=...``), so a test can count the creates of one fingerprint."""
    cancels: int = 0

    def as_json(self) -> bytes:
        duplicates = sum(n - 1 for n in self.creates_by_content.values() if n > 1)
        return orjson.dumps(
            {
                "files_uploaded": self.files_uploaded,
                "batches_created": self.batches_created,
                "duplicate_creates": duplicates,
                "creates_by_content": self.creates_by_content,
                "creates_by_metadata": self.creates_by_metadata,
                "cancels": self.cancels,
            }
        )


@attrs.define(eq=False)
class SimBatch:
    """One batch's timeline and its lines' fates (one byte per line, in input order)."""

    id: str
    fates: bytes
    model: str
    tokens: int
    """Prompt tokens of its lines, held against ``batch_enqueued_tokens`` while it runs."""
    t0: float
    """Created, on trio's clock."""
    wall0: float
    """Created, seconds since the epoch."""
    duration: float
    problem: tuple[str, str] | None = None
    """``(code, message)`` when the batch failed validation."""
    cancelled_at: float | None = None
    cancel_wall: float | None = None
    frozen: int | None = None
    """Lines processed when the cancel arrived."""

    @property
    def total(self) -> int:
        return len(self.fates)

    @property
    def end_at(self) -> float:
        return self.t0 + self.duration

    def ended(self, now: float) -> bool:
        """Finished one way or another (never in the create's own answer)."""
        if now <= self.t0:
            return False
        if self.problem is not None:
            return True
        if self.cancelled_at is not None and now > self.cancelled_at:
            return True
        return now >= self.end_at

    def cancelling(self, now: float) -> bool:
        return self.cancelled_at is not None and not self.ended(now)

    def processed(self, now: float) -> int:
        """Lines processed by ``now``, in input order."""
        if self.frozen is not None:
            return self.frozen
        if now <= self.t0:
            return 0
        if now >= self.end_at:
            return self.total
        return min(self.total, math.floor(self.total * (now - self.t0) / self.duration))

    def counts(self, now: float) -> tuple[int, int, int, int]:
        """``(succeeded, errored, expired, cancelled)`` lines by ``now``; the lines not in any
        are still processing."""
        done = self.processed(now)
        head = self.fates[:done]
        ok = head.count(OK)
        errored = head.count(ERRORED) + head.count(INVALID)
        if not self.ended(now):
            return ok, errored, 0, 0
        if self.frozen is not None:  # cancelled: what was not done never will be
            return ok, errored, 0, self.total - ok - errored
        return ok, errored, self.fates.count(EXPIRED), 0

    def outcome(self, index: int, now: float) -> Literal["ok", "errored", "expired", "cancelled"]:
        """How line ``index`` of an ended batch ended."""
        fate = self.fates[index : index + 1]
        if self.frozen is not None and (index >= self.frozen or fate == EXPIRED):
            return "cancelled"
        if fate == OK:
            return "ok"
        if fate == EXPIRED:
            return "expired"
        return "errored"

    def cancel(self, now: float, wall: float) -> None:
        if self.cancelled_at is None:
            self.frozen = self.processed(now)
            self.cancelled_at = now
            self.cancel_wall = wall


class BatchCore:
    """State both batch APIs share in one app: files, batches, counters, the id counters."""

    def __init__(self, config: SimulatorConfig, wall_clock: Callable[[], float]) -> None:
        self.config = config
        self.wall_clock = wall_clock
        self.stats = BatchStats()
        self.files: dict[str, object] = {}
        """By id: an input file's bytes, or a results file's source (see the API modules)."""
        self.batches: dict[str, SimBatch] = {}
        self._ids = 0

    def next_id(self, prefix: str) -> str:
        self._ids += 1
        return f"{prefix}{self._ids:012d}"

    def fates(self, batch_id: str, valid: list[bool]) -> bytes:
        """Each line's drawn fate; an invalid line is ``INVALID`` whatever the draw."""
        config = self.config
        rng = random.Random(f"{config.fault_seed}/{batch_id}")
        error, expiry = config.batch_error_rate, config.batch_error_rate + config.batch_expiry_rate
        out = bytearray()
        for ok in valid:
            u = rng.random()
            if not ok:
                out += INVALID
            elif u < error:
                out += ERRORED
            elif u < expiry:
                out += EXPIRED
            else:
                out += OK
        return bytes(out)

    def enqueued(self, model: str, now: float) -> int:
        """Tokens of ``model`` in batches not yet ended."""
        return sum(
            b.tokens
            for b in self.batches.values()
            if b.model == model and b.problem is None and not b.ended(now)
        )

    def over_enqueued(self, model: str, tokens: int, now: float) -> int | None:
        """The limit a new batch of ``tokens`` would break, or None when it fits."""
        limit = self.config.batch_enqueued_tokens
        if limit is None or self.enqueued(model, now) + tokens <= limit:
            return None
        return limit

    def count_create(self, content_digest: str, metadata: dict[str, str] | None = None) -> None:
        stats = self.stats
        stats.batches_created += 1
        by_content = stats.creates_by_content
        by_content[content_digest] = by_content.get(content_digest, 0) + 1
        for key, value in (metadata or {}).items():
            pair = f"{key}={value}"
            stats.creates_by_metadata[pair] = stats.creates_by_metadata.get(pair, 0) + 1

    async def upload_delay(self) -> None:
        """Wait ``batch_upload_delay`` after a file is stored, before answering (a process
        killed meanwhile never learns the file id)."""
        if self.config.batch_upload_delay:
            await trio.sleep(self.config.batch_upload_delay)

    async def create_delay(self) -> None:
        """Wait ``batch_create_delay`` after the batch exists, before answering (a process
        killed meanwhile never learns the id)."""
        if self.config.batch_create_delay:
            await trio.sleep(self.config.batch_create_delay)

    def reply(
        self, route: Route | LineEndpoint, body: bytes, *, request_id: str, created: int
    ) -> tuple[int, bytes]:
        """``(status, body)`` the realtime route answers for ``body`` (unstreamed, no faults)."""
        config = self.config
        if isinstance(route, LineEndpoint):
            return route.line_reply(body, seed=config.seed)
        try:
            request = route.parse(body, ignore_tool_choice=config.ignore_tool_choice)
            reply = plan_reply(request, seed=config.seed, output_tokens=config.output_tokens)
        except RequestError as exc:
            return 400, route.error("invalid_request_error", exc.message, request_id, exc.param)
        return 200, route.body(request, reply, request_id=request_id, created=created)

    def check(self, route: Route | LineEndpoint, body: bytes) -> tuple[str, int] | None:
        """``(model, prompt tokens)`` of a request the route takes, None for one it refuses."""
        if isinstance(route, LineEndpoint):
            return route.line_check(body)
        try:
            request = route.parse(body, ignore_tool_choice=self.config.ignore_tool_choice)
            if request.tool is not None or request.json_schema is not None:  # a schema to satisfy
                plan_reply(request, seed=self.config.seed, output_tokens=0)
        except RequestError:
            return None
        return request.model, max(1, request.prompt_tokens)

    def body(self, pieces: Iterator[bytes]) -> PacedBody:
        return PacedBody(pieces, self.config.batch_download_rate)


def digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=12).hexdigest()


class PacedBody:
    """A results file as it is downloaded: lines made as they are read, in pieces of about
    64 KiB, each due when ``rate`` bytes per second allow (None: at once). A plain async
    iterator, so a reader that leaves early leaves nothing to finalize."""

    __slots__ = ("_lines", "_rate", "_sent", "_start")

    def __init__(self, lines: Iterator[bytes], rate: float | None) -> None:
        self._lines = lines
        self._rate = rate
        self._sent = 0
        self._start: float | None = None

    def __aiter__(self) -> PacedBody:
        return self

    async def __anext__(self) -> bytes:
        if self._start is None:
            self._start = trio.current_time()
        parts: list[bytes] = []
        size = 0
        for line in self._lines:
            parts.append(line)
            size += len(line)
            if size >= _PIECE:
                break
        if not parts:
            raise StopAsyncIteration
        if self._rate:
            await trio.sleep_until(self._start + (self._sent + size) / self._rate)
        else:
            await trio.lowlevel.checkpoint()
        self._sent += size
        return b"".join(parts)
