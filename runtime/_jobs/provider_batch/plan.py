"""How lines become batches, and when a batch may go. Pure: no I/O, no trio.

Lines are grouped by provider and model (one :class:`Packer` each) and cut into batches that
fit the provider's :class:`~.backend.BatchLimits`: requests, bytes, and the per-model
enqueued-token limit (a batch holding more tokens than may ever wait at once could never be
accepted). A sealed batch then waits at the :class:`Gate` until the tokens already enqueued for
its model leave room for its own, and until its worst-case cost fits what the budget has left
besides the batches still running: so more batches are submitted as earlier ones finish, and
a budget that covers half the lines submits the half it covers (:func:`affordable`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from .backend import BatchLimits

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

__all__ = ["Gate", "Packer", "Planned", "Sealed", "affordable", "pack"]


@attrs.frozen(slots=True)
class Planned:
    """One line ready for a batch: its entry's bytes and what it may cost."""

    wire_id: str
    lineno: int
    custom_id: str
    data: bytes
    tokens: int
    """Worst-case tokens (counted against the enqueued-token limit)."""
    micros: int
    """Worst-case cost at the batch price (counted against the budget)."""
    tries: int = 0
    """Earlier submissions of this line in this run (it expired, or its batch failed)."""
    extra: Any = None
    """What the line's result needs besides its reply (see :meth:`.journal.Journal.intend`)."""


@attrs.define
class Sealed:
    """A batch ready to submit: lines of one provider, model and endpoint, within the
    limits."""

    provider: str
    model: str
    endpoint: str = "chat"
    lines: list[Planned] = attrs.Factory(list)
    size: int = 0
    tokens: int = 0
    micros: int = 0

    def add(self, line: Planned) -> None:
        self.lines.append(line)
        self.size += len(line.data)
        self.tokens += line.tokens
        self.micros += line.micros

    def split(self, keep: int) -> Sealed:
        """Keep the first ``keep`` lines; the rest as a batch of their own."""
        rest = Sealed(self.provider, self.model, self.endpoint)
        for line in self.lines[keep:]:
            rest.add(line)
        del self.lines[keep:]
        self.size -= rest.size
        self.tokens -= rest.tokens
        self.micros -= rest.micros
        return rest


@attrs.define
class Packer:
    """Fills batches of one provider, model and endpoint (a batch API takes one endpoint's
    lines a batch); seals one when the next line would not fit."""

    provider: str
    model: str
    limits: BatchLimits
    max_tokens: int | None = None
    """Tokens a batch may hold: the model's enqueued-token limit."""
    open: Sealed | None = None
    endpoint: str = "chat"

    def add(self, line: Planned) -> Sealed | None:
        """Add ``line``; the batch it sealed, if it did (``line`` then opens the next)."""
        batch = self.open
        sealed = None
        if batch is not None and batch.lines and not self._fits(batch, line):
            sealed, batch = batch, None
        if batch is None:
            batch = self.open = Sealed(self.provider, self.model, self.endpoint)
        batch.add(line)
        if len(batch.lines) >= self.limits.max_requests:
            # Full: sealed at once, so a full batch never waits for a line that will not come.
            assert sealed is None
            sealed, self.open = batch, None
        return sealed

    def _fits(self, batch: Sealed, line: Planned) -> bool:
        limits = self.limits
        if batch.size + len(line.data) > limits.max_bytes:
            return False
        return self.max_tokens is None or batch.tokens + line.tokens <= self.max_tokens

    def seal(self) -> Sealed | None:
        """The batch being filled, sealed as it is (None when empty)."""
        batch, self.open = self.open, None
        return batch if batch is not None and batch.lines else None


def pack(
    lines: Iterable[Planned],
    limits: BatchLimits,
    *,
    provider: str = "p",
    model: str = "m",
    max_tokens: int | None = None,
) -> list[Sealed]:
    """Every batch ``lines`` make, in order (for tests and the benchmark)."""
    packer = Packer(provider, model, limits, max_tokens)
    batches = [b for line in lines if (b := packer.add(line)) is not None]
    last = packer.seal()
    return [*batches, last] if last is not None else batches


def affordable(lines: Sequence[Planned], left_micros: int) -> int:
    """How many of ``lines``, from the first, fit ``left_micros`` together."""
    total = 0
    for n, line in enumerate(lines):
        total += line.micros
        if total > left_micros:
            return n
    return len(lines)


@attrs.define
class Gate:
    """What is enqueued at the provider now, per model, and the budget it reserves.

    ``limits`` maps ``provider:model`` to its enqueued-token limit (absent or None: no limit).
    """

    limits: dict[str, int | None] = attrs.Factory(dict)
    tokens: dict[str, int] = attrs.Factory(dict)
    micros: int = 0
    """Worst cases of the batches submitted and not yet merged."""
    running: int = 0

    def fits_queue(self, batch: Sealed) -> bool:
        """Whether ``batch`` fits beside what its model has enqueued. A batch larger than
        the limit alone (one huge line) goes when nothing else of its model waits."""
        key = f"{batch.provider}:{batch.model}"
        limit = self.limits.get(key)
        queued = self.tokens.get(key, 0)
        return limit is None or queued == 0 or queued + batch.tokens <= limit

    def enter(self, provider: str, model: str, tokens: int, micros: int) -> None:
        key = f"{provider}:{model}"
        self.tokens[key] = self.tokens.get(key, 0) + tokens
        self.micros += micros
        self.running += 1

    def leave(self, provider: str, model: str, tokens: int, micros: int) -> None:
        key = f"{provider}:{model}"
        self.tokens[key] = self.tokens.get(key, 0) - tokens
        self.micros -= micros
        self.running -= 1
