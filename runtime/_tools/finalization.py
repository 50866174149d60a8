"""Finalization of one attempt's output: tool calls recovered, repaired and checked.

:func:`finalize` runs at the end of each attempt, on the assembled
:class:`~sluice._protocols.base.AttemptOutput`. It is pure apart from the random source used for
missing call ids (pass a seeded ``random.Random`` for reproducible ids).

* A forced call (a :class:`~sluice._tools.preparation.ForcePlan`) comes back as JSON text: it is
  repaired, unwrapped (``item``, lists), completed with the fallback tool where the envelope is
  missing, and replaced by ordinary :class:`~sluice._messages.ToolCall` parts; text and reasoning
  are dropped and the finish reason becomes ``tool_calls``. If the model called a tool natively
  anyway, its calls are used as they are.
* Native tool calls get missing or repeated ids replaced and their arguments repaired (empty
  means ``{}``; broken and double-encoded JSON is fixed and written back compactly; arguments
  that were valid JSON keep their text).
* Then the reply is checked against the request: ``tool_choice``, the tool names (unknown names
  are caught in every mode), the number of calls, the arguments. A broken contract raises
  :class:`~sluice._errors.ToolCallError`; a reply with neither text nor tool calls too.

The result is a new ``AttemptOutput`` (or the same one when nothing changed).
"""

from __future__ import annotations

import json
import random
import string
from typing import Any, Literal, TypeAlias

import attrs
import orjson

from .._capabilities import ToolChoiceMode, override_hint
from .._errors import ToolCallError
from .._messages import ContentPart, Message, SpecificTool, ToolCall
from .._protocols.base import AttemptOutput
from .preparation import ForcePlan, Prepared, reply_shape
from .repair import RepairError, repair_arguments, repair_json

__all__ = ["ToolCallReason", "compact_json", "finalize", "new_call_id", "render_reply"]

ToolCallReason: TypeAlias = Literal[
    "empty_reply",
    "unparseable",
    "invalid_call",
    "malformed_arguments",
    "missing_arguments",
    "unknown_tool",
    "tool_choice_none",
    "wrong_tool",
    "no_tool_call",
    "too_many_calls",
    "truncated",
]

_ID_ALPHABET = string.ascii_lowercase + string.digits


def new_call_id(rng: random.Random) -> str:
    """A call id in the usual form: ``call_`` and 8 lowercase letters or digits."""
    return "call_" + "".join(rng.choice(_ID_ALPHABET) for _ in range(8))


def compact_json(value: Any) -> str:
    """``value`` as compact JSON text (no spaces, key order and non-ASCII kept)."""
    try:
        return orjson.dumps(value).decode()
    except TypeError:  # integers beyond 64 bits
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def render_reply(message: Message) -> str:
    """The reply as text a model can read back: its text, then one JSON line per tool call."""
    lines = [message.text] if message.text.strip() else []
    lines += [compact_json({"name": c.name, "arguments": c.arguments}) for c in message.tool_calls]
    return "\n".join(lines)


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "list" if isinstance(value, list) else "object"


@attrs.define
class _Context:
    output: AttemptOutput
    prepared: Prepared
    rng: random.Random

    def error(
        self,
        reason: ToolCallReason,
        message: str,
        feedback: str,
        *,
        tool: str | None = None,
        fix: str = "",
        correctable: bool = True,
    ) -> ToolCallError:
        request = self.prepared.original
        provider, _, model = request.model.partition(":")
        return ToolCallError(
            f"{message}\n{fix}" if fix else message,
            provider=provider,
            model=model,
            reason=reason,
            tool_name=tool,
            generated=render_reply(self.output.message),
            feedback=feedback,
            available_tools=self.prepared.tool_names,
            correctable=correctable,
        )

    def truncated(self, where: str) -> ToolCallError:
        limit = self.prepared.original.max_tokens
        more = f"more than {limit}" if limit else "a larger limit"
        return self.error(
            "truncated",
            f"the reply was cut off by the token limit (finish_reason 'length') {where}",
            "Your reply was cut off before it was complete.",
            fix=f"Allow longer replies: ChatRequest(..., max_tokens=<{more}>)",
            correctable=False,
        )


def _choice_fix(ctx: _Context, mode: ToolChoiceMode) -> str:
    """How to stop this failure: emulation (if it was sent natively) or turning emulation on."""
    prepared = ctx.prepared
    choice = prepared.original.tool_choice
    if choice is not None and prepared.plan is None and prepared.capabilities.supports(choice):
        return override_hint(prepared.original.model, prepared.capabilities, mode)
    if mode != "none" and prepared.plan is None and not prepared.options.emulate:
        return "To force the call through structured output: ToolOptions(emulate=True)"
    return ""


def _unwrap_item(value: Any) -> Any:
    if isinstance(value, dict) and "name" not in value and set(value) == {"item"}:
        inner = value["item"]
        if isinstance(inner, dict | list):
            return inner
    return value


def _forced_call(ctx: _Context, plan: ForcePlan, element: Any) -> ToolCall:
    """One call from one element of a forced reply, the fallback rules applied."""
    fallback = plan.fallback_tool or (plan.tools[0] if len(plan.tools) == 1 else None)
    shape = reply_shape(plan)
    element = _unwrap_item(element)
    if not isinstance(element, dict):
        if fallback is None:
            raise ctx.error(
                "invalid_call",
                f"the forced reply is a {_kind(element)}, not a tool call",
                f"Your reply was a JSON {_kind(element)}, not a tool call. Reply in this form: "
                f"{shape}",
            )
        element = {"name": fallback, "parameters": element}
    has_params = "parameters" in element or "arguments" in element
    name = element.get("name")
    if fallback is not None and not has_params and name not in plan.tools:
        # No envelope: the whole object is the fallback tool's arguments.
        name, params = fallback, element
    else:
        if name is None or name == "":
            if fallback is None:
                raise ctx.error(
                    "invalid_call",
                    "the forced reply names no tool",
                    f"Your reply did not name a tool. Reply in this form: {shape}",
                )
            name = fallback
        if not isinstance(name, str):
            raise ctx.error(
                "invalid_call",
                f"the forced reply's tool name is a {_kind(name)}",
                f"The tool name must be a string. Reply in this form: {shape}",
            )
        if has_params:
            params = element["parameters"] if "parameters" in element else element["arguments"]
        else:
            params = {k: v for k, v in element.items() if k != "name"}
    if isinstance(params, str):
        try:
            params = repair_arguments(params).value
        except RepairError as exc:
            raise _malformed(ctx, name, str(exc)) from None
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise _malformed(ctx, name, f"they are a {_kind(params)}")
    if plan.strict:
        params = _drop_unsent_optionals(ctx, name, params)
    return ToolCall(id=new_call_id(ctx.rng), name=name, arguments=compact_json(params))


def _drop_unsent_optionals(ctx: _Context, name: str, params: dict[str, Any]) -> dict[str, Any]:
    """Strict schemas make optional parameters required-but-nullable: null means not given."""
    tool = next((t for t in ctx.prepared.original.tools if t.name == name), None)
    if tool is None:
        return params
    required = set(tool.parameters.get("required") or ())
    return {k: v for k, v in params.items() if v is not None or k in required}


def _malformed(ctx: _Context, name: str, detail: str) -> ToolCallError:
    return ctx.error(
        "malformed_arguments",
        f"the arguments of the call to {name!r} are not a JSON object: {detail}",
        f"The arguments of your call to {name!r} must be one JSON object ({detail}).",
        tool=name,
    )


def _forced_calls(ctx: _Context, plan: ForcePlan) -> list[ToolCall]:
    output = ctx.output
    text = output.message.text
    try:
        repaired = repair_json(text)
    except RepairError as exc:
        raise ctx.error(
            "unparseable",
            f"the reply to a forced tool call holds no JSON ({exc})",
            f"Your reply was not JSON. Reply with JSON only, in this form: {reply_shape(plan)}",
        ) from None
    if output.finish_reason == "length" and repaired.truncated:
        raise ctx.truncated("inside the tool call")
    value = _unwrap_item(repaired.value)
    elements = value if isinstance(value, list) else [value]
    if not elements:
        raise ctx.error(
            "no_tool_call",
            "the reply to a forced tool call is an empty list",
            f"Your reply held no tool call. Reply in this form: {reply_shape(plan)}",
        )
    return [_forced_call(ctx, plan, e) for e in elements]


def _strict_arguments(text: str) -> None:
    """Check arguments without repairing them (empty still means ``{}``)."""
    if not text.strip():
        return
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        raise RepairError("they are not valid JSON") from None
    if not isinstance(value, dict):
        raise RepairError(f"they are a {_kind(value)}")


_Problems: TypeAlias = list[tuple[ToolCall, ToolCallError]]


def _native_calls(ctx: _Context) -> tuple[tuple[ContentPart, ...], _Problems]:
    """The content with each tool call's id and arguments repaired, and the calls that failed."""
    output = ctx.output
    repair = ctx.prepared.options.repair
    seen: set[str] = set()
    content: list[ContentPart] = []
    problems: _Problems = []
    for part in output.message.content:
        if not isinstance(part, ToolCall):
            content.append(part)
            continue
        call = part
        if repair and (not call.id or call.id in seen):
            call = attrs.evolve(call, id=new_call_id(ctx.rng))
        seen.add(call.id)
        try:
            if not repair:
                _strict_arguments(call.arguments)
                content.append(call)
                continue
            repaired = repair_arguments(call.arguments)
        except RepairError as exc:
            problems.append((call, _malformed(ctx, call.name, str(exc))))
            content.append(call)
            continue
        if repaired.repairs:
            if output.finish_reason == "length" and repaired.truncated:
                raise ctx.truncated(f"inside the arguments of {call.name!r}")
            call = attrs.evolve(call, arguments=compact_json(repaired.value))
        content.append(call)
    return tuple(content), problems


def _check(ctx: _Context, calls: list[ToolCall], problems: _Problems) -> None:
    prepared = ctx.prepared
    choice = prepared.original.tool_choice
    names = prepared.tool_names
    listed = ", ".join(names) or "none"
    if choice == "none" and calls:
        raise ctx.error(
            "tool_choice_none",
            f"tool_choice was 'none' but the model called {calls[0].name!r}",
            "Do not call any tool in this reply; answer in text.",
            tool=calls[0].name,
            fix=_choice_fix(ctx, "none"),
        )
    if isinstance(choice, SpecificTool):
        wrong = next((c for c in calls if c.name != choice.name), None)
        if not calls or wrong is not None:
            got = f"called {wrong.name!r} instead" if wrong else "made no tool call"
            raise ctx.error(
                "wrong_tool" if wrong else "no_tool_call",
                f"tool_choice named the tool {choice.name!r} but the model {got}",
                f"You must call the tool {choice.name!r}"
                + (f", not {wrong.name!r}." if wrong else "."),
                tool=wrong.name if wrong else None,
                fix=_choice_fix(ctx, "specific"),
            )
    if choice == "required" and not calls:
        raise ctx.error(
            "no_tool_call",
            "tool_choice was 'required' but the model made no tool call",
            "You must call one of the tools.",
            fix=_choice_fix(ctx, "required"),
        )
    unknown = next((c for c in calls if c.name not in names), None)
    if unknown is not None:
        raise ctx.error(
            "unknown_tool",
            f"the model called {unknown.name!r}, which is not one of the request's tools "
            f"({listed})",
            f"There is no tool named {unknown.name!r}.",
            tool=unknown.name,
        )
    if len(calls) > 1 and not prepared.parallel:
        raise ctx.error(
            "too_many_calls",
            f"the model made {len(calls)} tool calls but only one is allowed per reply",
            f"Call exactly one tool per reply; you made {len(calls)} calls.",
            fix="To accept several: ChatRequest(..., parallel_tool_calls=True); "
            "to keep only the first: ToolOptions(keep_first_call=True)",
        )
    if problems:
        raise problems[0][1]
    for call in calls:
        _check_required(ctx, call)


def _check_required(ctx: _Context, call: ToolCall) -> None:
    tool = next(t for t in ctx.prepared.original.tools if t.name == call.name)
    required = tool.parameters.get("required")
    if not isinstance(required, list | tuple):
        return
    arguments = call.parsed_arguments()
    missing = [r for r in required if isinstance(r, str) and r not in arguments]
    if missing:
        quoted = ", ".join(repr(m) for m in missing)
        raise ctx.error(
            "missing_arguments",
            f"the call to {call.name!r} lacks required argument(s) {quoted}",
            f"Your call to {call.name!r} lacks required argument(s) {quoted}.",
            tool=call.name,
        )


def _check_empty(ctx: _Context) -> bool:
    """Whether an empty reply is acceptable as it is; raises when it is not."""
    output = ctx.output
    if output.finish_reason == "content_filter":
        return True
    forced = isinstance(ctx.prepared.original.tool_choice, SpecificTool) or (
        ctx.prepared.original.tool_choice == "required"
    )
    if output.finish_reason == "length":
        if forced:
            raise ctx.truncated("before any tool call")
        return True
    raise ctx.error("empty_reply", "the model returned an empty reply", "Your reply was empty.")


def finalize(
    output: AttemptOutput, prepared: Prepared, *, rng: random.Random | None = None
) -> AttemptOutput:
    """The attempt's output with its tool calls recovered, repaired and checked.

    ``rng`` draws ids for calls that lack one (a fresh system random source by default).

    Raises:
        ToolCallError: the reply is empty, cut off inside a tool call, or breaks the request's
            tool contract; ``reason`` says which, ``feedback`` says it to the model.
    """
    ctx = _Context(output, prepared, rng or random.SystemRandom())
    message = output.message
    has_calls = bool(message.tool_calls)
    if not has_calls and not message.text.strip() and _check_empty(ctx):
        return output
    plan = prepared.plan
    problems: _Problems = []
    finish = output.finish_reason
    if plan is not None and not has_calls:
        calls = _forced_calls(ctx, plan)
        content: tuple[ContentPart, ...] = tuple(calls)
        finish = "tool_calls"
    elif has_calls:
        content, problems = _native_calls(ctx)
        calls = [p for p in content if isinstance(p, ToolCall)]
    else:
        content, calls = message.content, []
    if len(calls) > 1 and prepared.options.keep_first_call:
        first = calls[0]
        content = tuple(p for p in content if not isinstance(p, ToolCall) or p is first)
        problems = [p for p in problems if p[0] is first]
        calls = [first]
    _check(ctx, calls, problems)
    if content == message.content and finish == output.finish_reason:
        return output
    return attrs.evolve(output, message=Message("assistant", content), finish_reason=finish)
