"""OpenAI's Files and Batches APIs, as the simulator serves them.

``POST /v1/files`` (multipart, ``purpose=batch``), ``GET /v1/files/{id}``,
``GET /v1/files/{id}/content``; ``POST /v1/batches``, ``GET /v1/batches`` (newest first,
``after`` and ``limit``), ``GET /v1/batches/{id}``, ``POST /v1/batches/{id}/cancel``. Objects,
statuses (``validating``, ``in_progress``, ``finalizing``, ``completed``, ``failed``,
``expired``, ``cancelling``, ``cancelled``), output and error file lines follow OpenAI's
documentation. The input file is checked when the batch is created (OpenAI does it while the
batch is ``validating``): a file that breaks a rule, or a batch over the enqueued-token limit,
makes a batch that is ``failed`` with ``errors``, as OpenAI's are. The timeline and the
lines' fates are :mod:`.batch_core`'s; an expired line is in the error file with code
``batch_expired``; the lines a cancel stopped are in neither file.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

import attrs
import orjson

from ._batch_core import BatchCore, BatchReply, LineEndpoint, SimBatch, digest, json_reply
from ._embeddings import EMBEDDING_LINES
from ._multipart import FormError, parse_form
from ._routes import COMPLETIONS, OPENAI, RESPONSES
from ._wire import error_body

if TYPE_CHECKING:
    from collections.abc import Iterator

    from ._routes import Route

__all__ = ["OpenAIBatches"]

MAX_REQUESTS = 50_000
MAX_BYTES = 200 * 1024 * 1024
WINDOW = 24 * 3600
_ENDPOINTS: dict[str, Route | LineEndpoint] = {
    "/v1/chat/completions": OPENAI,
    "/v1/completions": COMPLETIONS,
    "/v1/responses": RESPONSES,
    "/v1/embeddings": EMBEDDING_LINES,
}
_EXPIRED = {
    "code": "batch_expired",
    "message": "This request could not be executed before the completion window expired.",
}
_LINE_ERROR = (500, "The server had an error while processing your request (simulated).")


@attrs.frozen
class _InputFile:
    id: str
    filename: str
    content: bytes
    created_at: int


@attrs.frozen
class _ResultsFile:
    id: str
    batch: _OpenAIBatch
    errors: bool
    created_at: int


@attrs.define(eq=False)
class _OpenAIBatch:
    sim: SimBatch
    input_file: _InputFile
    endpoint: str
    metadata: dict[str, str] | None
    spans: list[tuple[int, int]]
    """Each line's place in the input file."""
    output_file_id: str | None = None
    error_file_id: str | None = None
    files_made: bool = False


class OpenAIBatches:
    """The Files and Batches routes of one app."""

    def __init__(self, core: BatchCore) -> None:
        self.core = core
        self._order: list[str] = []
        """Batch ids, oldest first."""
        self._batches: dict[str, _OpenAIBatch] = {}
        self._files: dict[str, _InputFile | _ResultsFile] = {}

    async def handle(
        self,
        method: str,
        path: str,
        content_type: str | None,
        body: bytes,
        request_id: bytes,
        now: float,
    ) -> BatchReply | None:
        route, _, query = path.partition("?")
        parts = route.strip("/").split("/")[1:]  # after "v1"
        if parts[0] == "files":
            if len(parts) == 1 and method == "POST":
                reply = self._upload(content_type, body, request_id)
                await self.core.upload_delay()
                return reply
            if len(parts) == 2 and method == "GET":
                return self._file(parts[1], request_id, now)
            if len(parts) == 3 and parts[2] == "content" and method == "GET":
                return self._content(parts[1], request_id, now)
            return None
        if len(parts) == 1 and method == "POST":
            return await self._create(body, request_id, now)
        if len(parts) == 1 and method == "GET":
            return self._list(query, request_id, now)
        if len(parts) == 2 and method == "GET":
            found = self._batches.get(parts[1])
            if found is None:
                return _missing("batch", parts[1], request_id)
            return _json(200, orjson.dumps(self._object(found, now)), request_id)
        if len(parts) == 3 and parts[2] == "cancel" and method == "POST":
            return self._cancel(parts[1], request_id, now)
        return None

    # Files

    def _upload(self, content_type: str | None, body: bytes, request_id: bytes) -> BatchReply:
        try:
            form = parse_form(content_type, body)
        except FormError as exc:
            return _bad(f"Invalid multipart upload: {exc}.", request_id)
        purpose = form.get("purpose")
        if purpose is None or purpose.content != b"batch":
            return _bad(
                "'purpose' must be 'batch' (the only purpose simulated).", request_id, "purpose"
            )
        upload = form.get("file")
        if upload is None or upload.filename is None:
            return _bad("Missing required parameter: 'file'.", request_id, "file")
        limit = self.core.config.batch_max_bytes or MAX_BYTES
        if len(upload.content) > limit:
            return _bad(f"File is too large: the limit is {limit} bytes.", request_id, "file")
        core = self.core
        file = _InputFile(
            core.next_id("file-"), upload.filename, upload.content, int(core.wall_clock())
        )
        self._files[file.id] = file
        core.stats.files_uploaded += 1
        return _json(200, orjson.dumps(self._file_object(file, 0.0)), request_id)

    def _file(self, file_id: str, request_id: bytes, now: float) -> BatchReply:
        file = self._files.get(file_id)
        if file is None:
            return _missing("file", file_id, request_id)
        return _json(200, orjson.dumps(self._file_object(file, now)), request_id)

    def _file_object(self, file: _InputFile | _ResultsFile, now: float) -> dict[str, Any]:
        if isinstance(file, _InputFile):
            size, name, purpose = len(file.content), file.filename, "batch"
        else:
            size = sum(len(line) for line in self._lines(file, now))
            kind = "error" if file.errors else "output"
            name, purpose = f"batch_{file.batch.sim.id}_{kind}.jsonl", "batch_output"
        return {
            "object": "file",
            "id": file.id,
            "purpose": purpose,
            "filename": name,
            "bytes": size,
            "created_at": file.created_at,
            "expires_at": None,
            "status": "processed",
            "status_details": None,
        }

    def _content(self, file_id: str, request_id: bytes, now: float) -> BatchReply:
        file = self._files.get(file_id)
        if file is None:
            return _missing("file", file_id, request_id)
        lines: Iterator[bytes]
        lines = _pieces(file.content) if isinstance(file, _InputFile) else self._lines(file, now)
        head = [(b"content-type", b"application/octet-stream"), (b"x-request-id", request_id)]
        return BatchReply(200, head, None, self.core.body(lines))

    def _lines(self, file: _ResultsFile, now: float) -> Iterator[bytes]:
        """The output (or error) file's lines, made as they are read."""
        batch, core = file.batch, self.core
        sim, content = batch.sim, batch.input_file.content
        route = _ENDPOINTS[batch.endpoint]
        created = int(sim.wall0 + sim.duration)
        for index, (start, end) in enumerate(batch.spans):
            outcome = sim.outcome(index, now)
            if outcome == "cancelled" or (outcome == "ok") == file.errors:
                continue
            line = orjson.loads(content[start:end])
            reply_id = f"{sim.id}-{index}"
            record: dict[str, Any] = {"id": f"batch_req_{reply_id}", "custom_id": line["custom_id"]}
            if outcome == "expired":
                record |= {"response": None, "error": _EXPIRED}
            else:
                if outcome == "ok" or sim.fates[index : index + 1] == b"i":
                    status, body = core.reply(
                        route, orjson.dumps(line["body"]), request_id=reply_id, created=created
                    )
                else:
                    status, body = _LINE_ERROR[0], error_body(_LINE_ERROR[1], "server_error")
                response = {
                    "status_code": status,
                    "request_id": f"req_{reply_id}",
                    "body": orjson.Fragment(body),
                }
                record |= {"response": response, "error": None}
            yield orjson.dumps(record) + b"\n"

    # Batches

    async def _create(self, body: bytes, request_id: bytes, now: float) -> BatchReply:
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError:
            return _bad("We could not parse the JSON body of your request.", request_id)
        if not isinstance(data, dict):
            return _bad("The request body must be a JSON object.", request_id)
        endpoint = data.get("endpoint")
        if endpoint not in _ENDPOINTS:
            return _bad(
                f"Invalid 'endpoint': the simulator batches {', '.join(_ENDPOINTS)}.",
                request_id,
                "endpoint",
            )
        if data.get("completion_window") != "24h":
            return _bad(
                "Invalid 'completion_window': only '24h' is supported.",
                request_id,
                "completion_window",
            )
        metadata = data.get("metadata")
        problem = _metadata_problem(metadata)
        if problem is not None:
            return _bad(problem, request_id, "metadata")
        file = self._files.get(data.get("input_file_id") or "")
        if not isinstance(file, _InputFile):
            return _bad(
                f"Cannot find file {data.get('input_file_id')!r}.", request_id, "input_file_id"
            )
        core = self.core
        batch_id = core.next_id("batch_")
        spans, valid, model, tokens, failure = await self._validate(file.content, endpoint)
        sim = SimBatch(
            id=batch_id,
            fates=core.fates(batch_id, valid),
            model=model,
            tokens=tokens,
            t0=now,
            wall0=core.wall_clock(),
            duration=core.config.batch_time,
            problem=failure,
        )
        if failure is None:
            limit = core.over_enqueued(model, tokens, now)
            if limit is not None:
                sim.problem = (
                    "token_limit_exceeded",
                    f"Enqueued token limit reached for {model} in organization org-sim. "
                    f"Limit: {limit:,} enqueued tokens. Please try again once some "
                    "in_progress batches have been completed.",
                )
        batch = _OpenAIBatch(sim, file, endpoint, metadata, spans)
        self._batches[batch_id] = batch
        self._order.append(batch_id)
        core.batches[batch_id] = sim
        core.count_create(digest(file.content), metadata)
        await core.create_delay()
        return _json(200, orjson.dumps(self._object(batch, now)), request_id)

    async def _validate(
        self, content: bytes, endpoint: str
    ) -> tuple[list[tuple[int, int]], list[bool], str, int, tuple[str, str] | None]:
        """Each line's span and whether its request is one the route takes, the batch's model
        and prompt tokens, and the rule the file breaks (None when it breaks none)."""
        import trio

        route = _ENDPOINTS[endpoint]
        limit = self.core.config.batch_max_requests or MAX_REQUESTS
        spans: list[tuple[int, int]] = []
        valid: list[bool] = []
        ids: set[str] = set()
        model, tokens = "", 0
        for number, (start, end) in enumerate(_spans(content), 1):
            if number % 500 == 0:
                await trio.lowlevel.checkpoint()
            try:
                line = orjson.loads(content[start:end])
            except orjson.JSONDecodeError:
                return spans, valid, model, tokens, _line_problem("invalid_json_line", number)
            problem = _line_shape(line, endpoint, ids)
            if problem is not None:
                return spans, valid, model, tokens, (problem[0], f"Line {number}: {problem[1]}")
            if len(spans) >= limit:
                return (
                    spans,
                    valid,
                    model,
                    tokens,
                    (
                        "too_many_requests",
                        f"The input file has more than {limit:,} requests.",
                    ),
                )
            checked = self.core.check(route, orjson.dumps(line["body"]))
            line_model = line["body"].get("model")
            if isinstance(line_model, str) and model and line_model != model:
                return (
                    spans,
                    valid,
                    model,
                    tokens,
                    (
                        "mismatched_model",
                        f"Line {number}: every request of a batch must use the same model "
                        f"({model!r}, not {line_model!r}).",
                    ),
                )
            model = model or (line_model if isinstance(line_model, str) else "")
            tokens += checked[1] if checked is not None else 0
            spans.append((start, end))
            valid.append(checked is not None)
        if not spans:
            return spans, valid, model, tokens, ("empty_file", "The input file has no requests.")
        return spans, valid, model, tokens, None

    def _list(self, query: str, request_id: bytes, now: float) -> BatchReply:
        params = parse_qs(query)
        try:
            limit = min(100, max(1, int(params.get("limit", ["20"])[0])))
        except ValueError:
            return _bad("Invalid 'limit': expected an integer.", request_id, "limit")
        newest = self._order[::-1]
        after = params.get("after", [None])[0]
        if after is not None:
            newest = newest[newest.index(after) + 1 :] if after in newest else []
        page = newest[:limit]
        data = [self._object(self._batches[i], now) for i in page]
        listing = {
            "object": "list",
            "data": data,
            "first_id": page[0] if page else None,
            "last_id": page[-1] if page else None,
            "has_more": len(newest) > limit,
        }
        return _json(200, orjson.dumps(listing), request_id)

    def _cancel(self, batch_id: str, request_id: bytes, now: float) -> BatchReply:
        batch = self._batches.get(batch_id)
        if batch is None:
            return _missing("batch", batch_id, request_id)
        sim = batch.sim
        if sim.ended(now):
            status = self._object(batch, now)["status"]
            return _bad(f"Cannot cancel a batch with status '{status}'.", request_id)
        sim.cancel(now, self.core.wall_clock())
        self.core.stats.cancels += 1
        return _json(200, orjson.dumps(self._object(batch, now)), request_id)

    def _object(self, batch: _OpenAIBatch, now: float) -> dict[str, Any]:
        """The batch object as ``GET /v1/batches/{id}`` shows it at ``now``."""
        sim = batch.sim
        wall0 = int(sim.wall0)
        ok, errored, expired, _ = sim.counts(now)
        ended = sim.ended(now)
        times: dict[str, int | None] = dict.fromkeys(
            (
                "in_progress_at",
                "finalizing_at",
                "completed_at",
                "failed_at",
                "expired_at",
                "cancelling_at",
                "cancelled_at",
            )
        )
        errors = None
        end_wall = int(sim.wall0 + sim.duration)
        if sim.problem is not None and ended:
            status, times["failed_at"] = "failed", wall0
            code, message = sim.problem
            errors = {
                "object": "list",
                "data": [{"code": code, "message": message, "param": None, "line": None}],
            }
        elif sim.cancelled_at is not None:
            times["in_progress_at"] = wall0
            times["cancelling_at"] = int(sim.cancel_wall or wall0)
            status = "cancelled" if ended else "cancelling"
            if ended:
                times["cancelled_at"] = int(sim.cancel_wall or wall0)
        elif now <= sim.t0:
            status = "validating"
        elif not ended:
            times["in_progress_at"] = wall0
            status = "in_progress"
            if now >= sim.t0 + 0.9 * sim.duration:
                status, times["finalizing_at"] = "finalizing", int(sim.wall0 + 0.9 * sim.duration)
        else:
            times["in_progress_at"] = wall0
            times["finalizing_at"] = int(sim.wall0 + 0.9 * sim.duration)
            status = "expired" if expired else "completed"
            times["expired_at" if expired else "completed_at"] = end_wall
        if ended and sim.problem is None:
            self._make_files(batch, ok, errored + expired)
        return {
            "id": sim.id,
            "object": "batch",
            "endpoint": batch.endpoint,
            "model": sim.model or None,
            "errors": errors,
            "input_file_id": batch.input_file.id,
            "completion_window": "24h",
            "status": status,
            "output_file_id": batch.output_file_id,
            "error_file_id": batch.error_file_id,
            "created_at": wall0,
            **times,
            "expires_at": wall0 + WINDOW,
            "request_counts": {
                "total": 0 if sim.problem else sim.total,
                "completed": ok,
                "failed": errored + expired,
            },
            "usage": None,
            "metadata": batch.metadata,
        }

    def _make_files(self, batch: _OpenAIBatch, ok: int, failed: int) -> None:
        if batch.files_made:
            return
        batch.files_made = True
        core, at = self.core, int(batch.sim.wall0 + batch.sim.duration)
        if ok:
            batch.output_file_id = core.next_id("file-")
            self._files[batch.output_file_id] = _ResultsFile(batch.output_file_id, batch, False, at)
        if failed:
            batch.error_file_id = core.next_id("file-")
            self._files[batch.error_file_id] = _ResultsFile(batch.error_file_id, batch, True, at)


def _spans(content: bytes) -> Iterator[tuple[int, int]]:
    """Where each non-blank line of ``content`` starts and ends (newline excluded)."""
    start, size = 0, len(content)
    while start < size:
        end = content.find(b"\n", start)
        if end < 0:
            end = size
        if content[start:end].strip():
            yield start, end
        start = end + 1


def _pieces(content: bytes) -> Iterator[bytes]:
    for start in range(0, len(content), 65536):
        yield content[start : start + 65536]


def _line_shape(line: Any, endpoint: str, ids: set[str]) -> tuple[str, str] | None:
    if not isinstance(line, dict):
        return "invalid_request", "each line must be a JSON object."
    custom_id = line.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        return "missing_required_parameter", "'custom_id' is required."
    if custom_id in ids:
        return "duplicate_custom_id", f"the custom_id {custom_id!r} is not unique in the batch."
    ids.add(custom_id)
    if line.get("method") != "POST":
        return "invalid_value", "'method' must be 'POST'."
    if line.get("url") != endpoint:
        return "mismatched_url", f"'url' must be the batch's endpoint, {endpoint}."
    if not isinstance(line.get("body"), dict):
        return "missing_required_parameter", "'body' must be a JSON object."
    return None


def _line_problem(code: str, number: int) -> tuple[str, str]:
    return code, f"Line {number} is not valid JSON."


def _metadata_problem(metadata: Any) -> str | None:
    if metadata is None:
        return None
    if not isinstance(metadata, dict) or len(metadata) > 16:
        return "'metadata' must be an object of at most 16 string pairs."
    for key, value in metadata.items():
        if not isinstance(value, str) or len(key) > 64 or len(value) > 512:
            return "'metadata' keys are at most 64 characters, values strings of at most 512."
    return None


def _json(status: int, content: bytes, request_id: bytes) -> BatchReply:
    return json_reply(status, content, b"x-request-id", request_id)


def _bad(message: str, request_id: bytes, param: str | None = None) -> BatchReply:
    return _json(400, error_body(message, "invalid_request_error", param), request_id)


def _missing(kind: str, object_id: str, request_id: bytes) -> BatchReply:
    message = f"No such {kind}: '{object_id}'"
    return _json(404, error_body(message, "invalid_request_error", "id"), request_id)
