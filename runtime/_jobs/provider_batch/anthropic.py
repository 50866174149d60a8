"""Anthropic's Message Batches API as a :class:`~.backend.BatchBackend`.

The requests go inline in the create (``POST /messages/batches``, no upload), each one the
codec's own unstreamed ``/messages`` body (the ``ChatRequest`` translated once, as for a
realtime call); the batch is polled (``GET /messages/batches/{id}``) and its results read as
JSONL (``GET /messages/batches/{id}/results``, from the configured base URL rather than the
absolute ``results_url``, so a proxy or a base URL override keeps working), each reply decoded
by the same codec.

Wire ids: Anthropic takes a ``custom_id`` matching ``^[a-zA-Z0-9_-]{1,64}$``. A user id that
matches is sent as it is; any other is sent as ``h-`` and a 32-digit BLAKE2b digest of it
(:func:`custom_id_for`), which is deterministic, so the mapping can also be recomputed.

No metadata: a Message Batch carries nothing sluice can set but its requests, and a listing
shows only its id, times and counts. So :meth:`AnthropicBatchBackend.find` cannot match a
fingerprint; see its docstring for what it does and what that guarantees.
"""

from __future__ import annotations

import hashlib
import re
from datetime import datetime
from typing import TYPE_CHECKING, Any

import attrs
import orjson

from ..._errors import BadRequest, CallError, ProtocolError
from ..._limits.cost import estimate_prompt_tokens
from ..._protocols.anthropic_request import DEFAULT_MAX_TOKENS
from .backend import BatchLimits, Entry, LineOutcome, RemoteBatch, RemoteState

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Sequence

    from ..._messages import ChatRequest
    from ..._protocols.base import Codec
    from .control import Control

__all__ = ["ANTHROPIC_LIMITS", "AnthropicBatchBackend", "custom_id_for"]

ANTHROPIC_LIMITS = BatchLimits(max_requests=100_000, max_bytes=256_000_000)
"""Anthropic's documented per-batch limits (the bytes are the create body's)."""
_CUSTOM_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_PAGE = 100
_STATES: dict[str, RemoteState] = {
    "in_progress": "running",
    "canceling": "cancelling",
    "ended": "ended",
}
_STATUS_OF_TYPE = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "overloaded_error": 529,
}


def custom_id_for(user_id: str) -> str:
    """The ``custom_id`` sent for ``user_id``: itself when Anthropic takes it, else ``h-`` and
    a digest of it."""
    if _CUSTOM_ID.match(user_id):
        return user_id
    return "h-" + hashlib.blake2b(user_id.encode(), digest_size=16).hexdigest()


class AnthropicBatchBackend:
    """Message Batches at one provider (see the module docstring)."""

    name = "anthropic"

    def __init__(
        self,
        control: Control,
        codec: Codec,
        *,
        limits: BatchLimits = ANTHROPIC_LIMITS,
    ) -> None:
        self._control = control
        self._codec = codec
        self.limits = limits

    def __repr__(self) -> str:
        return f"AnthropicBatchBackend({self._control.base_url!r})"

    def entry(self, wire_id: str, request: ChatRequest) -> Entry:
        """One ``requests`` item: ``{"custom_id", "params"}``, the params the codec builds for
        the realtime lane with streaming off; the custom id as :func:`custom_id_for` maps it."""
        if request.stream:  # a copy only when needed: the engine may pass stream=False
            request = attrs.evolve(request, stream=False)
        built = self._codec.build_request(request, base_url=self._control.base_url, api_key=None)
        sent = custom_id_for(wire_id)
        data = orjson.dumps({"custom_id": sent, "params": orjson.Fragment(built.body)})
        output = request.max_tokens if request.max_tokens is not None else DEFAULT_MAX_TOKENS
        return Entry(sent, data, estimate_prompt_tokens(request) + output)

    async def upload(self, entries: Sequence[Entry]) -> str | None:
        """Nothing to upload: the requests go in the create."""
        return None

    async def create(
        self, entries: Sequence[Entry], file_id: str | None, fingerprint: str
    ) -> RemoteBatch:
        """``POST /messages/batches`` with the entries. Tried again only when the provider
        surely did not act (no connection, or a 429); any other failure is raised, for the
        engine to look for the batch with :meth:`find`. The batch returned carries
        ``fingerprint`` (Anthropic keeps none)."""
        body = b"".join((b'{"requests":[', b",".join(e.data for e in entries), b"]}"))
        reply = await self._control.json("POST", "/messages/batches", raw=body, retry="connect")
        return attrs.evolve(remote_batch(reply), fingerprint=fingerprint)

    async def find(self, fingerprint: str, *, since: float) -> RemoteBatch | None:
        """The oldest batch created at or after ``since``, returned as carrying
        ``fingerprint``; None when there is none.

        What this guarantees, honestly: Anthropic keeps nothing sluice could match a
        fingerprint against, so this finds the right batch when the engine records ``since``
        (by a clock not ahead of Anthropic's) just before the create, creates one batch at a
        time, and nothing else creates batches on the same account in between. Otherwise it
        may adopt another batch, or miss this one (a clock ahead of Anthropic's: a second
        batch is then paid for, but nothing is merged wrongly). An adoption is confirmed when
        the results are read: every result's ``wire_id`` must be one of the submission's,
        which the engine checks against its state file (a foreign batch's ids are not, unless
        it asked exactly the same requests under the same ids).
        """
        found = None
        after: str | None = None
        while True:
            path = f"/messages/batches?limit={_PAGE}" + (f"&after_id={after}" if after else "")
            page = await self._control.json("GET", path)
            data = _field(page, "data", list, "GET /messages/batches")
            for item in data:
                batch = remote_batch(item)
                if batch.created_at < since:
                    return found
                found = attrs.evolve(batch, fingerprint=fingerprint)
            if not data or not page.get("has_more"):
                return found
            after = _field(page, "last_id", str, "GET /messages/batches")

    async def get(self, batch_id: str) -> RemoteBatch:
        """The batch now (its ``fingerprint`` None: Anthropic does not keep it)."""
        return remote_batch(await self._control.json("GET", f"/messages/batches/{batch_id}"))

    async def results(self, batch: RemoteBatch) -> AsyncIterator[LineOutcome]:
        """Every result line, decoded as it is read (a broken download resumes past the lines
        already given). An async generator: a caller that may stop early wraps it in
        ``contextlib.aclosing``."""
        async for line in self._control.lines(f"/messages/batches/{batch.id}/results"):
            yield self.decode_line(line)

    def decode_line(self, line: bytes) -> LineOutcome:
        """One results line: ``succeeded`` (the message, decoded), ``errored`` (the error, as
        the realtime lane maps it), ``canceled`` or ``expired``.

        Raises:
            ProtocolError: the line is not a batch result.
        """
        try:
            record = orjson.loads(line)
            custom_id = record["custom_id"]
            result = record["result"]
            kind = result["type"]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            raise ProtocolError(
                f"a batch results line is not a result: {line[:120]!r}", should_retry=False
            ) from None
        if kind == "succeeded":
            try:
                output = self._codec.decode_body(orjson.dumps(result.get("message")))
            except CallError as exc:
                return LineOutcome(custom_id, "error", error=exc)
            return LineOutcome(custom_id, "ok", output=output, request_id=None)
        if kind == "expired":
            return LineOutcome(custom_id, "expired")
        if kind == "canceled":
            return LineOutcome(custom_id, "cancelled")
        error = result.get("error")
        return LineOutcome(custom_id, "error", error=self._error(error), request_id=_rid(error))

    def _error(self, error: Any) -> CallError:
        """The :class:`CallError` of an ``errored`` result (an Anthropic error response)."""
        inner = error.get("error") if isinstance(error, dict) else None
        kind = inner.get("type") if isinstance(inner, dict) else None
        status = _STATUS_OF_TYPE.get(kind, 500) if isinstance(kind, str) else 500
        request_id = _rid(error)
        headers = {"request-id": request_id} if request_id else {}
        return self._codec.decode_error(status, headers, orjson.dumps(error), wall_now=0.0)

    async def cancel(self, batch_id: str) -> RemoteBatch:
        """``POST /messages/batches/{id}/cancel``; a batch that had already ended is returned
        as it is."""
        try:
            reply = await self._control.json("POST", f"/messages/batches/{batch_id}/cancel")
        except BadRequest:
            return await self.get(batch_id)
        return remote_batch(reply)


def remote_batch(reply: Any) -> RemoteBatch:
    """A Message Batch object as the engine sees it (no fingerprint).

    Raises:
        ProtocolError: the reply is not a Message Batch.
    """
    batch_id = _field(reply, "id", str, "a message batch")
    status = _field(reply, "processing_status", str, "a message batch")
    state = _STATES.get(status)
    if state is None:
        raise ProtocolError(
            f"message batch {batch_id}: unknown processing_status {status!r}", should_retry=False
        )
    counts = reply.get("request_counts")
    n = {
        k: _count(counts, k) for k in ("processing", "succeeded", "errored", "canceled", "expired")
    }
    failed = n["errored"] + n["canceled"] + n["expired"]
    return RemoteBatch(
        id=batch_id,
        state=state,
        fingerprint=None,
        total=sum(n.values()),
        done=n["succeeded"] + failed,
        failed=failed,
        created_at=_epoch(reply.get("created_at")),
    )


def _epoch(text: Any) -> float:
    """Seconds since the epoch of an RFC 3339 time (0.0 when there is none)."""
    if not isinstance(text, str):
        return 0.0
    value = text.replace("Z", "+00:00")
    head, dot, rest = value.partition(".")
    if dot:  # at most six fraction digits for fromisoformat
        digits = len(rest) - len(rest.lstrip("0123456789"))
        value = f"{head}.{rest[: min(digits, 6)]}{rest[digits:]}"
    try:
        return datetime.fromisoformat(value).timestamp()
    except ValueError:
        raise ProtocolError(f"a message batch time is not RFC 3339: {text!r}") from None


def _rid(error: Any) -> str | None:
    value = error.get("request_id") if isinstance(error, dict) else None
    return value if isinstance(value, str) else None


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
