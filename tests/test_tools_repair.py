"""Broken-JSON repair and partial parsing (spec §9.1, §9.2, cases 53, 54, 56)."""

from __future__ import annotations

import json
import math
import sys
from typing import TYPE_CHECKING, Any, Final

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice._tools import repair as repair_module
from sluice._tools.repair import (
    MAX_DEPTH,
    PartialJson,
    RepairError,
    parse_partial,
    repair_arguments,
    repair_json,
)

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import FrameType

# Case 53: every row of the spec's table (§9.1). Where json-repair's answer is odd, the row holds
# our answer and the comment says what upstream gives.
TABLE: list[tuple[str, Any, str | None]] = [
    ('{"a": 1, "b": [1, 2]}', {"a": 1, "b": [1, 2]}, None),
    ('{"a": 1, "b": 2,}', {"a": 1, "b": 2}, "trailing_comma"),
    ("[1, 2, 3,]", [1, 2, 3], "trailing_comma"),
    ('{"a": 1, "b": {"c": 2', {"a": 1, "b": {"c": 2}}, "unclosed_object"),
    ('{"a": "hello', {"a": "hello"}, "unclosed_string"),
    ('{"a": [1, 2', {"a": [1, 2]}, "unclosed_array"),
    ('{"a": [1, 2}', {"a": [1, 2]}, "unclosed_array"),
    ("{'a': 'x', 'b': 2}", {"a": "x", "b": 2}, "single_quotes"),
    ('{a: 1, b: "x"}', {"a": 1, "b": "x"}, "unquoted_key"),
    ('```json\n{"a": 1}\n```', {"a": 1}, "code_fence"),
    ('```\n{"a": 1}\n```', {"a": 1}, "code_fence"),
    ('Sure! Here is the JSON: {"a": 1}', {"a": 1}, "surrounding_text"),
    ('{"a": 1} Hope this helps!', {"a": 1}, "surrounding_text"),
    (
        '<tool_call>{"name": "x", "parameters": {}}</tool_call>',
        {"name": "x", "parameters": {}},
        "surrounding_text",
    ),
    ("Result: [1,2]", [1, 2], "surrounding_text"),
    ('{"a": 1 "b": 2}', {"a": 1, "b": 2}, "missing_comma"),
    ('{"a": 1, // c\n "b": 2 /* c */}', {"a": 1, "b": 2}, "comment"),
    # upstream: None becomes the string "None"
    ('{"a": True, "b": None, "c": False}', {"a": True, "b": None, "c": False}, "python_literal"),
    # upstream: "undefined"; JavaScript's undefined is no value, so null
    ('{"a": undefined}', {"a": None}, "bare_word"),
    ('{"a": yes}', {"a": "yes"}, "bare_word"),
    # upstream: float NaN, which no JSON encoder writes
    ('{"a": NaN}', {"a": None}, "non_json_number"),
    ('{"a": 1.}', {"a": 1.0}, "lenient_number"),
    ('{"c": .5}', {"c": 0.5}, "lenient_number"),
    # upstream: ""; a missing value is no value
    ('{"a": }', {"a": None}, "missing_value"),
    ('{"a": 1, "b"', {"a": 1}, "dangling_key"),
    # upstream: ["a"]
    ('{"a"', {}, "dangling_key"),
    ("{", {}, "unclosed_object"),
    ("[", [], "unclosed_array"),
    ('{"a": "x"}}', {"a": "x"}, "extra_closer"),
    ('{"a": "he said "hi" ok"}', {"a": 'he said "hi" ok'}, "inner_quote"),
    ('{"a": "line1\nline2"}', {"a": "line1\nline2"}, "control_character"),
    ("42", 42, None),
    ("true", True, None),
    ("null", None, None),
    ('"plain string"', "plain string", None),
    # upstream: the inner string; we decode it (unwrap_strings=False gives upstream's answer)
    ('"{\\"a\\": 1}"', {"a": 1}, "double_encoded"),
    ('{"a": 1}{"b": 2}', [{"a": 1}, {"b": 2}], "multiple_values"),
    ('{"a": 1}\n{"b": 2}', [{"a": 1}, {"b": 2}], "multiple_values"),
    ('{"a": 1}, {"b": 2}', [{"a": 1}, {"b": 2}], "multiple_values"),
    # upstream: {"a": 2}, the first call silently lost
    ('{"a": 1}{"a": 2}', [{"a": 1}, {"a": 2}], "multiple_values"),
    # upstream: [{"a": 1}, {"b": 3}]
    ('{"a": 1} {"b": 2} {"b": 3}', [{"a": 1}, {"b": 2}, {"b": 3}], "multiple_values"),
    (
        '{"name":"search","parameters":{"query":"bee',
        {"name": "search", "parameters": {"query": "bee"}},
        "unclosed_string",
    ),
]


@pytest.mark.parametrize(("text", "expected", "repair"), TABLE)
def test_spec_table_row(text: str, expected: Any, repair: str | None) -> None:
    """Case 53: each row of the §9.1 table, with our answers where json-repair is odd."""
    result = repair_json(text)
    assert result.value == expected
    if repair is None:
        assert result.repairs == ()
    else:
        assert repair in result.repairs


@pytest.mark.parametrize(
    "text", ["", "   ", "hello world", "Sure, I can help.", "// just a comment"]
)
def test_text_without_json_is_a_repair_error(text: str) -> None:
    """Case 54 (ours): upstream returns "" for these; we raise the one defined error."""
    with pytest.raises(RepairError):
        repair_json(text)


def test_double_encoded_string_can_be_kept_as_a_string() -> None:
    """§9.1 row: with unwrap_strings=False the result is upstream's inner string."""
    assert repair_json('"{\\"a\\": 1}"', unwrap_strings=False).value == '{"a": 1}'


def test_python_and_quote_variants() -> None:
    """Single-quoted strings with apostrophes, Python literals at the top level."""
    assert repair_json("{'a': 'it's fine'}").value == {"a": "it's fine"}
    assert repair_json("True").value is True
    assert repair_json("'x'").value == "x"


def test_lone_surrogates_become_replacement_characters() -> None:
    """Ours: the result always serializes back to JSON."""
    result = repair_json('{"a": "\\ud83d\\ude00 \\ud800"}')
    assert result.value == {"a": "\U0001f600 \ufffd"}
    assert "lone_surrogate" in result.repairs


def test_big_integers_stay_exact() -> None:
    assert repair_json("[12345678901234567890123]").value == [12345678901234567890123]
    assert repair_json("[12345678901234567890123,]").value == [12345678901234567890123]


def test_truncated_flag_marks_text_that_ended_too_early() -> None:
    assert repair_json('{"a": "x').truncated
    assert not repair_json('{"a": "x",}').truncated


# Case 55/56 (the parsing half; finalization is tested in test_tools_finalize.py).
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a": 1,}', {"a": 1}),
        ('"{\\"q\\": \\"bee\\"}"', {"q": "bee"}),
        ("{'a': 'x'}", {"a": "x"}),
        ('{"a": 1', {"a": 1}),
        ("", {}),
        ("   ", {}),
        ("null", {}),
        ('"\\"{\\\\\\"a\\\\\\": 1}\\""', {"a": 1}),
    ],
)
def test_arguments_are_repaired_into_an_object(text: str, expected: dict[str, Any]) -> None:
    """Cases 55 and 56: empty and null mean no arguments (ours); double encoding is undone."""
    assert repair_arguments(text).value == expected


@pytest.mark.parametrize("text", ["hello", "[1, 2]", "42", '"x"', '{"a":1}{"b":2}'])
def test_arguments_that_are_no_object_are_refused(text: str) -> None:
    """Case 55: 'hello' fails; ours also refuses lists (fused parallel calls) and scalars."""
    with pytest.raises(RepairError):
        repair_arguments(text)


def test_deep_nesting_of_broken_json_is_refused() -> None:
    with pytest.raises(RepairError, match="nested deeper"):
        repair_json("[" * (MAX_DEPTH + 5))


def test_deep_valid_json_parses() -> None:
    text = "[" * 500 + "]" * 500
    value = repair_json(text).value
    for _ in range(499):
        value = value[0]
    assert value == []


no_surrogates = st.characters(exclude_categories=["Cs"])
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(no_surrogates),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text(no_surrogates), children, max_size=4)
    ),
    max_leaves=20,
)


@given(json_values, st.booleans())
def test_valid_json_comes_back_unchanged(value: Any, indent: bool) -> None:
    """Property: repair(valid JSON) == the value, with no repairs reported."""
    text = json.dumps(value, indent=2 if indent else None, ensure_ascii=False)
    result = repair_json(text, unwrap_strings=False)
    assert result.value == value
    assert result.repairs == ()


@given(st.text(max_size=300))
@settings(max_examples=400, deadline=None)
def test_any_text_is_repaired_or_refused(text: str) -> None:
    """Property: the only exception is RepairError, and a result always serializes."""
    try:
        result = repair_json(text)
    except RepairError:
        return
    json.dumps(result.value, allow_nan=False)


@given(st.text(alphabet="{}[]\",:'\\ abtn0123.-eE/*#\n", max_size=300))
@settings(max_examples=400, deadline=None)
def test_json_like_noise_is_repaired_or_refused(text: str) -> None:
    """Property: the same, for text built from JSON's own characters."""
    try:
        result = repair_json(text)
    except RepairError:
        return
    json.dumps(result.value, allow_nan=False)


@given(json_values)
@settings(deadline=None, max_examples=100)
def test_partial_results_of_a_streamed_object_never_raise(value: Any) -> None:
    """Property: every prefix of a JSON text parses to something or None, never an error."""
    text = json.dumps({"v": value})
    for end in range(len(text) + 1):
        parse_partial(text[:end])
    assert parse_partial(text) == {"v": value}


ADVERSARIAL: Final = {
    "deep nesting": lambda n: "[" * n,
    "unclosed string": lambda n: '{"a": "' + "x" * n,
    "backslashes": lambda n: '"' + "\\" * n,
    "keys without values": lambda n: "{" + ",".join(f'"k{i}"' for i in range(n // 6)),
    "numbers without commas": lambda n: "[" + "1 " * (n // 3),
    "unclosed nesting": lambda n: '{"a": [1, {"b": "c"' * (n // 1600),
    "quotes inside a string": lambda n: '"he said "' * (n // 6),
    "comment openers": lambda n: "/*" * (n // 3),
    "bare words": lambda n: "{a:" * 150 + "x" * n,
}
"""Inputs that make naive repairers quadratic (json-repair took a second on a 300 kB unclosed
string), each built at a given size. ``benchmarks/repair_adversarial.py`` times them at full
size; here their work is counted, which is exact and independent of the machine."""


def _work(text: str) -> int:
    """Lines executed in :mod:`sluice._tools.repair` while repairing and partially parsing
    ``text``: a deterministic measure of the work done."""
    count = 0

    def local(frame: FrameType, event: str, arg: object) -> Any:
        nonlocal count
        count += 1
        return local

    def tracer(frame: FrameType, event: str, arg: object) -> Any:
        return local if frame.f_code.co_filename == repair_module.__file__ else None

    sys.settrace(tracer)
    try:
        try:
            repair_json(text)
        except RepairError:
            pass
        parse_partial(text)
    finally:
        sys.settrace(None)
    return count


@pytest.mark.parametrize("build", ADVERSARIAL.values(), ids=ADVERSARIAL.keys())
def test_adversarial_input_takes_linear_work(build: Callable[[int], str]) -> None:
    """Doubling an adversarial input at most doubles the work (plus a little): no quadratic
    path, so a huge malformed reply cannot stall a ProviderActor."""
    small, large = _work(build(8_000)), _work(build(16_000))
    assert large <= 2.1 * small + 100


def test_partial_values_only_grow() -> None:
    """Strings cut off are kept; numbers and literals at the end wait until they are complete."""
    assert parse_partial('{"query": "be') == {"query": "be"}
    assert parse_partial('{"query": "bee", "limit": 1') == {"query": "bee"}
    assert parse_partial('{"query": "bee", "limit": 12,') == {"query": "bee", "limit": 12}
    assert parse_partial('{"flag": tr') == {}
    assert parse_partial('{"a": "x\\') == {"a": "x"}
    assert parse_partial('{"a": "x\\u00') == {"a": "x"}
    assert parse_partial('{"a": "x", "b') == {"a": "x"}
    assert parse_partial("") is None


def test_partial_json_accumulates_streamed_fragments() -> None:
    """The streaming helper feeds ToolCallDelta fragments and returns each new parse."""
    partial = PartialJson()
    seen = [partial.feed(f) for f in ['{"ci', 'ty": "Par', 'is", "unit"', ': "c"}']]
    assert seen == [{}, {"city": "Par"}, {"city": "Paris"}, {"city": "Paris", "unit": "c"}]
    assert partial.value == {"city": "Paris", "unit": "c"}


def test_partial_json_can_parse_less_often() -> None:
    partial = PartialJson(every=10)
    assert partial.feed('{"a": "') is None
    assert partial.feed("xyzxyz") == {"a": "xyzxyz"}
    assert partial.text == '{"a": "xyzxyz'


def test_prefixes_of_valid_json_never_produce_more_than_the_final_value() -> None:
    text = '{"name": "search", "parameters": {"query": "bees", "tags": ["a", "b"], "n": 25}}'
    final = json.loads(text)
    for end in range(len(text) + 1):
        value = parse_partial(text[:end])
        if isinstance(value, dict) and "parameters" in value:
            for key in value["parameters"]:
                assert key in final["parameters"]
    assert parse_partial(text) == final


def test_numbers_beyond_float_range_become_null() -> None:
    result = repair_json("[1e999,]")
    assert result.value == [None]
    assert not any(isinstance(v, float) and math.isinf(v) for v in result.value)


def test_backticks_inside_json_strings_are_not_a_fence():
    """Found by hypothesis: a key holding a Markdown fence was taken for a fence around the
    JSON, and the partial parse returned the text after it."""
    from sluice._tools.repair import parse_partial, repair_json

    assert parse_partial('{"v": {"```": []}}') == {"v": {"```": []}}
    assert repair_json('{"code": "```py\\nx = 1\\n```"}').value == {"code": "```py\nx = 1\n```"}
    assert repair_json('Sure:\n```json\n{"a": 1}\n```').value == {"a": 1}
