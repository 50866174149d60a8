"""JSON schemas for tools: ``$ref`` inlining, the strict form, and the tool-union schema.

Every function here returns a new plain ``dict`` tree (no shared sub-objects, no proxies, nothing
orjson cannot serialize) and never changes its input.

The tool-union schema describes one tool call as JSON, for backends that must be made to call
a tool through structured output: one object per tool with a literal ``name`` and the tool's
``parameters``, joined with ``anyOf``; an array of those when several calls are allowed; wrapped
in an object with one property ``item`` when the backend does not accept a union or an array at
the root of a schema.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, NoReturn

import jsonref  # type: ignore[import-untyped]

from .._errors import ConfigError
from .._messages import ResponseFormat, Tool

__all__ = [
    "MAX_INLINED_NODES",
    "ToolSchemaError",
    "inline_refs",
    "strict_schema",
    "tool_union_schema",
    "union_response_format",
]

MAX_INLINED_NODES: Final = 200_000
"""Largest schema (in objects and arrays) that inlining may produce."""
_MAX_DEPTH: Final = 150
_KEEP: Final = "$sluice-kept-ref"
_ROOT_DEF: Final = "__root__"


class ToolSchemaError(ConfigError):
    """A tool's JSON schema cannot be used (the message says which part and why)."""


def _fail(where: str, problem: str) -> NoReturn:
    raise ToolSchemaError(f"{where}: {problem}")


def _plain(node: Any, where: str, budget: list[int], depth: int = 0) -> Any:
    """A deep copy as plain dicts and lists, sharing nothing; renames kept refs back."""
    if depth > _MAX_DEPTH:
        _fail(where, f"the schema is nested deeper than {_MAX_DEPTH} levels")
    if isinstance(node, Mapping):
        budget[0] -= 1
        if budget[0] < 0:
            _fail(where, f"the schema grows beyond {MAX_INLINED_NODES} nodes when refs are inlined")
        out: dict[str, Any] = {}
        for key, value in node.items():
            if not isinstance(key, str):
                _fail(where, f"schema keys must be strings, not {key!r}")
            out["$ref" if key == _KEEP else key] = _plain(value, where, budget, depth + 1)
        return out
    if isinstance(node, list | tuple):
        budget[0] -= 1
        return [_plain(v, where, budget, depth + 1) for v in node]
    return node


def _copy(node: Any, where: str) -> Any:
    return _plain(node, where, [MAX_INLINED_NODES])


def _walk_refs(node: Any, found: list[dict[str, Any]]) -> None:
    if isinstance(node, dict):
        if isinstance(node.get("$ref"), str):
            found.append(node)
        for value in node.values():
            _walk_refs(value, found)
    elif isinstance(node, list):
        for value in node:
            _walk_refs(value, found)


def _refs(node: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    _walk_refs(node, found)
    return found


def _resolve(root: Any, ref: str, where: str) -> Any:
    node = root
    for raw in ref[1:].split("/")[1:] if ref not in ("#", "#/") else []:
        token = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            _fail(where, f"$ref {ref!r} points at nothing in the schema")
    return node


def _recursive_targets(root: dict[str, Any], refs: list[dict[str, Any]], where: str) -> set[str]:
    """The ref targets that can reach themselves through refs."""
    targets = {r["$ref"] for r in refs}
    edges = {t: {r["$ref"] for r in _refs(_resolve(root, t, where))} for t in targets}
    recursive: set[str] = set()
    for start in targets:
        seen: set[str] = set()
        todo = list(edges[start])
        while todo:
            current = todo.pop()
            if current == start:
                recursive.add(start)
                break
            if current not in seen:
                seen.add(current)
                todo.extend(edges.get(current, ()))
    return recursive


def _refuse(uri: str) -> NoReturn:
    raise ValueError(f"only refs inside the schema are resolved, not {uri!r}")


def _def_name(ref: str) -> str | None:
    parts = ref.split("/")
    if len(parts) == 3 and parts[0] == "#" and parts[1] in ("$defs", "definitions"):
        return parts[2].replace("~1", "/").replace("~0", "~")
    return None


def inline_refs(schema: Mapping[str, Any], *, where: str = "schema") -> dict[str, Any]:
    """Replace every ``$ref`` by what it points at, except the refs that make a cycle.

    Refs must be local (``#/...``); nothing is ever fetched. A ``$ref`` with sibling keywords
    becomes the referenced schema with the siblings merged over it. Definitions that refer to
    themselves (directly or through others) stay as ``$ref``s to the root's ``$defs``, which then
    holds only those definitions; a self-reference to the whole schema (``#``) becomes a ref to
    ``#/$defs/__root__``. A root that is itself such a ref is expanded once. The root
    ``$defs``/``definitions`` are otherwise removed.

    Raises:
        ToolSchemaError: a ref that is not local or points at nothing, a cycle through something
            other than a root definition, a schema nested too deep or inlined too large.
    """
    root = _copy(schema, where)
    if not isinstance(root, dict):
        _fail(where, "a schema must be a JSON object")
    refs = _refs(root)
    for node in refs:
        if not node["$ref"].startswith("#"):
            _fail(where, f"$ref {node['$ref']!r} is not local; only refs inside the schema work")
    if any(node["$ref"] in ("#", "#/") for node in refs):
        copy = {k: v for k, v in _copy(root, where).items() if k not in ("$defs", "definitions")}
        root.setdefault("$defs", {})[_ROOT_DEF] = copy
        refs = _refs(root)
        for node in refs:
            if node["$ref"] in ("#", "#/"):
                node["$ref"] = f"#/$defs/{_ROOT_DEF}"
    if not refs:
        root.pop("$defs", None)
        root.pop("definitions", None)
        return root
    recursive = _recursive_targets(root, refs, where)
    for target in sorted(recursive):
        if _def_name(target) is None:
            _fail(where, f"$ref {target!r} makes a cycle outside the root $defs")
    for node in refs:
        if node["$ref"] in recursive:
            node[_KEEP] = node.pop("$ref")
    try:
        resolved = jsonref.replace_refs(
            root, base_uri="", loader=_refuse, merge_props=True, proxies=False, lazy_load=False
        )
    except jsonref.JsonRefError as exc:
        _fail(where, f"cannot resolve a $ref: {exc}")
    kept: dict[str, Any] = {}
    defs = {**resolved.get("definitions", {}), **resolved.get("$defs", {})}
    for target in sorted(recursive):
        name = _def_name(target)
        assert name is not None
        kept[name] = defs[name]
    result: dict[str, Any] = _copy(resolved, where)
    result.pop("$defs", None)
    result.pop("definitions", None)
    if kept:
        result["$defs"] = _copy(kept, where)
        for node in _refs(result):
            name = _def_name(node["$ref"])
            if name is not None:
                node["$ref"] = "#/$defs/" + name.replace("~", "~0").replace("/", "~1")
        root_name = _def_name(result.get("$ref", ""))
        if root_name is not None:
            # The root itself is a kept ref: expand it once, so the root is a real schema.
            siblings = {k: v for k, v in result.items() if k != "$ref"}
            result = {**_copy(result["$defs"][root_name], where), **siblings}
    return result


def _allows_null(schema: Mapping[str, Any]) -> bool:
    kind = schema.get("type")
    if kind == "null" or (isinstance(kind, list) and "null" in kind):
        return True
    if "const" in schema and schema["const"] is None:
        return True
    if None in (schema.get("enum") or ()):
        return True
    branches = [*schema.get("anyOf", ()), *schema.get("oneOf", ())]
    return any(isinstance(b, Mapping) and _allows_null(b) for b in branches)


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    if _allows_null(schema):
        return schema
    if isinstance(schema.get("anyOf"), list):
        schema["anyOf"].append({"type": "null"})
        return schema
    meta: dict[str, Any] = {k: schema.pop(k) for k in ("title", "description") if k in schema}
    return {**meta, "anyOf": [schema, {"type": "null"}]}


def _strict(node: Any, depth: int) -> None:
    if not isinstance(node, dict):
        return
    if depth > _MAX_DEPTH:
        raise ToolSchemaError(f"the schema is nested deeper than {_MAX_DEPTH} levels")
    all_of = node.get("allOf")
    if isinstance(all_of, list) and len(all_of) == 1 and isinstance(all_of[0], dict):
        del node["allOf"]
        _strict(all_of[0], depth + 1)
        node.update(all_of[0])
    for key in ("allOf", "anyOf", "oneOf", "prefixItems"):
        for entry in node.get(key) or ():
            _strict(entry, depth + 1)
    if "oneOf" in node and "anyOf" not in node:
        # Strict structured outputs know anyOf only; for a model's output the two agree.
        node["anyOf"] = node.pop("oneOf")
    for key in ("$defs", "definitions", "properties"):
        for entry in (node.get(key) or {}).values():
            _strict(entry, depth + 1)
    items = node.get("items")
    for entry in items if isinstance(items, list) else [items]:
        _strict(entry, depth + 1)
    extra = node.get("additionalProperties")
    if isinstance(extra, dict):
        _strict(extra, depth + 1)  # a map: its value schema stays (upstream forces false)
    elif node.get("type") == "object" or "properties" in node:
        node["additionalProperties"] = False
    properties = node.get("properties")
    if isinstance(properties, dict):
        required = set(node.get("required") or ())
        for name, prop in list(properties.items()):
            if name not in required and isinstance(prop, dict) and "default" not in prop:
                properties[name] = _nullable(prop)
        node["required"] = list(properties)
    if "default" in node and node["default"] is None:
        del node["default"]


def strict_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The strict form of ``schema``, as strict structured outputs and strict tools need it.

    Every object gets ``additionalProperties: false`` unless it is a map (its
    ``additionalProperties`` is a schema, which is kept and made strict in turn; upstream forces
    those to false, which turns a map into an always-empty object). Every property becomes
    required; an optional property without a default becomes nullable so the model can still
    leave it out by sending null, while one with a default keeps its type and default. A
    ``default`` of null is removed, a one-entry ``allOf`` is merged into its parent, and
    ``oneOf`` becomes ``anyOf``. Refs are not resolved here: inline them first.

    Raises:
        ToolSchemaError: the schema is nested too deep.
    """
    result = _copy(schema, "schema")
    _strict(result, 0)
    return dict(result)


def _tool_parameters(tool: Tool, defs: dict[str, Any]) -> dict[str, Any]:
    """The tool's inlined parameter schema; kept definitions move to ``defs``, renamed."""
    params = inline_refs(tool.parameters, where=f"tool {tool.name!r}")
    own = params.pop("$defs", None)
    if own:
        prefix = tool.name.replace("~", "~0").replace("/", "~1")
        for node in _refs(params) + _refs(own):
            name = _def_name(node["$ref"])
            assert name is not None
            node["$ref"] = f"#/$defs/{prefix}.{name.replace('~', '~0').replace('/', '~1')}"
        for name, definition in own.items():
            defs[f"{tool.name}.{name}"] = definition
    return {"title": tool.name, **params, "description": "Tool Parameters"}


def _tool_object(tool: Tool, defs: dict[str, Any]) -> dict[str, Any]:
    return {
        "additionalProperties": False,
        "properties": {
            "name": {
                "const": tool.name,
                "description": "Tool Name",
                "title": "Name",
                "type": "string",
            },
            "parameters": _tool_parameters(tool, defs),
        },
        "required": ["name", "parameters"],
        "title": tool.name,
        "type": "object",
    }


def tool_union_schema(
    tools: Sequence[Tool] | Iterable[Tool],
    *,
    parallel: bool = False,
    top_level_union: bool = True,
    strict: bool = False,
) -> dict[str, Any]:
    """The schema of a reply that calls one of ``tools`` (or several, with ``parallel``).

    One tool gives that tool's object alone, whatever the flags. Two or more give
    ``{"anyOf": [...], "title": "AvailableTools"}``, with ``anyOf`` inside
    ``{"items": ..., "type": "array"}`` when ``parallel``; without ``top_level_union`` the root is
    an object whose one required property ``item`` holds the union or array. Recursive
    definitions of the tools are kept under the root ``$defs`` as ``<tool>.<name>``.

    Raises:
        ToolSchemaError: no tools, or a tool schema that cannot be used (see :func:`inline_refs`).
    """
    tools = list(tools)
    if not tools:
        raise ToolSchemaError("a tool-call schema needs at least one tool")
    defs: dict[str, Any] = {}
    objects = [_tool_object(tool, defs) for tool in tools]
    root: dict[str, Any]
    if len(objects) == 1:
        root = objects[0]
    else:
        union: dict[str, Any] = {"anyOf": objects}
        if parallel:
            union = {"items": union, "type": "array"}
        if top_level_union:
            root = {**union, "title": "AvailableTools"}
        else:
            root = {
                "properties": {"item": {**union, "title": "Item"}},
                "required": ["item"],
                "title": "AvailableTools",
                "type": "object",
            }
    if defs:
        root["$defs"] = defs
    return strict_schema(root) if strict else root


def union_response_format(schema: Mapping[str, Any], *, strict: bool = False) -> ResponseFormat:
    """The structured-output request for a tool-union schema (named ``ToolCall``)."""
    return ResponseFormat(
        type="json_schema", schema=schema, name="ToolCall", strict=True if strict else None
    )
