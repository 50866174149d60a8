"""What the provider lane needs from one provider's batch API, and nothing more.

Two APIs sit behind :class:`BatchBackend`: OpenAI's Files + Batches (every OpenAI-protocol
provider that has it) and Anthropic's Message Batches. The engine never sees their wire
shapes; a backend never sees the state file or the output.

Exactly once rests on three calls being separate, so the engine can record its progress
between them: :meth:`BatchBackend.upload` (harmless to repeat: an orphaned file costs
nothing), :meth:`BatchBackend.create` (the paid step, never repeated blindly) and
:meth:`BatchBackend.find` (after a crash between create and the record of its id, finds the
batch that create made, by the fingerprint it carried).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, Protocol

import attrs

from ..._embeddings import EmbedOutput
from ..._errors import CallError
from ..._protocols.base import AttemptOutput

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Sequence

    from ..._embeddings import EmbedRequest
    from ..._messages import ChatRequest

__all__ = [
    "BatchBackend",
    "BatchLimits",
    "EmbedBatchBackend",
    "Entry",
    "LineOutcome",
    "RemoteBatch",
    "RemoteState",
    "embed_backend",
    "outcomes",
]


@attrs.frozen
class BatchLimits:
    """How much one batch may hold, and how much may wait at the provider at once."""

    max_requests: int
    """Requests per batch (OpenAI 50,000; Anthropic 100,000)."""
    max_bytes: int
    """Bytes per batch: the uploaded file (OpenAI 200 MB) or the create body (Anthropic 256 MB)."""
    enqueued_tokens: int | None = None
    """Tokens per model that may sit in unfinished batches at once (None: no limit known)."""


@attrs.frozen
class Entry:
    """One line as the provider's batch API takes it."""

    wire_id: str
    """The ``custom_id`` sent; the backend may map the user's id to one its API accepts."""
    data: bytes
    """The encoded entry: a JSONL line of the upload file (OpenAI, newline included) or the
    JSON object of one ``requests`` item (Anthropic)."""
    tokens: int
    """Worst-case tokens of the request (prompt estimate plus its output cap), counted
    against :attr:`BatchLimits.enqueued_tokens`."""


RemoteState = Literal["running", "ended", "cancelling"]
"""``running``: not finished (validating, in progress, finalizing); ``cancelling``: asked to
stop, not yet stopped; ``ended``: finished one way or another (completed, failed, expired,
cancelled): its results, if any, can be read and every line's outcome is final."""


@attrs.frozen
class RemoteBatch:
    """A batch as the provider reports it."""

    id: str
    state: RemoteState
    fingerprint: str | None
    """The fingerprint create carried (None for a batch sluice did not make)."""
    total: int
    done: int
    """Lines finished, successfully or not (for progress and the ETA)."""
    failed: int
    created_at: float
    """Seconds since the epoch."""
    problem: str | None = None
    """Why the whole batch failed, when it did (validation errors, a limit); its lines then
    have no outcome of their own and are all resubmittable."""


@attrs.frozen
class LineOutcome:
    """How one line of an ended batch ended."""

    wire_id: str
    kind: Literal["ok", "error", "expired", "cancelled"]
    output: AttemptOutput | None = None
    """The decoded reply (``ok`` only), the same object a realtime call's decoder gives."""
    embedded: EmbedOutput | None = None
    """The decoded embeddings (``ok`` of an embeddings line, in place of ``output``)."""
    error: CallError | None = None
    """What went wrong (``error`` only): the provider's status, type and message."""
    request_id: str | None = None


class BatchBackend(Protocol):
    """One provider's batch API, bound to a base URL and a key."""

    name: str
    """``openai`` (Files + Batches) or ``anthropic`` (Message Batches), for the summary."""
    limits: BatchLimits

    def entry(self, wire_id: str, request: ChatRequest) -> Entry:
        """Encode one request (its model without the provider prefix) as this API takes it;
        the body is the one the realtime lane would send, without streaming."""
        ...

    async def upload(self, entries: Sequence[Entry]) -> str | None:
        """Upload the entries as one input file; its id (None where requests go inline)."""
        ...

    async def create(
        self, entries: Sequence[Entry], file_id: str | None, fingerprint: str
    ) -> RemoteBatch:
        """Create the batch, carrying ``fingerprint`` where :meth:`find` can read it back.

        Paid and not idempotent: an error that leaves unknown whether the batch exists
        (a transport error after the request was sent) must be raised, not retried; the
        engine then calls :meth:`find`.
        """
        ...

    async def find(self, fingerprint: str, *, since: float) -> RemoteBatch | None:
        """The batch created with ``fingerprint`` no earlier than ``since`` (epoch seconds), if
        any: how a resume adopts a batch whose create answer was lost."""
        ...

    async def get(self, batch_id: str) -> RemoteBatch:
        """The batch's state now."""
        ...

    def results(self, batch: RemoteBatch) -> AsyncIterator[LineOutcome]:
        """Every line's outcome of an ended batch, read as a stream (memory flat in its
        size). A line the provider never reports (a failed or cancelled batch) is not
        yielded; the engine resubmits what has no outcome."""
        ...

    async def cancel(self, batch_id: str) -> RemoteBatch:
        """Ask the provider to stop the batch; lines already done keep their results."""
        ...


class EmbedBatchBackend(BatchBackend, Protocol):
    """A batch API that also takes embedding requests (OpenAI's ``/v1/embeddings`` lines).

    A batch holds one endpoint's lines, so embedding lines go in batches of their own: made
    with :meth:`embed_entry` and :meth:`create_embeddings`, read with :meth:`embed_results`.
    """

    def embed_entry(self, wire_id: str, request: EmbedRequest) -> Entry:
        """Encode one embedding request as this API takes it: the body the realtime lane
        would send."""
        ...

    async def create_embeddings(
        self, entries: Sequence[Entry], file_id: str | None, fingerprint: str
    ) -> RemoteBatch:
        """As :meth:`BatchBackend.create`, for a batch of embedding entries."""
        ...

    def embed_results(self, batch: RemoteBatch) -> AsyncIterator[LineOutcome]:
        """As :meth:`BatchBackend.results`, each ``ok`` outcome carrying ``embedded``."""
        ...


def embed_backend(backend: BatchBackend) -> EmbedBatchBackend | None:
    """``backend`` as an :class:`EmbedBatchBackend`, or None when its API (or its provider's
    protocol) takes no embedding lines."""
    can = getattr(backend, "takes_embeddings", False)
    return backend if can else None  # type: ignore[return-value]


def outcomes(
    backend: BatchBackend, batch: RemoteBatch, endpoint: str
) -> AsyncIterator[LineOutcome]:
    """The line outcomes of ``batch``, an ended batch of ``endpoint``'s lines."""
    embedder = embed_backend(backend) if endpoint == "embeddings" else None
    return embedder.embed_results(batch) if embedder is not None else backend.results(batch)
