"""The data model of an embedding call: what a caller asks (:class:`EmbedRequest`) and gets back
(:class:`EmbedResult`), and what a protocol codec decodes from one reply (:class:`EmbedOutput`).

An embedding call goes through the same actors as a chat call: the RateLimiter admits it on its
estimated input tokens (there is no output), the ProviderActor sends one unstreamed request,
the Supervisor retries and fails over as for chat, and the TokenLedger books its input tokens at
the model's embedding price. Vectors are always handed back as floats, whatever the wire carried
(``encoding_format="base64"`` is a wire choice: smaller replies, decoded on arrival).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

import attrs

from ._messages import Deadlines, Timings, Usage, split_model
from ._record import Record

__all__ = ["EmbedOutput", "EmbedRequest", "EmbedResult", "EncodingFormat"]

EncodingFormat = Literal["float", "base64"]


def _inputs(value: str | Iterable[str]) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    return tuple(value)


def _fallbacks(value: str | Iterable[str]) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)


@attrs.frozen(kw_only=True, repr=False)
class EmbedRequest(Record):
    """One embedding call: every text of ``input`` gets one vector, in order.

    ``model`` is ``provider:model``. ``input`` accepts one string or a sequence of strings.
    The fields after ``encoding_format`` mean what they mean on :class:`~sluice.ChatRequest`.
    """

    model: str
    input: tuple[str, ...] = attrs.field(converter=_inputs)
    dimensions: int | None = None
    """Ask for vectors of this length (models that can shorten theirs); None: the model's own."""
    encoding_format: EncodingFormat | None = None
    """How the provider is asked to send the vectors (``base64``: packed float32, a quarter of
    the bytes); None leaves it to the provider. The result holds floats either way."""
    tag: str | None = None
    priority: Literal["interactive", "batch", "background"] = "interactive"
    deadlines: Deadlines = Deadlines()
    fallbacks: tuple[str, ...] = attrs.field(default=(), converter=_fallbacks)
    failure_mode: Literal["fail_fast", "wait"] | None = None
    max_wait: float | None = None
    retry_visible: bool = True
    extra_body: Mapping[str, Any] = attrs.field(factory=dict)
    extra_headers: Mapping[str, str] = attrs.field(factory=dict)
    response_cache: bool | None = None

    @property
    def provider(self) -> str:
        return split_model(self.model)[0]

    @property
    def model_name(self) -> str:
        return split_model(self.model)[1]


@attrs.frozen(kw_only=True, repr=False)
class EmbedOutput(Record):
    """What one successful embedding reply held, as a codec decodes it."""

    vectors: tuple[Sequence[float], ...]
    """One vector per input, in input order (a codec orders them by the reply's ``index``)."""
    usage: Usage | None = None
    """Input tokens as the provider counted them; None when the reply gives no count."""
    response_id: str | None = None


@attrs.frozen(kw_only=True, repr=False)
class EmbedResult(Record):
    """The finished embedding call."""

    call_id: str
    provider: str
    model: str
    vectors: tuple[Sequence[float], ...]
    """One vector per input of the request, in the request's order."""
    usage: Usage = Usage()
    attempts: int = 1
    timings: Timings = Timings()
    request_id: str | None = None
    models_tried: tuple[str, ...] = ()
    cached: bool = False
