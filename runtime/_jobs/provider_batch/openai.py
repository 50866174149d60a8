"""OpenAI's Files + Batches API as a :class:`~.backend.BatchBackend`.

Every OpenAI-protocol provider with this API (OpenAI, the simulator, ...) speaks it the same
way: the lines are uploaded as one JSONL file (``POST /files``, ``purpose=batch``), a batch is
created from it (``POST /batches``) carrying the fingerprint in its ``metadata``, polled
(``GET /batches/{id}``), and its output and error files are downloaded
(``GET /files/{id}/content``) and read line by line.

A line's body is exactly the realtime lane's request body, unstreamed: the provider's codec
builds it (its quirks and parameters applied), and each reply body is decoded by the same
codec, so a batch line's :class:`~sluice._protocols.base.AttemptOutput` is the one a realtime
call of the same request gives.
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Any

import attrs
import orjson

from ..._errors import BadRequest, CallError, ProtocolError
from ..._limits.cost import estimate_cost
from ..._protocols import embed_codec
from ..._protocols.http_errors import error_for_status
from .backend import BatchLimits, Entry, LineOutcome, RemoteBatch, RemoteState

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Sequence

    from ..._embeddings import EmbedOutput, EmbedRequest
    from ..._messages import ChatRequest
    from ..._protocols.base import Codec
    from .control import Control

__all__ = ["FINGERPRINT_KEY", "OPENAI_LIMITS", "OpenAIBatchBackend"]

OPENAI_LIMITS = BatchLimits(max_requests=50_000, max_bytes=200_000_000)
"""OpenAI's documented per-batch limits; its enqueued-token limits depend on the account."""
FINGERPRINT_KEY = "sluice_fingerprint"
"""The ``metadata`` key that carries a batch's fingerprint."""
ENDPOINT = "/v1/chat/completions"
RESPONSES = "/v1/responses"
EMBEDDINGS = "/v1/embeddings"
CLOCK_SKEW = 300.0
"""Seconds the provider's clock may be behind ours: :meth:`OpenAIBatchBackend.find` looks
this much before ``since``, so a batch is found even when its ``created_at`` reads earlier."""
_PAGE = 100
_STATES: dict[str, RemoteState] = {
    "validating": "running",
    "in_progress": "running",
    "finalizing": "running",
    "cancelling": "cancelling",
    "completed": "ended",
    "failed": "ended",
    "expired": "ended",
    "cancelled": "ended",
}
_EXPIRED_CODES = frozenset({"batch_expired"})
_CANCELLED_CODES = frozenset({"batch_cancelled"})


class OpenAIBatchBackend:
    """Files + Batches at one provider (see the module docstring)."""

    name = "openai"

    def __init__(
        self,
        control: Control,
        codec: Codec,
        *,
        limits: BatchLimits = OPENAI_LIMITS,
        expected_output_tokens: int = 1024,
    ) -> None:
        self._control = control
        self._codec = codec
        self._embed_codec = embed_codec(codec)
        self.limits = limits
        self._expected_output = expected_output_tokens

    @property
    def takes_embeddings(self) -> bool:
        """Whether ``/v1/embeddings`` lines can go in this provider's batches: its protocol
        has embeddings (see :func:`.backend.embed_backend`)."""
        return self._embed_codec is not None

    def __repr__(self) -> str:
        return f"OpenAIBatchBackend({self._control.base_url!r})"

    def entry(self, wire_id: str, request: ChatRequest) -> Entry:
        """One JSONL line: ``{"custom_id", "method", "url", "body"}``, the body the codec
        builds for the realtime lane with streaming off (``custom_id`` is ``wire_id`` as it is:
        OpenAI takes any string)."""
        if request.stream:  # a copy only when needed: the engine may pass stream=False
            request = attrs.evolve(request, stream=False)
        built = self._codec.build_request(request, base_url=self._control.base_url, api_key=None)
        # A model the provider serves through the Responses API gets a Responses body: its
        # line goes to that endpoint (and its batch with it, see create).
        path = built.url.partition("?")[0]
        line = {
            "custom_id": wire_id,
            "method": "POST",
            "url": RESPONSES if path.endswith("/responses") else ENDPOINT,
            "body": orjson.Fragment(built.body),
        }
        tokens = estimate_cost(request, self._expected_output).total_tokens
        return Entry(wire_id, orjson.dumps(line) + b"\n", tokens)

    def embed_entry(self, wire_id: str, request: EmbedRequest) -> Entry:
        """One ``/v1/embeddings`` JSONL line, its body the one the codec builds for the
        realtime lane."""
        from ..._embed_calls import embed_cost

        codec = self._embed_codec
        assert codec is not None, "takes_embeddings said no"
        built = codec.build_embed_request(request, base_url=self._control.base_url, api_key=None)
        line = {
            "custom_id": wire_id,
            "method": "POST",
            "url": EMBEDDINGS,
            "body": orjson.Fragment(built.body),
        }
        return Entry(wire_id, orjson.dumps(line) + b"\n", embed_cost(request).total_tokens)

    async def upload(self, entries: Sequence[Entry]) -> str | None:
        """``POST /files`` (multipart: ``purpose=batch`` and the JSONL file); the file's id.
        Repeating it after a failure is harmless (an orphaned file costs nothing)."""
        boundary = secrets.token_hex(16)
        head = (
            f"--{boundary}\r\n"
            'Content-Disposition: form-data; name="purpose"\r\n\r\n'
            f"batch\r\n--{boundary}\r\n"
            'Content-Disposition: form-data; name="file"; filename="sluice-batch.jsonl"\r\n'
            "Content-Type: application/jsonl\r\n\r\n"
        ).encode()
        body = b"".join(
            (head, *(entry.data for entry in entries), f"\r\n--{boundary}--\r\n".encode())
        )
        reply = await self._control.json(
            "POST", "/files", raw=body, content_type=f"multipart/form-data; boundary={boundary}"
        )
        file_id: str = _field(reply, "id", str, "POST /files")
        return file_id

    async def create(
        self, entries: Sequence[Entry], file_id: str | None, fingerprint: str
    ) -> RemoteBatch:
        """``POST /batches`` from ``file_id``, ``metadata`` carrying ``fingerprint``. Tried again
        only when the provider surely did not act (no connection, or a 429); any other
        failure is raised, for the engine to look for the batch with :meth:`find`."""
        return await self._create(file_id, fingerprint, _endpoint_of(entries))

    async def create_embeddings(
        self, entries: Sequence[Entry], file_id: str | None, fingerprint: str
    ) -> RemoteBatch:
        """As :meth:`create`, for a batch of ``/v1/embeddings`` lines."""
        return await self._create(file_id, fingerprint, EMBEDDINGS)

    async def _create(self, file_id: str | None, fingerprint: str, endpoint: str) -> RemoteBatch:
        if file_id is None:
            raise ValueError("an OpenAI batch is created from an uploaded file")
        reply = await self._control.json(
            "POST",
            "/batches",
            {
                "input_file_id": file_id,
                "endpoint": endpoint,
                "completion_window": "24h",
                "metadata": {FINGERPRINT_KEY: fingerprint},
            },
            retry="connect",
        )
        return remote_batch(reply)

    async def find(self, fingerprint: str, *, since: float) -> RemoteBatch | None:
        """The oldest batch whose ``metadata`` carries ``fingerprint``, among those created
        since ``since`` (less :data:`CLOCK_SKEW`): the list is read newest first and stops at
        the first older batch. Exact: no other batch carries the same fingerprint."""
        found = None
        after: str | None = None
        while True:
            path = f"/batches?limit={_PAGE}" + (f"&after={after}" if after else "")
            page = await self._control.json("GET", path)
            data = _field(page, "data", list, "GET /batches")
            for item in data:
                batch = remote_batch(item)
                if batch.created_at < since - CLOCK_SKEW:
                    return found
                if batch.fingerprint == fingerprint:
                    found = batch
            if not data or not page.get("has_more"):
                return found
            after = _field(page, "last_id", str, "GET /batches")

    async def get(self, batch_id: str) -> RemoteBatch:
        return remote_batch(await self._control.json("GET", f"/batches/{batch_id}"))

    async def results(self, batch: RemoteBatch) -> AsyncIterator[LineOutcome]:
        """The output file's lines, then the error file's, each decoded as it is read (a
        download that breaks resumes past the lines already given). An async generator: a
        caller that may stop early wraps it in ``contextlib.aclosing``, so the download's
        connection is released at once, not by the garbage collector."""
        async for line in self._result_lines(batch):
            yield self.decode_line(line)

    async def embed_results(self, batch: RemoteBatch) -> AsyncIterator[LineOutcome]:
        """As :meth:`results`, for a batch of ``/v1/embeddings`` lines."""
        async for line in self._result_lines(batch):
            yield self.decode_line(line, embeddings=True)

    async def _result_lines(self, batch: RemoteBatch) -> AsyncIterator[bytes]:
        reply = await self._control.json("GET", f"/batches/{batch.id}")
        for key in ("output_file_id", "error_file_id"):
            file_id = reply.get(key)
            if not isinstance(file_id, str) or not file_id:
                continue
            async for line in self._control.lines(f"/files/{file_id}/content"):
                yield line

    def decode_line(self, line: bytes, *, embeddings: bool = False) -> LineOutcome:
        """One line of an output or error file (of an embeddings batch: ``embeddings``).

        An embeddings reply is checked against the number of vectors it says it holds: the
        line's own inputs are not at hand when its batch is merged.

        Raises:
            ProtocolError: the line is not a batch result.
        """
        try:
            record = orjson.loads(line)
            wire_id = record["custom_id"]
            response, error = record.get("response"), record.get("error")
        except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
            raise ProtocolError(
                f"a batch results line is not a result: {line[:120]!r}", should_retry=False
            ) from None
        if isinstance(response, dict):
            status = response.get("status_code")
            request_id = response.get("request_id")
            body = orjson.dumps(response.get("body"))
            if status == 200:
                try:
                    if embeddings:
                        embedded = self._decode_embeddings(response.get("body"), body)
                        return LineOutcome(wire_id, "ok", embedded=embedded, request_id=request_id)
                    output = self._codec.decode_body(body)
                except CallError as exc:
                    return LineOutcome(wire_id, "error", error=exc, request_id=request_id)
                return LineOutcome(wire_id, "ok", output=output, request_id=request_id)
            headers = {"x-request-id": request_id} if isinstance(request_id, str) else {}
            failure = self._codec.decode_error(
                status if isinstance(status, int) else 500, headers, body, wall_now=0.0
            )
            return LineOutcome(wire_id, "error", error=failure, request_id=request_id)
        code = error.get("code") if isinstance(error, dict) else None
        message = error.get("message") if isinstance(error, dict) else None
        if code in _EXPIRED_CODES:
            return LineOutcome(wire_id, "expired")
        if code in _CANCELLED_CODES:
            return LineOutcome(wire_id, "cancelled")
        failure = error_for_status(
            None, str(message or "the batch line failed"), error_type=str(code or "") or None
        )
        return LineOutcome(wire_id, "error", error=failure)

    def _decode_embeddings(self, parsed: Any, body: bytes) -> EmbedOutput:
        codec = self._embed_codec
        assert codec is not None, "an embeddings batch is made only where the codec has them"
        data = parsed.get("data") if isinstance(parsed, dict) else None
        return codec.decode_embed_body(body, inputs=len(data) if isinstance(data, list) else 0)

    async def cancel(self, batch_id: str) -> RemoteBatch:
        """``POST /batches/{id}/cancel``; a batch that had already ended is returned as it is."""
        try:
            reply = await self._control.json("POST", f"/batches/{batch_id}/cancel")
        except BadRequest:
            return await self.get(batch_id)
        return remote_batch(reply)


def _endpoint_of(entries: Sequence[Entry]) -> str:
    """The endpoint a batch of chat entries goes to: the ``url`` its lines carry (one model's
    lines all go to the API its provider serves it through)."""
    if not entries:
        return ENDPOINT
    url = orjson.loads(entries[0].data).get("url")
    return url if url in (ENDPOINT, RESPONSES) else ENDPOINT


def remote_batch(reply: Any) -> RemoteBatch:
    """A batch object as the engine sees it.

    Raises:
        ProtocolError: the reply is not a batch object.
    """
    batch_id = _field(reply, "id", str, "a batch")
    status = _field(reply, "status", str, "a batch")
    state = _STATES.get(status)
    if state is None:
        raise ProtocolError(f"batch {batch_id}: unknown status {status!r}", should_retry=False)
    counts = reply.get("request_counts") or {}
    completed, failed = _count(counts, "completed"), _count(counts, "failed")
    metadata = reply.get("metadata")
    fingerprint = metadata.get(FINGERPRINT_KEY) if isinstance(metadata, dict) else None
    created = reply.get("created_at")
    problem = None
    if status == "failed":
        errors = reply.get("errors")
        data = errors.get("data") if isinstance(errors, dict) else None
        messages = [
            str(e.get("message") or e.get("code")) for e in data or () if isinstance(e, dict)
        ]
        problem = "; ".join(messages) or "the batch failed (the provider gave no reason)"
    return RemoteBatch(
        id=batch_id,
        state=state,
        fingerprint=fingerprint if isinstance(fingerprint, str) else None,
        total=_count(counts, "total"),
        done=completed + failed,
        failed=failed,
        created_at=float(created) if isinstance(created, int | float) else 0.0,
        problem=problem,
    )


def _count(counts: Any, key: str) -> int:
    value = counts.get(key) if isinstance(counts, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _field(reply: Any, key: str, kind: type, what: str) -> Any:
    value = reply.get(key) if isinstance(reply, dict) else None
    if not isinstance(value, kind):
        raise ProtocolError(
            f"{what}: the reply has no {key!r} ({str(reply)[:120]})", should_retry=False
        )
    return value
