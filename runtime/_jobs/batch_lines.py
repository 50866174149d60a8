"""OpenAI Batch JSONL lines: reading input lines and writing output lines. Pure: no I/O.

Input line (one request)::

    {"custom_id": "r1", "method": "POST", "url": "/v1/chat/completions",
     "body": {"model": "sim:sim-small", "messages": [{"role": "user", "content": "Hi"}]}}

Output line, success::

    {"id": "batch_req_...", "custom_id": "r1",
     "response": {"status_code": 200, "request_id": "...", "body": {<chat.completion>}},
     "error": null}

Output line, failure: ``error`` is ``{"code", "message"}`` and its message starts with
``line N:``. When the provider answered with an HTTP status, ``response`` holds that status and an
OpenAI-style error body; otherwise (bad input line, no reply) ``response`` is null.

A line's ``url`` names its endpoint, as in OpenAI's Batch API: ``/v1/chat/completions`` (the
default), ``/v1/responses`` (read by :mod:`sluice._responses_format` into the same chat call,
answered with a ``response`` object) or ``/v1/embeddings`` (:mod:`sluice._embeddings_format`:
an embedding call, answered with the embeddings ``list``). One file may mix them.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

import attrs
import orjson

from .._embeddings import EmbedRequest, EmbedResult
from .._embeddings_format import embed_request, render_embeddings
from .._errors import CallError, ConfigError
from .._messages import ChatRequest
from .._openai_format import parse_chat_body, render_chat_completion
from .._responses_format import parse_responses_body, render_response

if TYPE_CHECKING:
    from collections.abc import Collection, Iterable

    from .._errors import SluiceError
    from .._messages import ChatResult

__all__ = [
    "RETRY_ERRORS",
    "Answered",
    "RetryErrors",
    "BOM",
    "BadLine",
    "Endpoint",
    "InputLine",
    "LineSplitter",
    "Shard",
    "custom_id_of",
    "error_code",
    "parse_shard",
    "scan_output",
    "parse_input_line",
    "redo_line",
    "render_bad_line",
    "render_error_line",
    "render_result_line",
    "url_of",
]

BOM = b"\xef\xbb\xbf"
"""The UTF-8 byte order mark."""
Endpoint = Literal["chat", "responses", "embeddings"]
"""What a line asks for, by its ``url``."""
_ENDPOINTS: dict[str, Endpoint] = {
    "/v1/chat/completions": "chat",
    "/chat/completions": "chat",
    "/v1/responses": "responses",
    "/responses": "responses",
    "/v1/embeddings": "embeddings",
    "/embeddings": "embeddings",
}
_URLS: dict[Endpoint, str] = {
    "chat": "/v1/chat/completions",
    "responses": "/v1/responses",
    "embeddings": "/v1/embeddings",
}
# The settings of a /v1/responses body that its response object repeats (see
# sluice._responses_format.render_response): kept with the line until its result is written.
_ECHOED = (
    "instructions",
    "max_output_tokens",
    "metadata",
    "parallel_tool_calls",
    "previous_response_id",
    "reasoning",
    "temperature",
    "text",
    "tool_choice",
    "tools",
    "top_p",
    "truncation",
    "user",
)


def url_of(endpoint: Endpoint) -> str:
    """The Batch API ``url`` of ``endpoint`` (``/v1/embeddings``, ...)."""
    return _URLS[endpoint]


@attrs.frozen
class InputLine:
    """A valid request line."""

    lineno: int
    """1-based line number in the input file."""
    custom_id: str
    request: ChatRequest | EmbedRequest
    """An :class:`EmbedRequest` for an ``embeddings`` line, else a :class:`ChatRequest`."""
    endpoint: Endpoint = "chat"
    echo: Mapping[str, Any] | None = None
    """A ``responses`` line: the settings of its body that its response object repeats."""

    @property
    def extra(self) -> dict[str, Any] | None:
        """What the line's result needs besides its reply, kept with it while it waits in a
        provider batch: a response's repeated settings, an embeddings line's encoding."""
        if self.endpoint == "responses":
            return dict(self.echo) if self.echo else None
        encoding = getattr(self.request, "encoding_format", None)
        return {"encoding_format": encoding} if encoding is not None else None

    def render(self, result: ChatResult | EmbedResult, *, line_id: str, created: int) -> bytes:
        """The output line of this line's finished call (:func:`render_result_line`)."""
        return render_result_line(
            self.custom_id,
            result,
            line_id=line_id,
            created=created,
            endpoint=self.endpoint,
            echo=self.echo,
            encoding_format=getattr(self.request, "encoding_format", None),
        )


@attrs.frozen
class BadLine:
    """An input line that cannot become a call; it still gets exactly one output line."""

    lineno: int
    custom_id: str | None
    """The line's custom_id when it had a valid one, else None."""
    code: str
    """``invalid_json_line``, ``missing_required_parameter``, ``invalid_url``,
    ``invalid_method`` or ``invalid_request``."""
    message: str


class LineSplitter:
    """Cut a byte stream into numbered lines, whatever the chunk boundaries.

    Feed chunks in order with :meth:`feed`, then call :meth:`close` once for a last line that
    has no newline. Line numbers count every physical line from 1, blank ones included, so
    they match what an editor shows. ``\\r\\n`` endings are accepted, and a UTF-8 byte order
    mark opening the stream (as Windows tools write one) is dropped from line 1.
    """

    def __init__(self) -> None:
        self._partial = bytearray()
        self._lineno = 0

    def feed(self, chunk: bytes) -> list[tuple[int, bytes]]:
        """Return the lines completed by ``chunk`` as ``(lineno, line)``, without line endings."""
        self._partial += chunk
        if b"\n" not in chunk:
            return []
        *complete, rest = bytes(self._partial).split(b"\n")
        self._partial = bytearray(rest)
        out = []
        for line in complete:
            if not self._lineno:
                line = line.removeprefix(BOM)
            self._lineno += 1
            out.append((self._lineno, line.removesuffix(b"\r")))
        return out

    def close(self) -> list[tuple[int, bytes]]:
        """Return the unterminated last line, if any. Call once, at end of input."""
        if not self._partial:
            return []
        line = bytes(self._partial).removesuffix(b"\r")
        if not self._lineno:
            line = line.removeprefix(BOM)
        self._lineno += 1
        self._partial.clear()
        return [(self._lineno, line)]


def parse_input_line(
    raw: bytes,
    lineno: int,
    *,
    model: str | None = None,
    stream: bool = True,
    groups: Collection[str] = (),
) -> InputLine | BadLine | None:
    """Read one input line.

    Args:
        raw: the line, without its line ending.
        lineno: its 1-based number, used in error messages.
        model: a ``provider:model`` that replaces every body's ``model``.
        stream: whether the call streams (the body's own ``stream`` never decides: the
            output line has the same shape either way).
        groups: the model groups the config defines: a body whose ``model`` is one of
            them is accepted as it is (the runtime routes it to one of the group's
            deployments); any other model must be written ``provider:model``.

    Returns:
        None for a blank line (not a request), else an :class:`InputLine`, or a
        :class:`BadLine` whose message names the line and the problem. ``method`` and ``url``
        may be left out (a chat line); when present they must be ``POST`` and one of
        ``/v1/chat/completions``, ``/v1/responses`` and ``/v1/embeddings``.
    """
    if not raw.strip():
        return None
    where = f"line {lineno}"
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        return BadLine(lineno, None, "invalid_json_line", f"{where}: not valid JSON ({exc})")
    if not isinstance(data, dict):
        return BadLine(lineno, None, "invalid_json_line", f"{where}: expected a JSON object")
    custom_id = data.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        problem = "missing" if custom_id is None else "must be a non-empty string"
        return BadLine(lineno, None, "missing_required_parameter", f"{where}: custom_id {problem}")
    method = data.get("method", "POST")
    if method != "POST":
        return BadLine(
            lineno, custom_id, "invalid_method", f"{where}: method must be POST, got {method!r}"
        )
    url = data.get("url", "/v1/chat/completions")
    endpoint = _ENDPOINTS.get(url) if isinstance(url, str) else None
    if endpoint is None:
        return BadLine(
            lineno,
            custom_id,
            "invalid_url",
            f"{where}: url must be /v1/chat/completions, /v1/responses or /v1/embeddings,"
            f" got {url!r}",
        )
    if "body" not in data:
        return BadLine(lineno, custom_id, "missing_required_parameter", f"{where}: body missing")
    if model is None and groups:
        body = data["body"]
        named = body.get("model") if isinstance(body, dict) else None
        if isinstance(named, str) and named in groups:
            model = named
    body = data["body"]
    echo = None
    request: ChatRequest | EmbedRequest
    try:
        if endpoint == "chat":
            request = parse_chat_body(body, model=model, stream=stream)
        elif endpoint == "responses":
            request = parse_responses_body(body, model=model, stream=stream)
            echo = {key: body[key] for key in _ECHOED if key in body}
        else:
            request = embed_request(body, model=model)
    except ConfigError as exc:
        return BadLine(lineno, custom_id, "invalid_request", f"{where}: {exc}")
    return InputLine(lineno, custom_id, request, endpoint, echo)


def _dump(line: dict[str, Any]) -> bytes:
    return orjson.dumps(line) + b"\n"


def render_result_line(
    custom_id: str,
    result: ChatResult | EmbedResult,
    *,
    line_id: str,
    created: int,
    endpoint: Endpoint = "chat",
    echo: Mapping[str, Any] | None = None,
    encoding_format: str | None = None,
) -> bytes:
    """The output line for a finished call, newline included; its body in ``endpoint``'s
    shape: a ``chat.completion``, a ``response`` (repeating ``echo``, the settings its line's
    body gave) or an embeddings ``list`` (vectors as ``encoding_format`` asks)."""
    body: dict[str, Any] | orjson.Fragment
    if isinstance(result, EmbedResult):
        packed = "base64" if encoding_format == "base64" else "float"
        body = orjson.Fragment(
            render_embeddings(result, model=result.model, encoding_format=packed)
        )
    elif endpoint == "responses":
        body = render_response(
            result,
            response_id=f"resp_{result.call_id}",
            model=result.model,
            created_at=created,
            body=echo,
        )
    else:
        body = render_chat_completion(result, created=created)
    return _dump(
        {
            "id": line_id,
            "custom_id": custom_id,
            "response": {"status_code": 200, "request_id": result.request_id, "body": body},
            "error": None,
        }
    )


def render_bad_line(bad: BadLine, *, line_id: str) -> bytes:
    """The output line for an input line that never became a call, newline included."""
    return _dump(
        {
            "id": line_id,
            "custom_id": bad.custom_id,
            "response": None,
            "error": {"code": bad.code, "message": bad.message},
        }
    )


def error_code(error: SluiceError) -> str:
    """The ``error.code`` of a failed call's line: the provider's error type when it gave
    one, else the sluice error class name (``RateLimited``, ``BudgetExceeded``)."""
    return (
        (error.error_type or error.kind) if isinstance(error, CallError) else type(error).__name__
    )


def render_error_line(custom_id: str, lineno: int, error: SluiceError, *, line_id: str) -> bytes:
    """The output line for a call that failed, newline included.

    ``error.code`` is the provider's error type when it gave one, else the sluice error class
    name (``RateLimited``, ``ConfigError``). When the provider answered with an HTTP status,
    ``response`` carries it with an OpenAI-style ``{"error": {...}}`` body.
    """
    code = error_code(error)
    response = None
    if isinstance(error, CallError) and error.status is not None:
        response = {
            "status_code": error.status,
            "request_id": error.request_id,
            "body": {
                "error": {
                    "message": error.message,
                    "type": error.error_type or error.kind,
                    "param": None,
                    "code": error.error_type,
                }
            },
        }
    return _dump(
        {
            "id": line_id,
            "custom_id": custom_id,
            "response": response,
            "error": {"code": code, "message": f"line {lineno}: {error}"},
        }
    )


_LINE_PREFIX = re.compile(r"line (\d+):")
REDO_CODE = "StoreUnavailable"
"""The error code of lines a resume does again: their call was never sent."""


@attrs.frozen
class Answered:
    """What an existing output file already holds, for ``--resume``."""

    custom_ids: frozenset[str]
    """Every custom_id with an output line (success or error)."""
    linenos: frozenset[int]
    """Input line numbers of error lines that have no custom_id (the line was not JSON or
    lacked one): such input lines are answered too, matched by number."""
    keep: int
    """Bytes of the file to keep: everything up to the end of the last whole line. A torn
    last line (no newline, or not valid JSON) lies past this offset."""
    kept_failed: int = 0
    """Error lines the file keeps (not done again): a resume's output still holds them, so the
    run has failed lines however its own calls end."""
    redo: frozenset[str] = frozenset()
    """custom_ids whose error line a resume drops and does again: a shared quota store's
    error (``StoreUnavailable``: the call was never sent) always, and the errors its
    ``retry_errors`` selects (see :func:`redo_line`)."""


RetryErrors = Literal["retriable", "all", "none"]
"""Which error lines a resume does again: those whose error may pass (the default), all of
them, or none."""
RETRY_ERRORS: tuple[RetryErrors, ...] = ("retriable", "all", "none")

# Error codes of lines without an HTTP status whose error may pass: sluice's retryable error
# classes, an open breaker, and error types providers send inside a stream.
_RETRIABLE_CODES = frozenset(
    {
        "RateLimited",
        "Overloaded",
        "ServerError",
        "ConnectionFailed",
        "StreamBroken",
        "ProtocolError",
        "EmptyResponse",
        "CallTimeout",
        "CircuitOpen",
        "overloaded_error",
        "server_error",
        "api_error",
        "rate_limit_exceeded",
        "rate_limit_error",
        # Provider lane: lines that got no outcome in any of their batches.
        "batch_expired",
        "batch_cancelled",
        "batch_failed",
    }
)


def redo_line(data: dict[str, Any], mode: RetryErrors) -> bool:
    """Whether a resume does this output line again.

    Success lines are kept. ``retriable`` redoes error lines whose error may pass: a 408,
    409, 429 or 5xx status, or with no reply a timeout, a refused or broken connection, a
    broken stream, an open breaker or a wait past ``max_wait``. It keeps terminal ones: other
    4xx (bad request, authentication, not found), content filtered, a spent budget, a bad
    input line. ``all`` redoes every error line, ``none`` none.
    """
    error = data.get("error")
    if not isinstance(error, dict) or mode == "none":
        return False
    if mode == "all":
        return True
    response = data.get("response")
    status = response.get("status_code") if isinstance(response, dict) else None
    if isinstance(status, int) and status >= 400:
        return status in (408, 409, 429) or status >= 500
    return error.get("code") in _RETRIABLE_CODES


def scan_output(lines: Iterable[bytes], mode: RetryErrors = "none") -> Answered:
    """Read an output file's lines (each with its ``\\n``, as iterating a binary file gives).

    Only the last line may be torn: one without a newline or that is not valid JSON is left
    out of ``keep``. A line before it that is not a JSON object with a ``custom_id`` means the
    file is not a batch output.

    Error lines with a custom_id that ``mode`` selects (:func:`redo_line`), and those of a
    shared quota store that failed, go to ``Answered.redo`` instead of the answered ids (an
    error line without a custom_id is a bad input line: it is kept).

    Raises:
        ConfigError: a line other than the last is not a batch output line.
    """
    ids: set[str] = set()
    failed: set[str] = set()
    bad_lines = 0
    redo: set[str] = set()
    linenos: set[int] = set()
    keep = 0
    torn: int | None = None
    for n, raw in enumerate(lines, start=1):
        if torn is not None:
            raise ConfigError(f"output line {torn} is not a batch output line; cannot resume")
        data: object = None
        if raw.endswith(b"\n"):
            try:
                data = orjson.loads(raw)
            except orjson.JSONDecodeError:
                data = None
        if not isinstance(data, dict) or "custom_id" not in data:
            torn = n
            continue
        keep += len(raw)
        custom_id = data["custom_id"]
        error = data.get("error")
        if isinstance(custom_id, str):
            if isinstance(error, dict) and (
                error.get("code") == REDO_CODE or redo_line(data, mode)
            ):
                redo.add(custom_id)
            else:
                ids.add(custom_id)
                if isinstance(error, dict):
                    failed.add(custom_id)
            continue
        message = error.get("message") if isinstance(error, dict) else None
        match = _LINE_PREFIX.match(message) if isinstance(message, str) else None
        if match is not None:
            linenos.add(int(match.group(1)))
        bad_lines += isinstance(error, dict)
    return Answered(
        frozenset(ids),
        frozenset(linenos),
        keep,
        kept_failed=len(failed) + bad_lines,
        redo=frozenset(redo - ids),
    )


def custom_id_of(raw: bytes) -> str | None:
    """The line's custom_id when it is a JSON object with a non-empty string one, else None."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    custom_id = data.get("custom_id") if isinstance(data, dict) else None
    return custom_id if isinstance(custom_id, str) and custom_id else None


@attrs.frozen
class Shard:
    """Shard ``index`` of ``count``: the lines whose custom_id hashes to ``index``."""

    index: int
    count: int

    def holds(self, custom_id: str | None) -> bool:
        """True when this shard processes a line with ``custom_id``.

        The hash is SHA-256 of the UTF-8 custom_id (stable across processes and hosts). A
        line without a custom_id belongs to shard 0, so its error line is written once.
        """
        if custom_id is None:
            return self.index == 0
        digest = hashlib.sha256(custom_id.encode()).digest()
        return int.from_bytes(digest[:8], "big") % self.count == self.index


def parse_shard(text: str) -> Shard:
    """Read ``i/n`` (0 <= i < n).

    Raises:
        ConfigError: it is not written so.
    """
    index, sep, count = text.partition("/")
    try:
        shard = Shard(int(index), int(count)) if sep else None
    except ValueError:
        shard = None
    if shard is None or not 0 <= shard.index < shard.count:
        raise ConfigError(f"--shard must be i/n with 0 <= i < n, got {text!r}")
    return shard
