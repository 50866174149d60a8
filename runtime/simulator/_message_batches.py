"""Anthropic's Message Batches API, as the simulator serves it.

``POST /v1/messages/batches`` (``{"requests": [{"custom_id", "params"}]}``),
``GET /v1/messages/batches`` (newest first; ``limit``, ``after_id``, ``before_id``),
``GET /v1/messages/batches/{id}``, ``GET /v1/messages/batches/{id}/results`` (JSONL, once
ended) and ``POST /v1/messages/batches/{id}/cancel``. Objects, ``processing_status``
(``in_progress``, ``canceling``, ``ended``), ``request_counts`` and result types
(``succeeded``, ``errored``, ``canceled``, ``expired``) follow Anthropic's documentation.

The create checks what Anthropic checks at once: the shape, ``custom_id`` (unique, matching
``^[a-zA-Z0-9_-]{1,64}$``), the request count (400) and the body size (413); a batch over the
enqueued-token limit is refused with 429. A request's params are checked when it is processed:
one the realtime route would refuse is an ``errored`` result carrying that refusal. The
timeline and the fates are :mod:`.batch_core`'s.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

import attrs
import orjson

from ._anthropic_wire import anthropic_error_body
from ._batch_core import BatchCore, BatchReply, SimBatch, digest, json_reply
from ._routes import ANTHROPIC

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["MessageBatches"]

MAX_REQUESTS = 100_000
MAX_BYTES = 256 * 1024 * 1024
WINDOW = 24 * 3600
CUSTOM_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_LINE_ERROR = ("api_error", "Internal server error (simulated)")


@attrs.define(eq=False)
class _MessageBatch:
    sim: SimBatch
    ids: list[str]
    params: list[bytes]


class MessageBatches:
    """The Message Batches routes of one app."""

    def __init__(self, core: BatchCore) -> None:
        self.core = core
        self._order: list[str] = []
        self._batches: dict[str, _MessageBatch] = {}

    async def handle(
        self, method: str, path: str, host: str, body: bytes, request_id: bytes, now: float
    ) -> BatchReply | None:
        route, _, query = path.partition("?")
        parts = route.strip("/").split("/")[3:]  # after "v1/messages/batches"
        if not parts and method == "POST":
            return await self._create(body, host, request_id, now)
        if not parts and method == "GET":
            return self._list(query, host, request_id, now)
        batch = self._batches.get(parts[0]) if parts else None
        if batch is None:
            return None if not parts else _error(404, "not_found_error", "Not found.", request_id)
        if len(parts) == 1 and method == "GET":
            return _json(200, orjson.dumps(self._object(batch, host, now)), request_id)
        if len(parts) == 2 and parts[1] == "results" and method == "GET":
            if not batch.sim.ended(now):
                message = f"Batch {batch.sim.id} has not ended: its results are not ready."
                return _error(400, "invalid_request_error", message, request_id)
            head = [(b"content-type", b"application/x-jsonl"), (b"request-id", request_id)]
            return BatchReply(200, head, None, self.core.body(self._results(batch, now)))
        if len(parts) == 2 and parts[1] == "cancel" and method == "POST":
            if batch.sim.ended(now):
                message = f"Batch {batch.sim.id} has ended and cannot be canceled."
                return _error(400, "invalid_request_error", message, request_id)
            batch.sim.cancel(now, self.core.wall_clock())
            self.core.stats.cancels += 1
            return _json(200, orjson.dumps(self._object(batch, host, now)), request_id)
        return None

    async def _create(self, body: bytes, host: str, request_id: bytes, now: float) -> BatchReply:
        import trio

        core = self.core
        limit = core.config.batch_max_bytes or MAX_BYTES
        if len(body) > limit:
            message = f"Request exceeds the maximum allowed size of {limit} bytes."
            return _error(413, "request_too_large", message, request_id)
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError:
            return _invalid("The request body is not valid JSON.", request_id)
        requests = data.get("requests") if isinstance(data, dict) else None
        if not isinstance(requests, list) or not requests:
            return _invalid("requests: a non-empty list is required.", request_id)
        most = core.config.batch_max_requests or MAX_REQUESTS
        if len(requests) > most:
            return _invalid(f"requests: at most {most} requests per batch.", request_id)
        ids: list[str] = []
        params: list[bytes] = []
        valid: list[bool] = []
        seen: set[str] = set()
        model, tokens = "", 0
        for index, item in enumerate(requests):
            if index % 500 == 499:
                await trio.lowlevel.checkpoint()
            custom_id = item.get("custom_id") if isinstance(item, dict) else None
            if not isinstance(custom_id, str) or not CUSTOM_ID.match(custom_id):
                message = f"requests.{index}.custom_id: must match ^[a-zA-Z0-9_-]{{1,64}}$."
                return _invalid(message, request_id)
            if custom_id in seen:
                message = f"requests.{index}.custom_id: {custom_id!r} is not unique."
                return _invalid(message, request_id)
            seen.add(custom_id)
            if not isinstance(item.get("params"), dict):
                return _invalid(f"requests.{index}.params: an object is required.", request_id)
            encoded = orjson.dumps(item["params"])
            checked = core.check(ANTHROPIC, encoded)
            ids.append(custom_id)
            params.append(encoded)
            valid.append(checked is not None)
            if checked is not None:
                model = model or checked[0]
                tokens += checked[1]
        over = core.over_enqueued(model, tokens, now)
        if over is not None:
            message = (
                f"This batch would put more than {over} enqueued tokens in processing "
                "(simulated). Wait for batches to end."
            )
            return _error(429, "rate_limit_error", message, request_id)
        batch_id = core.next_id("msgbatch_")
        sim = SimBatch(
            id=batch_id,
            fates=core.fates(batch_id, valid),
            model=model,
            tokens=tokens,
            t0=now,
            wall0=core.wall_clock(),
            duration=core.config.batch_time,
        )
        batch = _MessageBatch(sim, ids, params)
        self._batches[batch_id] = batch
        self._order.append(batch_id)
        core.batches[batch_id] = sim
        core.count_create(digest(orjson.dumps(requests)))
        await core.create_delay()
        return _json(200, orjson.dumps(self._object(batch, host, now)), request_id)

    def _list(self, query: str, host: str, request_id: bytes, now: float) -> BatchReply:
        params = parse_qs(query)
        try:
            limit = min(1000, max(1, int(params.get("limit", ["20"])[0])))
        except ValueError:
            return _invalid("limit: an integer is required.", request_id)
        newest = self._order[::-1]
        after, before = params.get("after_id", [None])[0], params.get("before_id", [None])[0]
        if after is not None:
            newest = newest[newest.index(after) + 1 :] if after in newest else []
            page = newest[:limit]
            more = len(newest) > limit
        elif before is not None:
            older = newest[: newest.index(before)] if before in newest else []
            page = older[-limit:]
            more = len(older) > limit
        else:
            page, more = newest[:limit], len(newest) > limit
        listing = {
            "data": [self._object(self._batches[i], host, now) for i in page],
            "has_more": more,
            "first_id": page[0] if page else None,
            "last_id": page[-1] if page else None,
        }
        return _json(200, orjson.dumps(listing), request_id)

    def _object(self, batch: _MessageBatch, host: str, now: float) -> dict[str, Any]:
        sim = batch.sim
        ended = sim.ended(now)
        ok, errored, expired, cancelled = sim.counts(now)
        processing = sim.total - ok - errored - expired - cancelled
        status = (
            "ended" if ended else "canceling" if sim.cancelled_at is not None else "in_progress"
        )
        end_wall = sim.cancel_wall if sim.cancel_wall is not None else sim.wall0 + sim.duration
        url = f"http://{host}/v1/messages/batches/{sim.id}/results"
        return {
            "id": sim.id,
            "type": "message_batch",
            "processing_status": status,
            "request_counts": {
                "processing": processing,
                "succeeded": ok,
                "errored": errored,
                "canceled": cancelled,
                "expired": expired,
            },
            "ended_at": _time(end_wall) if ended else None,
            "created_at": _time(sim.wall0),
            "expires_at": _time(sim.wall0 + WINDOW),
            "archived_at": None,
            "cancel_initiated_at": _time(sim.cancel_wall) if sim.cancel_wall else None,
            "results_url": url if ended else None,
        }

    def _results(self, batch: _MessageBatch, now: float) -> Iterator[bytes]:
        sim, core = batch.sim, self.core
        for index, custom_id in enumerate(batch.ids):
            outcome = sim.outcome(index, now)
            reply_id = f"{sim.id}_{index}"
            result: dict[str, Any]
            if outcome == "cancelled":
                result = {"type": "canceled"}
            elif outcome == "expired":
                result = {"type": "expired"}
            elif outcome == "ok":
                _, message = core.reply(
                    ANTHROPIC, batch.params[index], request_id=reply_id, created=0
                )
                result = {"type": "succeeded", "message": orjson.Fragment(message)}
            else:
                if sim.fates[index : index + 1] == b"i":
                    _, error = core.reply(
                        ANTHROPIC, batch.params[index], request_id=reply_id, created=0
                    )
                else:
                    error = anthropic_error_body(*_LINE_ERROR, f"req_{reply_id}")
                result = {"type": "errored", "error": orjson.Fragment(error)}
            yield orjson.dumps({"custom_id": custom_id, "result": result}) + b"\n"


def _time(epoch: float) -> str:
    """RFC 3339 with microseconds, as Anthropic writes times."""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _json(status: int, content: bytes, request_id: bytes) -> BatchReply:
    return json_reply(status, content, b"request-id", request_id)


def _error(status: int, type_: str, message: str, request_id: bytes) -> BatchReply:
    return _json(status, anthropic_error_body(type_, message, request_id.decode()), request_id)


def _invalid(message: str, request_id: bytes) -> BatchReply:
    return _error(400, "invalid_request_error", message, request_id)
