"""Preparation of a request's tools for one backend: send as is, downgrade, or force.

:func:`prepare` runs once per call, at submit. It is pure and deterministic: the same request,
capabilities and options always give an equal :class:`Prepared`. What it decides, for a request
with tools (a request without tools only loses a dangling ``tool_choice``/``parallel_tool_calls``):

* ``tool_choice`` unset or honoured by the backend: sent as is.
* ``auto`` not honoured: ``tool_choice`` is left out (the backend's default is auto anyway).
* ``none`` not honoured: the tools are left out, so no call can be made.
* a named tool not honoured but ``required`` is: only that tool is sent, with ``required``.
* ``required`` (or a named tool) not honoured: FORCED. Tools, ``tool_choice`` and
  ``parallel_tool_calls`` are removed; the reply is constrained by the tool-union schema
  (``json_schema``), or asked for as any JSON object (``json_object``), or, on a backend with
  neither structured output nor native tools, asked for in the prompt; a system instruction names
  the tools and the reply's form. :func:`~sluice._tools.finalization.finalize` turns the reply back
  into tool calls. A request that brings its own ``response_format``, or options with
  ``emulate=False``, is downgraded instead: ``tool_choice`` left out and the requirement stated
  in the system instruction, checked when the reply arrives.

Several calls per reply are allowed when the request says ``parallel_tool_calls=True``, or leaves
it unset while not forcing a call (``ToolOptions.allow_parallel`` decides when it does). Where
the backend accepts the parameter, a forced choice that allows one call only sends
``parallel_tool_calls=false``; allowing several is the backends' default, so a request that left
the parameter unset and allows them goes without it (a proxy's request goes as it came).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

import attrs
import orjson

from .._capabilities import ToolCapabilities, ToolOptions, choice_mode
from .._errors import ConfigError
from .._messages import ChatRequest, Message, ResponseFormat, SpecificTool, TextPart, Tool
from .schema import tool_union_schema, union_response_format

if TYPE_CHECKING:
    from .._messages import ToolChoice

__all__ = ["ForcePlan", "Prepared", "prepare", "reply_shape"]


@attrs.frozen(kw_only=True)
class ForcePlan:
    """How a forced tool call was asked for, and so how to read the reply back."""

    method: Literal["json_schema", "json_object", "prompt"]
    """``json_schema``: the reply is constrained by :attr:`schema`. ``json_object``: any JSON
    object, the form given in the instruction. ``prompt``: the instruction alone."""
    tools: tuple[str, ...]
    """The tools the reply may call, in declaration order."""
    fallback_tool: str | None
    """The tool a reply without a usable name is taken to call."""
    parallel: bool
    """Whether the reply may hold several calls (a list)."""
    wrapped: bool
    """Whether the schema wraps the call (or list) in ``{"item": ...}``."""
    strict: bool
    """Whether the schema is in strict form (optional parameters sent as null)."""
    schema: Mapping[str, Any]
    """The tool-union schema."""


@attrs.frozen(kw_only=True)
class Prepared:
    """A request ready to send, and what finalization and corrections need to know about it."""

    request: ChatRequest
    """The request to send (for every attempt; corrections are appended to its messages)."""
    original: ChatRequest
    """The request as the caller gave it."""
    capabilities: ToolCapabilities
    """The capabilities used, with the call's own override applied."""
    options: ToolOptions
    plan: ForcePlan | None = None
    """Set when the tool call is forced through the reply's text."""
    parallel: bool = True
    """Whether a reply may hold several tool calls; when false, several are an error (or only
    the first is kept, with ``options.keep_first_call``)."""
    notes: tuple[str, ...] = ()
    """What preparation changed, in words, for logs."""

    @property
    def tool_names(self) -> tuple[str, ...]:
        """The caller's tool names in declaration order (whether or not they were sent)."""
        return tuple(t.name for t in self.original.tools)


def _validate(request: ChatRequest, options: ToolOptions) -> None:
    names = [t.name for t in request.tools]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ConfigError(f"tool names must be unique; repeated: {', '.join(duplicates)}")
    listed = ", ".join(names) or "none"
    choice = request.tool_choice
    if isinstance(choice, SpecificTool) and choice.name not in names:
        raise ConfigError(
            f"tool_choice names the tool {choice.name!r}, which is not among the request's "
            f"tools ({listed})"
        )
    if choice == "required" and not names:
        raise ConfigError("tool_choice='required' needs at least one tool in the request")
    if options.fallback_tool is not None and options.fallback_tool not in names:
        raise ConfigError(
            f"fallback_tool {options.fallback_tool!r} is not among the request's tools ({listed})"
        )


def _with_system(messages: tuple[Message, ...], text: str) -> tuple[Message, ...]:
    """The messages with ``text`` added to the leading system message (or as a new one)."""
    if messages and messages[0].role == "system":
        first = messages[0]
        if all(isinstance(p, TextPart) for p in first.content):
            merged = Message.system(f"{first.text}\n\n{text}" if first.text else text)
        else:
            merged = Message("system", (*first.content, TextPart(text)))
        return (merged, *messages[1:])
    return (Message.system(text), *messages)


def reply_shape(plan: ForcePlan) -> str:
    """The form a forced reply must take, as shown to the model."""
    name = f'"{plan.tools[0]}"' if len(plan.tools) == 1 else '"<tool name>"'
    call = f'{{"name": {name}, "parameters": {{<the arguments>}}}}'
    if plan.parallel and len(plan.tools) > 1:
        call = f"[{call}, ...]"
    return f'{{"item": {call}}}' if plan.wrapped else call


def _tool_lines(tools: tuple[Tool, ...], *, with_schema: bool) -> list[str]:
    lines = []
    for tool in tools:
        line = f"- {tool.name}" + (f": {tool.description}" if tool.description else "")
        if with_schema:
            line += "\n  parameters (JSON schema): " + orjson.dumps(tool.parameters).decode()
        lines.append(line)
    return lines


def _force_instruction(plan: ForcePlan, tools: tuple[Tool, ...], specific: bool) -> str:
    if specific:
        must = f"You must call the tool {plan.tools[0]!r}."
    elif plan.parallel:
        must = "You must call one or more of the tools below."
    else:
        must = "You must call one of the tools below."
    return "\n".join(
        [
            f"{must} Tools cannot be called directly here: to call one, reply with JSON only, "
            "no other text, in this form:",
            reply_shape(plan),
            "Tools:",
            *_tool_lines(tools, with_schema=plan.method != "json_schema"),
        ]
    )


def _downgrade_instruction(request: ChatRequest) -> str:
    choice = request.tool_choice
    if isinstance(choice, SpecificTool):
        return f"You must call the tool {choice.name!r} in this reply."
    return "You must call one of the available tools in this reply."


def prepare(
    request: ChatRequest, caps: ToolCapabilities, options: ToolOptions | None = None
) -> Prepared:
    """Decide how ``request``'s tools go to a backend with capabilities ``caps``.

    ``caps`` should already hold the provider's and the model's overrides; the call's own
    ``options.capabilities`` is applied here. See the module docstring for the decisions.

    Raises:
        ConfigError: repeated tool names, a ``tool_choice`` or ``fallback_tool`` naming no tool
            of the request, ``required`` without tools, or a tool schema that cannot be used
            for forcing (:class:`~sluice._tools.schema.ToolSchemaError`).
    """
    options = options or ToolOptions()
    caps = caps.merged(options.capabilities)
    _validate(request, options)
    choice = request.tool_choice
    forced = choice == "required" or isinstance(choice, SpecificTool)
    explicit = request.parallel_tool_calls
    parallel = explicit if explicit is not None else (options.allow_parallel if forced else True)
    parallel = parallel and not options.keep_first_call
    base = Prepared(
        request=request, original=request, capabilities=caps, options=options, parallel=parallel
    )
    notes: list[str] = []

    def done(plan: ForcePlan | None = None, **changes: Any) -> Prepared:
        return attrs.evolve(
            base, request=attrs.evolve(request, **changes), plan=plan, notes=tuple(notes)
        )

    if not request.tools:
        if choice is not None or explicit is not None:
            notes.append("tool_choice and parallel_tool_calls left out: the request has no tools")
        return done(tool_choice=None, parallel_tool_calls=None)

    # A forced choice sends the decision when it holds the reply to one call; allowing several
    # is every backend's default, so it goes unsaid unless the caller said it.
    decided = parallel if forced and (explicit is not None or not parallel) else explicit
    parallel_param = decided if caps.parallel_calls and caps.native_tools else None
    if explicit is not None and parallel_param is None:
        notes.append("parallel_tool_calls left out: the backend does not accept it")

    if not forced:
        if not caps.native_tools:
            notes.append("tools left out: the backend has no native tool calling")
            return done(tools=(), tool_choice=None, parallel_tool_calls=None)
        if choice is None or caps.supports(choice):
            return done(parallel_tool_calls=parallel_param)
        if choice == "auto":
            notes.append("tool_choice 'auto' left out: the backend does not honour it")
            return done(tool_choice=None, parallel_tool_calls=parallel_param)
        notes.append("tools left out for tool_choice 'none': the backend does not honour it")
        return done(tools=(), tool_choice=None, parallel_tool_calls=None)

    assert choice is not None
    if caps.supports(choice):
        return done(parallel_tool_calls=parallel_param)
    if isinstance(choice, SpecificTool) and caps.supports("required"):
        notes.append(
            f"only tool {choice.name!r} sent, with tool_choice 'required': "
            "the backend does not honour a named tool"
        )
        only = tuple(t for t in request.tools if t.name == choice.name)
        return done(tools=only, tool_choice="required", parallel_tool_calls=parallel_param)

    method = _emulation_method(caps)
    if not options.emulate or request.response_format is not None or method is None:
        note, changes = _not_emulated(request, choice, caps, options, method, parallel_param)
        notes.append(note)
        return done(**changes)
    plan, changes = _emulated(request, choice, caps, options, method, parallel)
    notes.append(
        f"tool_choice {choice_mode(choice)!r} forced through "
        + ("the prompt" if method == "prompt" else f"structured output ({method})")
        + ": the backend does not honour it"
    )
    return done(plan, **changes)


def _emulation_method(
    caps: ToolCapabilities,
) -> Literal["json_schema", "json_object", "prompt"] | None:
    """How a forced choice can be emulated: the backend's structured output, else the prompt
    for a backend without native tools (None: a backend with tools but no structured output
    cannot be made to call one)."""
    if caps.structured_output != "none":
        return caps.structured_output
    return None if caps.native_tools else "prompt"


def _not_emulated(
    request: ChatRequest,
    choice: ToolChoice,
    caps: ToolCapabilities,
    options: ToolOptions,
    method: str | None,
    parallel_param: bool | None,
) -> tuple[str, dict[str, Any]]:
    """A forced choice the backend does not honour, left out (not emulated): the note that
    says why, and the request's changes (the reply is checked when it arrives)."""
    why = (
        "emulation is off"
        if not options.emulate
        else "the request has its own response_format"
        if request.response_format is not None
        else "the backend has no structured output"
    )
    note = (
        f"tool_choice {choice_mode(choice)!r} left out and not emulated ({why}): "
        "the reply is checked when it arrives"
    )
    messages = request.messages
    if options.instruct:
        messages = _with_system(messages, _downgrade_instruction(request))
    if not caps.native_tools:
        return note, {
            "tools": (),
            "tool_choice": None,
            "parallel_tool_calls": None,
            "messages": messages,
        }
    return note, {"tool_choice": None, "parallel_tool_calls": parallel_param, "messages": messages}


def _emulated(
    request: ChatRequest,
    choice: ToolChoice,
    caps: ToolCapabilities,
    options: ToolOptions,
    method: Literal["json_schema", "json_object", "prompt"],
    parallel: bool,
) -> tuple[ForcePlan, dict[str, Any]]:
    """A forced choice the backend does not honour, emulated through structured output (or
    the prompt): the plan the reply is read back with, and the request's changes."""
    target = choice.name if isinstance(choice, SpecificTool) else None
    members = tuple(t for t in request.tools if target is None or t.name == target)
    wrapped = not caps.top_level_unions and len(members) > 1
    strict = caps.strict_schema and method == "json_schema"
    schema = tool_union_schema(
        members, parallel=parallel, top_level_union=not wrapped, strict=strict
    )
    plan = ForcePlan(
        method=method,
        tools=tuple(t.name for t in members),
        fallback_tool=target or options.fallback_tool,
        parallel=parallel,
        wrapped=wrapped,
        strict=strict,
        schema=schema,
    )
    response_format: ResponseFormat | None = None
    if method == "json_schema":
        response_format = union_response_format(schema, strict=strict)
    elif method == "json_object":
        response_format = ResponseFormat(type="json_object")
    messages = request.messages
    if options.instruct or method != "json_schema":
        messages = _with_system(messages, _force_instruction(plan, members, target is not None))
    return plan, {
        "tools": (),
        "tool_choice": None,
        "parallel_tool_calls": None,
        "response_format": response_format,
        "messages": messages,
    }
