"""Rows of a table to chat calls, and call outcomes to columns, for :mod:`sluice.ray`. Pure: no
I/O, no clock, no Ray, no Arrow.

A row becomes one :class:`~sluice._messages.ChatRequest` in one of three ways
(:class:`Calls`): the text of a prompt column, a ``str.format`` template over the row's
columns, or an OpenAI Batch-format ``body`` column (read by the same parser as ``sluice
batch``). Every row also gets a key from what it asks (model, parameters and content, never
its position), so a rerun can tell which rows an earlier run already answered, wherever they
sit in the input.

A row that cannot become a request (a missing column, a malformed body) is not an exception:
it is a :class:`BadRow`, which becomes an error row like a failed call does.
"""

from __future__ import annotations

import hashlib
import string
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs
import orjson

from ._errors import ConfigError, SluiceError
from ._messages import ChatRequest
from ._openai_format import parse_chat_body
from ._record import Record

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ._ledger.prices import PriceTable
    from ._messages import ChatResult

__all__ = ["OUTPUT_COLUMNS", "BadRow", "ColumnsBuilder", "Calls", "row_key"]

OUTPUT_COLUMNS: tuple[str, ...] = (
    "sluice_key",
    "text",
    "finish_reason",
    "tool_calls",
    "input_tokens",
    "output_tokens",
    "cost_usd",
    "model",
    "error_type",
    "error_message",
)
"""The columns every output row gets (after :attr:`Calls.prefix`), in this order."""

_SET_BY_US = frozenset({"model", "messages"})
_REQUEST_FIELDS = frozenset(a.name for a in attrs.fields(ChatRequest)) - _SET_BY_US
_KEY_OPTIONS = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY
_KEY_VERSION = 1
"""Changes only when the key of a row would change meaning; keys of another version never
match."""


def _one_source(instance: Calls, _attribute: Any, _value: Any) -> None:
    given = [n for n in ("prompt", "template", "body") if getattr(instance, n) is not None]
    if len(given) != 1:
        raise ValueError(
            "say how a row becomes a call with exactly one of prompt= (a column of text), "
            f"template= (text with {{column}} fields) or body= (a column of OpenAI request "
            f"bodies); got {', '.join(given) or 'none'}"
        )
    if instance.model is None and instance.body is None:
        raise ValueError("model= ('provider:model') is needed unless rows carry a body column")


def _check_params(_instance: Calls, _attribute: Any, value: Mapping[str, Any]) -> None:
    unknown = sorted(set(value) - _REQUEST_FIELDS)
    if unknown:
        raise ValueError(
            f"params {unknown} are not ChatRequest fields (known: {sorted(_REQUEST_FIELDS)})"
        )


@attrs.frozen(kw_only=True, repr=False)
class Calls(Record):
    """How each row of a table becomes a call, and where its answer goes.

    Exactly one of ``prompt``, ``template`` and ``body`` says where a row's request comes from.
    The calls are batch work: ``priority="batch"`` and ``failure_mode="wait"``, so a call waits
    out 429s, cooldowns and outages and ends only with an answer, an error retrying cannot fix,
    or ``max_wait``; ``params`` may set any other :class:`~sluice.ChatRequest` field.
    """

    model: str | None = attrs.field(default=None, validator=_one_source)
    """``provider:model`` of every call; with ``body``, it replaces the body's own ``model``
    (without it each body's model must be written ``provider:model``)."""
    prompt: str | None = None
    """A column whose text is the user message."""
    template: str | None = None
    """A ``str.format`` text whose ``{fields}`` name columns: ``"Summarize: {article}"``."""
    body: str | None = None
    """A column of OpenAI chat-completions bodies (objects, or their JSON text), as in an
    OpenAI Batch input line's ``body``."""
    system: str | None = None
    """A system message put before the prompt or template text (not used with ``body``)."""
    params: Mapping[str, Any] = attrs.field(factory=dict, validator=_check_params)
    """More request fields for every call (``temperature``, ``max_tokens``, ``tag``,
    ``deadlines``, ...); with ``body`` they win over the body's."""
    max_wait: float | None = None
    """Seconds a call may wait (through 429s, cooldowns, outages) before it ends as an error
    row; None: no limit but the call's deadlines."""
    stream: bool = True
    """Stream each reply (sluice's default); False asks for whole bodies."""
    raise_errors: bool = False
    """A failed call fails the batch's task (Ray then retries it) instead of becoming an
    error row."""
    prefix: str = ""
    """Put before every output column's name, when an input column already has one."""

    def columns_used(self) -> tuple[str, ...]:
        """The input columns a row's request is built from."""
        if self.prompt is not None:
            return (self.prompt,)
        if self.body is not None:
            return (self.body,)
        assert self.template is not None
        return _template_fields(self.template)

    def output_names(self) -> tuple[str, ...]:
        return tuple(self.prefix + name for name in OUTPUT_COLUMNS)

    def build(self, row: Mapping[str, Any]) -> tuple[str, ChatRequest | BadRow]:
        """The row's key and its request (or why it has none)."""
        content = self._content(row)
        key = row_key(self, content)
        if isinstance(content, BadRow):
            return key, content
        try:
            return key, self._request(content)
        except (ConfigError, TypeError, ValueError) as exc:
            return key, BadRow(f"{exc}")

    def _content(self, row: Mapping[str, Any]) -> Any:
        if self.prompt is not None:
            text = row.get(self.prompt)
            if not isinstance(text, str):
                return BadRow(f"column {self.prompt!r} holds {type(text).__name__}, not text")
            return text
        if self.body is not None:
            body = row.get(self.body)
            if isinstance(body, str | bytes):
                try:
                    return orjson.loads(body)
                except orjson.JSONDecodeError as exc:
                    return BadRow(f"column {self.body!r} is not JSON: {exc}")
            return body
        assert self.template is not None
        try:
            return self.template.format_map(row)
        except (KeyError, IndexError, ValueError) as exc:
            return BadRow(f"template: {exc!r} (the row's columns: {sorted(row)})")

    def _request(self, content: Any) -> ChatRequest:
        batch = {"priority": "batch", "failure_mode": "wait", "max_wait": self.max_wait}
        fields = {**batch, **self.params}
        if self.body is not None:
            request = parse_chat_body(content, model=self.model, stream=self.stream)
            return attrs.evolve(request, **fields)
        assert self.model is not None
        messages: list[dict[str, str]] = []
        if self.system is not None:
            messages.append({"role": "system", "content": self.system})
        messages.append({"role": "user", "content": content})
        return ChatRequest(model=self.model, messages=messages, stream=self.stream, **fields)


def _template_fields(template: str) -> tuple[str, ...]:
    names: list[str] = []
    for _text, field, _spec, _conversion in string.Formatter().parse(template):
        if field:
            name = field.split(".", 1)[0].split("[", 1)[0]
            if name and name not in names:
                names.append(name)
    return tuple(names)


@attrs.frozen(repr=False)
class BadRow(Record):
    """A row that cannot become a request: it becomes an error row, never a call."""

    message: str


def _not_json(value: Any) -> Any:
    tolist = getattr(value, "tolist", None)
    return tolist() if callable(tolist) else str(value)


def row_key(calls: Calls, content: Any) -> str:
    """The key of a row asking for ``content`` under ``calls``: the same model, system message,
    parameters and content give the same key on every machine and in every run.

    A row's position, its other columns and how its calls are run (``max_wait``, streaming)
    are not part of it. A row that cannot be read keys on what could be read of it.
    """
    asked = {
        "v": _KEY_VERSION,
        "model": calls.model,
        "system": calls.system,
        "params": calls.params,
        "content": content.message if isinstance(content, BadRow) else content,
    }
    data = orjson.dumps(asked, default=_not_json, option=_KEY_OPTIONS)
    return hashlib.sha256(data).hexdigest()[:32]


def _tool_calls_json(result: ChatResult) -> str | None:
    if not result.tool_calls:
        return None
    calls = [
        {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
        for c in result.tool_calls
    ]
    return orjson.dumps(calls).decode()


class ColumnsBuilder:
    """The output columns of one batch of rows, filled in any order as outcomes arrive."""

    def __init__(self, keys: Sequence[str], prices: PriceTable) -> None:
        n = len(keys)
        self._prices = prices
        self.columns: dict[str, list[Any]] = {name: [None] * n for name in OUTPUT_COLUMNS}
        self.columns["sluice_key"] = list(keys)
        self.answered = self.failed = self.tokens = self.cost_micros = 0
        self.first_error: SluiceError | None = None
        """The first failure in the row order, as an exception (a bad row as ConfigError)."""
        self._first_at = n

    def answer(self, index: int, result: ChatResult) -> None:
        c = self.columns
        usage = result.usage
        cost = self._prices.cost(result.provider, result.model, usage)
        c["text"][index] = result.text
        c["finish_reason"][index] = result.finish_reason
        c["tool_calls"][index] = _tool_calls_json(result)
        c["input_tokens"][index] = usage.input_tokens
        c["output_tokens"][index] = usage.output_tokens
        c["cost_usd"][index] = None if cost is None else cost / 1_000_000
        c["model"][index] = f"{result.provider}:{result.model}"
        self.answered += 1
        self.tokens += usage.total_tokens
        self.cost_micros += cost or 0

    def fail(self, index: int, error: SluiceError | BadRow) -> None:
        if isinstance(error, BadRow):
            kind, message = "BadRow", error.message
        else:
            kind, message = type(error).__name__, str(error)
        self.columns["error_type"][index] = kind
        self.columns["error_message"][index] = message
        self.failed += 1
        if index < self._first_at:
            self._first_at = index
            self.first_error = ConfigError(message) if isinstance(error, BadRow) else error
