"""A batch line's outcome as an output line, in the realtime lane's format. Pure: no I/O.

An ``ok`` outcome carries the decoded reply (the :class:`~sluice._protocols.base.AttemptOutput`
a realtime call's decoder gives), which becomes the :class:`~sluice._messages.ChatResult` a
realtime call would have returned and is rendered by the realtime lane's own
:func:`~sluice._jobs.batch_lines.render_result_line`; an ``error`` outcome is rendered by its
:func:`~sluice._jobs.batch_lines.render_error_line`. So a user who switches lanes gets the same
lines (ids and timestamps aside).
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING

import attrs

from ..._embeddings import EmbedResult
from ..._errors import CallError
from ..._mail import RecordCall, RecordUsage
from ..._messages import ChatResult, Usage
from ..batch_lines import Endpoint, error_code, render_error_line, render_result_line

if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from .backend import LineOutcome

__all__ = [
    "Tally",
    "embed_result_of",
    "line_id",
    "render_failure",
    "render_ok",
    "result_of",
    "unfinished_error",
]


def line_id() -> str:
    """A fresh output line ``id``, as the realtime lane makes them."""
    return f"batch_req_{secrets.token_hex(12)}"


def result_of(outcome: LineOutcome, provider: str, model: str) -> ChatResult:
    """The result a realtime call would have returned for an ``ok`` outcome."""
    output = outcome.output
    assert output is not None, "an ok outcome carries its output"
    return ChatResult(
        call_id=secrets.token_hex(12),
        provider=provider,
        model=model,
        message=output.message,
        finish_reason=output.finish_reason,
        raw_finish_reason=output.raw_finish_reason,
        usage=output.usage if output.usage is not None else Usage(),
        attempts=1,
        request_id=outcome.request_id or output.response_id,
        models_tried=(f"{provider}:{model}",),
        stop_sequence=output.stop_sequence,
        logprobs=output.logprobs,
        system_fingerprint=output.system_fingerprint,
        service_tier=output.service_tier,
    )


def embed_result_of(outcome: LineOutcome, provider: str, model: str) -> EmbedResult:
    """The result a realtime embedding call would have returned for an ``ok`` outcome."""
    output = outcome.embedded
    assert output is not None, "an ok embeddings outcome carries its vectors"
    return EmbedResult(
        call_id=secrets.token_hex(12),
        provider=provider,
        model=model,
        vectors=output.vectors,
        usage=output.usage if output.usage is not None else Usage(),
        request_id=outcome.request_id or output.response_id,
        models_tried=(f"{provider}:{model}",),
    )


def render_ok(
    custom_id: str,
    result: ChatResult | EmbedResult,
    *,
    created: int,
    endpoint: Endpoint = "chat",
    extra: Any = None,
) -> bytes:
    """The output line of an ``ok`` outcome, in ``endpoint``'s shape; ``extra`` is what the
    line's result needs besides its reply (a response's repeated settings, an embeddings
    line's ``encoding_format``)."""
    echo: Mapping[str, Any] | None = None
    encoding = None
    if endpoint == "responses" and isinstance(extra, dict):
        echo = extra
    elif endpoint == "embeddings" and isinstance(extra, dict):
        encoding = extra.get("encoding_format")
    return render_result_line(
        custom_id,
        result,
        line_id=line_id(),
        created=created,
        endpoint=endpoint,
        echo=echo,
        encoding_format=encoding,
    )


def render_failure(
    custom_id: str, lineno: int, outcome: LineOutcome, provider: str, model: str
) -> tuple[bytes, str]:
    """The error line of an ``error`` outcome, and its error code (for the summary)."""
    error = outcome.error
    if error is None:
        error = CallError("the provider reported an error without details")
    error = error.in_context(call_id="", provider=provider, model=model, attempt=error.attempt or 1)
    if error.request_id is None and outcome.request_id is not None:
        error = attrs.evolve(error, request_id=outcome.request_id)
    return render_error_line(custom_id, lineno, error, line_id=line_id()), error_code(error)


def unfinished_error(
    kind: str, provider: str, model: str, tries: int, problem: str | None
) -> CallError:
    """The error of a line that never got an outcome in ``tries`` submissions (it expired,
    was cancelled, or its batch failed each time)."""
    why = {
        "expired": "expired unprocessed in the provider's batch window",
        "cancelled": "was cancelled before it ran",
        "failed": "was in a batch the provider failed",
    }.get(kind, "got no outcome")
    detail = f" ({problem})" if problem else ""
    return CallError(
        f"the line {why} in each of its {tries} submissions{detail}; --resume sends it again",
        provider=provider,
        model=model,
        error_type=f"batch_{kind}",
        attempt=tries,
    )


@attrs.define
class Tally:
    """The output lines of a batch's outcomes being merged, and what they add to the run's
    counts and the ledger, until the engine writes them (:meth:`add` for each outcome)."""

    provider: str
    model: str
    endpoint: Endpoint
    tag: str | None
    created: int
    chunk: list[bytes] = attrs.Factory(list)
    counts: dict[str, int] = attrs.Factory(dict)
    errors: dict[str, int] = attrs.Factory(dict)
    records: list[RecordUsage | RecordCall] = attrs.Factory(list)
    """Usage and call records for the ledger."""

    def add(self, outcome: LineOutcome, custom_id: str, lineno: int, extra: Any) -> bool:
        """Add the output line of an ``ok`` or ``error`` outcome; False (nothing added) for
        one with no result (expired, cancelled)."""
        provider, model, tag = self.provider, self.model, self.tag
        if outcome.kind == "ok":
            result: ChatResult | EmbedResult
            if outcome.embedded is not None:
                result = embed_result_of(outcome, provider, model)
            else:
                result = result_of(outcome, provider, model)
            self.chunk.append(
                render_ok(
                    custom_id, result, created=self.created, endpoint=self.endpoint, extra=extra
                )
            )
            usage = result.usage
            self._count(
                ok=1,
                calls=1,
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                batch_lines=1,
            )
            self.records.append(RecordUsage(provider, model, usage, tag=tag, batch=True))
            self.records.append(RecordCall(provider, model, True, 1, tag=tag))
            return True
        if outcome.kind == "error":
            data, code = render_failure(custom_id, lineno, outcome, provider, model)
            self.chunk.append(data)
            self._count(failed=1, calls=1, batch_lines=1)
            self.errors[code] = self.errors.get(code, 0) + 1
            self.records.append(RecordCall(provider, model, False, 1, tag=tag))
            return True
        return False

    def _count(self, **more: int) -> None:
        for key, n in more.items():
            self.counts[key] = self.counts.get(key, 0) + n
