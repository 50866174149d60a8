"""The tool-union schema, ``$ref`` inlining and the strict form (spec §5-§7, cases 40-52)."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest

from sluice._messages import ChatRequest, Tool
from sluice._protocols.openai_request import build_body
from sluice._tools.schema import (
    ToolSchemaError,
    inline_refs,
    strict_schema,
    tool_union_schema,
    union_response_format,
)

# The spec's worked example (§5.2): two tools, their parameter schemas as a pydantic model
# would give them.
GET_WEATHER = Tool(
    name="get_weather",
    parameters={
        "properties": {
            "city": {"description": "City name", "title": "City", "type": "string"},
            "unit": {"default": "c", "enum": ["c", "f"], "title": "Unit", "type": "string"},
        },
        "required": ["city"],
        "title": "get_weather",
        "type": "object",
    },
)
SEARCH = Tool(
    name="search",
    parameters={
        "properties": {
            "query": {"title": "Query", "type": "string"},
            "limit": {
                "anyOf": [{"type": "integer"}, {"type": "null"}],
                "default": None,
                "title": "Limit",
            },
        },
        "required": ["query"],
        "title": "search",
        "type": "object",
    },
)

WEATHER_OBJECT: dict[str, Any] = {
    "additionalProperties": False,
    "properties": {
        "name": {
            "const": "get_weather",
            "description": "Tool Name",
            "title": "Name",
            "type": "string",
        },
        "parameters": {
            "properties": {
                "city": {"description": "City name", "title": "City", "type": "string"},
                "unit": {"default": "c", "enum": ["c", "f"], "title": "Unit", "type": "string"},
            },
            "required": ["city"],
            "title": "get_weather",
            "type": "object",
            "description": "Tool Parameters",
        },
    },
    "required": ["name", "parameters"],
    "title": "get_weather",
    "type": "object",
}
SEARCH_OBJECT: dict[str, Any] = {
    "additionalProperties": False,
    "properties": {
        "name": {"const": "search", "description": "Tool Name", "title": "Name", "type": "string"},
        "parameters": {
            "properties": {
                "query": {"title": "Query", "type": "string"},
                "limit": {
                    "anyOf": [{"type": "integer"}, {"type": "null"}],
                    "default": None,
                    "title": "Limit",
                },
            },
            "required": ["query"],
            "title": "search",
            "type": "object",
            "description": "Tool Parameters",
        },
    },
    "required": ["name", "parameters"],
    "title": "search",
    "type": "object",
}


def strict_objects() -> list[dict[str, Any]]:
    weather, search = copy.deepcopy(WEATHER_OBJECT), copy.deepcopy(SEARCH_OBJECT)
    weather["properties"]["parameters"].update(
        {"additionalProperties": False, "required": ["city", "unit"]}
    )
    search["properties"]["parameters"] = {
        "description": "Tool Parameters",
        "properties": {
            "query": {"title": "Query", "type": "string"},
            "limit": {"anyOf": [{"type": "integer"}, {"type": "null"}], "title": "Limit"},
        },
        "required": ["query", "limit"],
        "title": "search",
        "type": "object",
        "additionalProperties": False,
    }
    return [weather, search]


def test_two_tool_union_matches_the_spec_example() -> None:
    """§5.2 and case 40: non-strict, top-level union, no parallel calls; the whole wire form."""
    schema = tool_union_schema([GET_WEATHER, SEARCH])
    body = build_body(
        ChatRequest(model="ollama:m", messages="hi", response_format=union_response_format(schema))
    )
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {
            "name": "ToolCall",
            "schema": {"anyOf": [WEATHER_OBJECT, SEARCH_OBJECT], "title": "AvailableTools"},
        },
    }


def test_strict_union_requires_every_property_and_drops_null_defaults() -> None:
    """§5.2 strict variant, cases 41 and 45."""
    assert tool_union_schema([GET_WEATHER, SEARCH], strict=True) == {
        "anyOf": strict_objects(),
        "title": "AvailableTools",
    }


def test_wrapped_union_puts_the_union_under_item() -> None:
    """§5.2 wrapped variant (no top-level unions), non-strict."""
    assert tool_union_schema([GET_WEATHER, SEARCH], top_level_union=False) == {
        "properties": {"item": {"anyOf": [WEATHER_OBJECT, SEARCH_OBJECT], "title": "Item"}},
        "required": ["item"],
        "title": "AvailableTools",
        "type": "object",
    }


def test_wrapped_strict_union_closes_the_root_object() -> None:
    """§5.2 wrapped variant in strict mode: the root gets additionalProperties false."""
    assert tool_union_schema([GET_WEATHER, SEARCH], top_level_union=False, strict=True) == {
        "properties": {"item": {"anyOf": strict_objects(), "title": "Item"}},
        "required": ["item"],
        "title": "AvailableTools",
        "type": "object",
        "additionalProperties": False,
    }


def test_parallel_union_is_an_array_at_the_root() -> None:
    """§5.2 parallel variant with top-level unions."""
    assert tool_union_schema([GET_WEATHER, SEARCH], parallel=True) == {
        "items": {"anyOf": [WEATHER_OBJECT, SEARCH_OBJECT]},
        "type": "array",
        "title": "AvailableTools",
    }


def test_wrapped_parallel_union_is_an_array_under_item() -> None:
    """§5.2 parallel variant, wrapped; case 43."""
    assert tool_union_schema([GET_WEATHER, SEARCH], parallel=True, top_level_union=False) == {
        "properties": {
            "item": {
                "title": "Item",
                "items": {"anyOf": [WEATHER_OBJECT, SEARCH_OBJECT]},
                "type": "array",
            }
        },
        "required": ["item"],
        "title": "AvailableTools",
        "type": "object",
    }


@pytest.mark.parametrize(
    "flags",
    [
        {},
        {"parallel": True},
        {"top_level_union": False},
        {"parallel": True, "top_level_union": False},
    ],
)
def test_single_tool_schema_is_the_tool_object_whatever_the_flags(flags: dict[str, bool]) -> None:
    """§5.1 step 2 and case 42 (non-strict)."""
    assert tool_union_schema([GET_WEATHER], **flags) == WEATHER_OBJECT


def test_single_tool_strict_schema_is_the_strict_tool_object() -> None:
    """Case 42, strict."""
    assert tool_union_schema([GET_WEATHER], strict=True) == strict_objects()[0]


TOOL_SUM = Tool(
    name="tool_sum",
    parameters={
        "properties": {
            "a": {"title": "A", "type": "integer"},
            "b": {"default": 0, "title": "B", "type": "integer"},
        },
        "required": ["a"],
        "title": "tool_sum",
        "type": "object",
    },
)
TOOL_GREET = Tool(
    name="tool_greet",
    parameters={
        "properties": {"name": {"title": "Name", "type": "integer"}},
        "required": ["name"],
        "type": "object",
    },
)


def test_upstream_snapshot_tools_non_strict() -> None:
    """Case 40: tool_sum keeps required ["a"] and b's default 0; the root is the union."""
    schema = tool_union_schema([TOOL_SUM, TOOL_GREET])
    assert set(schema) == {"anyOf", "title"} and schema["title"] == "AvailableTools"
    params = schema["anyOf"][0]["properties"]["parameters"]
    assert params["required"] == ["a"]
    assert params["properties"]["b"]["default"] == 0
    # A schema without its own title is titled after the tool.
    assert schema["anyOf"][1]["properties"]["parameters"]["title"] == "tool_greet"


def test_upstream_snapshot_tools_strict() -> None:
    """Case 41: additionalProperties false, every property required, default 0 kept."""
    params = tool_union_schema([TOOL_SUM, TOOL_GREET], strict=True)["anyOf"][0]["properties"][
        "parameters"
    ]
    assert params["additionalProperties"] is False
    assert params["required"] == ["a", "b"]
    assert params["properties"]["b"] == {"default": 0, "title": "B", "type": "integer"}


def _walk(node: Any) -> list[Any]:
    found = [node]
    if isinstance(node, dict):
        for v in node.values():
            found += _walk(v)
    elif isinstance(node, list):
        for v in node:
            found += _walk(v)
    return found


def test_union_response_format_has_no_strict_key_and_no_refs() -> None:
    """Case 44: json_schema named ToolCall, no strict key, no $ref or $defs anywhere."""
    with_refs = Tool(
        name="lookup",
        parameters={
            "$defs": {"Key": {"type": "string", "title": "Key"}},
            "type": "object",
            "properties": {"key": {"$ref": "#/$defs/Key", "description": "which"}},
        },
    )
    schema = tool_union_schema([with_refs, SEARCH])
    fmt = union_response_format(schema)
    wire = build_body(ChatRequest(model="x:y", messages="hi", response_format=fmt))
    assert wire["response_format"]["type"] == "json_schema"
    assert wire["response_format"]["json_schema"]["name"] == "ToolCall"
    assert "strict" not in wire["response_format"]["json_schema"]
    text = orjson.dumps(schema).decode()
    assert "$ref" not in text and "$defs" not in text
    key = schema["anyOf"][0]["properties"]["parameters"]["properties"]["key"]
    assert key == {"type": "string", "title": "Key", "description": "which"}


def test_strict_response_format_asks_for_strict_mode() -> None:
    """Ours: strict schemas are sent with strict true (upstream never sends the flag)."""
    fmt = union_response_format(tool_union_schema([SEARCH], strict=True), strict=True)
    assert fmt.strict is True and fmt.name == "ToolCall"


def test_union_of_no_tools_is_refused() -> None:
    """Case 47 (ours: a ToolSchemaError, a kind of ConfigError)."""
    with pytest.raises(ToolSchemaError, match="at least one tool"):
        tool_union_schema([])


RECURSIVE = {
    "$defs": {
        "Node": {
            "type": "object",
            "properties": {
                "value": {"type": "integer"},
                "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}},
            },
            "required": ["value"],
        }
    },
    "type": "object",
    "properties": {"tree": {"$ref": "#/$defs/Node"}},
    "required": ["tree"],
}


def test_recursive_schema_keeps_its_cycle_as_a_ref() -> None:
    """Case 48 (ours): the cycle stays a $ref into the root $defs; the result serializes."""
    inlined = inline_refs(RECURSIVE)
    assert inlined["properties"]["tree"] == {"$ref": "#/$defs/Node"}
    assert inlined["$defs"]["Node"]["properties"]["children"]["items"] == {"$ref": "#/$defs/Node"}
    orjson.dumps(inlined)


def test_recursive_tool_definitions_move_to_the_union_root_under_the_tool_name() -> None:
    """Case 48 (ours): each tool's kept definitions are renamed so two tools cannot clash."""
    schema = tool_union_schema([Tool(name="tree", parameters=RECURSIVE), SEARCH], strict=True)
    params = schema["anyOf"][0]["properties"]["parameters"]
    assert params["properties"]["tree"] == {"$ref": "#/$defs/tree.Node"}
    node = schema["$defs"]["tree.Node"]
    assert node["properties"]["children"]["anyOf"][0]["items"] == {"$ref": "#/$defs/tree.Node"}
    assert node["additionalProperties"] is False
    orjson.dumps(schema)


def test_schema_that_refers_to_itself_gets_a_root_definition() -> None:
    """Case 48 (ours): a "#" ref becomes a ref to #/$defs/__root__."""
    inlined = inline_refs({"type": "object", "properties": {"next": {"$ref": "#"}}})
    assert inlined["properties"]["next"] == {"$ref": "#/$defs/__root__"}
    assert inlined["$defs"]["__root__"]["properties"]["next"] == {"$ref": "#/$defs/__root__"}


def test_mutual_recursion_keeps_both_definitions() -> None:
    """Case 48 (ours): A -> B -> A keeps both as refs."""
    schema = {
        "definitions": {
            "A": {"type": "object", "properties": {"b": {"$ref": "#/definitions/B"}}},
            "B": {"type": "object", "properties": {"a": {"$ref": "#/definitions/A"}}},
        },
        "$ref": "#/definitions/A",
    }
    inlined = inline_refs(schema)
    assert inlined["properties"]["b"] == {"$ref": "#/$defs/B"}
    assert set(inlined["$defs"]) == {"A", "B"}
    orjson.dumps(inlined)


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ("https://example.com/schema.json", "not local"),
        ("file:///etc/passwd", "not local"),
        ("other.json#/x", "not local"),
        ("#/$defs/Missing", "points at nothing"),
    ],
)
def test_refs_that_cannot_be_resolved_locally_are_refused(ref: str, message: str) -> None:
    """Ours: no ref is ever fetched; the error names the ref."""
    with pytest.raises(ToolSchemaError, match=message):
        inline_refs({"type": "object", "properties": {"x": {"$ref": ref}}})


def test_cycle_outside_the_root_definitions_is_a_clear_error() -> None:
    """Case 48 (ours): a cycle we cannot keep as a $defs ref is refused, not crashed on."""
    schema = {"type": "object", "properties": {"x": {"items": {"$ref": "#/properties/x"}}}}
    with pytest.raises(ToolSchemaError, match="cycle"):
        inline_refs(schema)


def test_inlining_shares_no_objects_and_leaves_the_input_alone() -> None:
    """§6 NOTE: jsonref shares one dict per definition; ours copies each occurrence."""
    schema = {
        "$defs": {"P": {"type": "object", "properties": {"v": {"type": "integer"}}}},
        "type": "object",
        "properties": {"a": {"$ref": "#/$defs/P"}, "b": {"$ref": "#/$defs/P"}},
    }
    before = copy.deepcopy(schema)
    inlined = inline_refs(schema)
    assert inlined["properties"]["a"] == inlined["properties"]["b"]
    assert inlined["properties"]["a"] is not inlined["properties"]["b"]
    assert "$defs" not in inlined
    assert schema == before


def test_exponential_inlining_is_refused() -> None:
    """Ours: a small schema whose inlined form would be huge fails instead of eating memory."""
    defs: dict[str, Any] = {"D0": {"type": "string"}}
    for i in range(1, 40):
        defs[f"D{i}"] = {
            "type": "object",
            "properties": {"l": {"$ref": f"#/$defs/D{i - 1}"}, "r": {"$ref": f"#/$defs/D{i - 1}"}},
        }
    with pytest.raises(ToolSchemaError, match="grows beyond"):
        inline_refs({"$defs": defs, "$ref": "#/$defs/D39"})


def test_strict_object_gets_closed_and_fully_required() -> None:
    """Case 49."""
    result = strict_schema(
        {"type": "object", "properties": {"a": {"type": "string"}}, "required": []}
    )
    assert result["additionalProperties"] is False
    assert result["required"] == ["a"]


def test_strict_makes_optional_properties_without_default_nullable() -> None:
    """Ours: an optional property with no default must still be omittable: it becomes nullable."""
    result = strict_schema(
        {
            "type": "object",
            "properties": {
                "a": {"type": "string", "title": "A"},
                "b": {"type": "integer", "default": 3},
                "c": {"type": "string"},
            },
            "required": ["c"],
        }
    )
    assert result["properties"]["a"] == {
        "title": "A",
        "anyOf": [{"type": "string"}, {"type": "null"}],
    }
    assert result["properties"]["b"] == {"type": "integer", "default": 3}
    assert result["properties"]["c"] == {"type": "string"}
    assert result["required"] == ["a", "b", "c"]


def test_strict_merges_a_single_all_of_into_its_parent() -> None:
    """Case 50."""
    result = strict_schema(
        {"allOf": [{"type": "object", "properties": {"x": {"type": "integer"}}}], "title": "T"}
    )
    assert "allOf" not in result
    assert result == {
        "title": "T",
        "type": "object",
        "properties": {"x": {"anyOf": [{"type": "integer"}, {"type": "null"}]}},
        "additionalProperties": False,
        "required": ["x"],
    }


def test_ref_with_siblings_is_inlined_with_the_siblings() -> None:
    """Case 51."""
    result = inline_refs(
        {
            "$defs": {"X": {"type": "string", "title": "X"}},
            "type": "object",
            "properties": {"x": {"$ref": "#/$defs/X", "description": "d"}},
        }
    )
    assert result["properties"]["x"] == {"type": "string", "title": "X", "description": "d"}


def test_strict_keeps_the_value_schema_of_a_map() -> None:
    """Case 52 (ours; upstream BUG §7.2 forces false and so allows only the empty map)."""
    result = strict_schema(
        {
            "type": "object",
            "properties": {
                "counts": {"type": "object", "additionalProperties": {"type": "integer"}},
                "open": {"type": "object", "additionalProperties": True},
                "nested": {
                    "type": "object",
                    "additionalProperties": {
                        "type": "object",
                        "properties": {"v": {"type": "integer"}},
                    },
                },
            },
            "required": ["counts", "open", "nested"],
        }
    )
    props = result["properties"]
    assert props["counts"]["additionalProperties"] == {"type": "integer"}
    assert props["open"]["additionalProperties"] is False
    assert props["nested"]["additionalProperties"]["additionalProperties"] is False
    assert props["nested"]["additionalProperties"]["required"] == ["v"]


def test_strict_turns_one_of_into_any_of_and_leaves_the_input_alone() -> None:
    """§19 item 6: oneOf handled (strict structured outputs know anyOf only)."""
    schema = {"oneOf": [{"type": "object", "properties": {}}, {"type": "string"}]}
    before = copy.deepcopy(schema)
    result = strict_schema(schema)
    assert result == {
        "anyOf": [
            {"type": "object", "properties": {}, "additionalProperties": False, "required": []},
            {"type": "string"},
        ]
    }
    assert schema == before


def test_deeply_nested_schema_is_refused_not_crashed_on() -> None:
    """Ours: never a RecursionError."""
    node: dict[str, Any] = {"type": "string"}
    for _ in range(400):
        node = {"type": "array", "items": node}
    with pytest.raises(ToolSchemaError, match="nested deeper"):
        inline_refs(node)
