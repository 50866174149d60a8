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
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs
import orjson

from ..errors import CallError, ConfigError
from ..messages import ChatRequest
from .openai_format import parse_chat_body, render_chat_completion

if TYPE_CHECKING:
    from ..errors import SluiceError
    from ..messages import ChatResult

__all__ = [
    "BadLine",
    "InputLine",
    "LineSplitter",
    "parse_input_line",
    "render_bad_line",
    "render_error_line",
    "render_result_line",
]

_CHAT_URLS = frozenset({"/v1/chat/completions", "/chat/completions"})


@attrs.frozen
class InputLine:
    """A valid request line."""

    lineno: int
    """1-based line number in the input file."""
    custom_id: str
    request: ChatRequest


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
    they match what an editor shows. ``\\r\\n`` endings are accepted.
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
            self._lineno += 1
            out.append((self._lineno, line.removesuffix(b"\r")))
        return out

    def close(self) -> list[tuple[int, bytes]]:
        """Return the unterminated last line, if any. Call once, at end of input."""
        if not self._partial:
            return []
        self._lineno += 1
        line = bytes(self._partial).removesuffix(b"\r")
        self._partial.clear()
        return [(self._lineno, line)]


def parse_input_line(
    raw: bytes, lineno: int, *, model: str | None = None
) -> InputLine | BadLine | None:
    """Read one input line.

    Args:
        raw: the line, without its line ending.
        lineno: its 1-based number, used in error messages.
        model: a ``provider:model`` that replaces every body's ``model``.

    Returns:
        None for a blank line (not a request), else an :class:`InputLine`, or a
        :class:`BadLine` whose message names the line and the problem. ``method`` and ``url``
        may be left out; when present they must be ``POST`` and ``/v1/chat/completions``.
        The request always streams, whatever the body's ``stream`` says.
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
    if url not in _CHAT_URLS:
        return BadLine(
            lineno,
            custom_id,
            "invalid_url",
            f"{where}: url must be /v1/chat/completions, got {url!r}",
        )
    if "body" not in data:
        return BadLine(lineno, custom_id, "missing_required_parameter", f"{where}: body missing")
    try:
        request = parse_chat_body(data["body"], model=model, stream=True)
    except ConfigError as exc:
        return BadLine(lineno, custom_id, "invalid_request", f"{where}: {exc}")
    return InputLine(lineno, custom_id, request)


def _dump(line: dict[str, Any]) -> bytes:
    return orjson.dumps(line) + b"\n"


def render_result_line(custom_id: str, result: ChatResult, *, line_id: str, created: int) -> bytes:
    """The output line for a finished call, newline included."""
    return _dump(
        {
            "id": line_id,
            "custom_id": custom_id,
            "response": {
                "status_code": 200,
                "request_id": result.request_id,
                "body": render_chat_completion(result, created=created),
            },
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


def render_error_line(custom_id: str, lineno: int, error: SluiceError, *, line_id: str) -> bytes:
    """The output line for a call that failed, newline included.

    ``error.code`` is the provider's error type when it gave one, else the sluice error class
    name (``RateLimited``, ``ConfigError``). When the provider answered with an HTTP status,
    ``response`` carries it with an OpenAI-style ``{"error": {...}}`` body.
    """
    code = (
        (error.error_type or error.kind) if isinstance(error, CallError) else type(error).__name__
    )
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
