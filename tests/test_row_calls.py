"""Rows to calls and outcomes to columns (sluice.ray's pure part): the three ways a row becomes
a request, row keys that depend on what a row asks and nothing else, bad rows as error rows."""

from __future__ import annotations

import re

import orjson
import pytest

from sluice import ChatResult, ConfigError, Message, RateLimited, ServerError, ToolCall, Usage
from sluice._ledger.prices import ModelPrice, PriceTable
from sluice._row_calls import OUTPUT_COLUMNS, BadRow, Calls, ColumnsBuilder

PROMPT = Calls(model="sim:sim-small", prompt="q", params={"temperature": 0.0})


def test_a_prompt_row_becomes_a_batch_call_that_waits():
    key, request = PROMPT.build({"q": "hello", "other": 1})
    assert not isinstance(request, BadRow)
    assert request.model == "sim:sim-small"
    assert [(m.role, m.text) for m in request.messages] == [("user", "hello")]
    assert request.temperature == 0.0
    assert (request.priority, request.failure_mode) == ("batch", "wait")
    assert len(key) == 32


def test_a_template_fills_in_columns_after_the_system_message():
    calls = Calls(model="sim:m", template="Sum up {title}: {body}", system="Be brief.")
    _, request = calls.build({"title": "T", "body": "B"})
    assert not isinstance(request, BadRow)
    assert [(m.role, m.text) for m in request.messages] == [
        ("system", "Be brief."),
        ("user", "Sum up T: B"),
    ]
    assert calls.columns_used() == ("title", "body")


def test_a_body_column_is_read_as_an_openai_batch_body_with_params_winning():
    body = {"model": "sim:sim-small", "messages": [{"role": "user", "content": "hi"}]}
    calls = Calls(body="body", params={"max_tokens": 5}, max_wait=60.0)
    _, from_dict = calls.build({"body": {**body, "max_tokens": 50, "top_k": 3}})
    _, from_text = calls.build({"body": orjson.dumps(body).decode()})
    assert not isinstance(from_dict, BadRow) and not isinstance(from_text, BadRow)
    assert from_dict.max_tokens == 5 and from_dict.extra_body == {"top_k": 3}
    assert from_dict.max_wait == 60.0
    assert from_text.messages == from_dict.messages
    overridden = Calls(body="body", model="other:m").build({"body": body})[1]
    assert not isinstance(overridden, BadRow) and overridden.model == "other:m"


def test_the_key_depends_on_what_a_row_asks_and_nothing_else():
    key = PROMPT.build({"q": "hello", "id": 1})[0]
    assert PROMPT.build({"q": "hello", "id": 2})[0] == key  # other columns, position
    assert (
        Calls(model="sim:sim-small", prompt="q", params={"temperature": 0.0}, max_wait=5).build(
            {"q": "hello"}
        )[0]
        == key
    )  # how the call is run is not what it asks
    assert PROMPT.build({"q": "hello!"})[0] != key
    assert (
        Calls(model="sim:other", prompt="q", params={"temperature": 0.0}).build({"q": "hello"})[0]
        != key
    )
    assert Calls(model="sim:sim-small", prompt="q").build({"q": "hello"})[0] != key
    # A template that renders the same text asks the same thing.
    same = Calls(model="sim:sim-small", template="{a}", params={"temperature": 0.0})
    assert same.build({"a": "hello"})[0] == key


def test_the_key_is_the_same_for_a_body_as_dict_and_as_its_key_order_changed():
    calls = Calls(body="b")
    a = {"model": "sim:m", "messages": [{"role": "user", "content": "x"}], "seed": 1}
    b = {"seed": 1, "messages": [{"content": "x", "role": "user"}], "model": "sim:m"}
    assert calls.build({"b": a})[0] == calls.build({"b": b})[0]
    assert calls.build({"b": a})[0] == calls.build({"b": orjson.dumps(a).decode()})[0]


@pytest.mark.parametrize(
    ("calls", "row", "says"),
    [
        (PROMPT, {"q": None}, "column 'q' holds NoneType"),
        (PROMPT, {}, "column 'q' holds NoneType"),
        (Calls(model="sim:m", template="{a} {b}"), {"a": "x"}, "KeyError('b')"),
        (Calls(body="b"), {"b": "{not json"}, "column 'b' is not JSON"),
        (Calls(body="b"), {"b": {"messages": []}}, "body.model"),
        (Calls(body="b", model="sim:m"), {"b": {"messages": []}}, "at least one message"),
        (Calls(model="sim:m", prompt="q", params={"max_tokens": "x"}), {"q": "hi"}, "max_tokens"),
    ],
)
def test_a_row_that_cannot_be_a_request_is_a_bad_row_with_a_reason(calls, row, says):
    key, bad = calls.build(row)
    assert isinstance(bad, BadRow)
    assert says in bad.message
    assert len(key) == 32


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"model": "sim:m"}, "exactly one of prompt="),
        ({"model": "sim:m", "prompt": "a", "body": "b"}, "got prompt, body"),
        ({"prompt": "a"}, "model= ('provider:model') is needed"),
        ({"model": "sim:m", "prompt": "a", "params": {"messages": []}}, "not ChatRequest fields"),
        ({"model": "sim:m", "prompt": "a", "params": {"temprature": 1}}, "temprature"),
    ],
)
def test_calls_say_what_is_wrong_with_them(fields, says):
    with pytest.raises(ValueError, match=re.escape(says)):
        Calls(**fields)


def _result(**fields) -> ChatResult:
    base = {
        "call_id": "c1",
        "provider": "sim",
        "model": "sim-small",
        "message": Message.assistant("the answer"),
        "finish_reason": "stop",
        "usage": Usage(input_tokens=1000, output_tokens=500),
    }
    return ChatResult(**{**base, **fields})


def test_columns_hold_answers_and_errors_in_the_rows_places():
    prices = PriceTable({"sim:*": ModelPrice.usd(1.0, 2.0)})  # dollars per million tokens
    columns = ColumnsBuilder(["k0", "k1", "k2", "k3"], prices)
    call = ToolCall(id="t1", name="f", arguments='{"a":1}')
    tools = Message.assistant([call])
    columns.answer(2, _result())
    columns.answer(0, _result(message=tools, finish_reason="tool_calls"))
    columns.fail(1, RateLimited("slow down", provider="sim"))
    columns.fail(3, BadRow("column 'q' holds NoneType, not text"))
    c = columns.columns
    assert list(c) == list(OUTPUT_COLUMNS)
    assert c["sluice_key"] == ["k0", "k1", "k2", "k3"]
    assert c["text"] == ["", None, "the answer", None]
    assert c["finish_reason"] == ["tool_calls", None, "stop", None]
    assert orjson.loads(c["tool_calls"][0]) == [
        {"id": "t1", "type": "function", "function": {"name": "f", "arguments": '{"a":1}'}}
    ]
    assert c["tool_calls"][2] is None
    assert c["input_tokens"] == [1000, None, 1000, None]
    assert c["cost_usd"] == [0.002, None, 0.002, None]
    assert c["model"] == ["sim:sim-small", None, "sim:sim-small", None]
    assert c["error_type"] == [None, "RateLimited", None, "BadRow"]
    assert "slow down" in c["error_message"][1]
    assert (columns.answered, columns.failed, columns.tokens) == (2, 2, 3000)
    assert columns.cost_micros == 4000
    assert isinstance(columns.first_error, RateLimited)  # the first failure in row order


def test_an_unpriced_model_has_no_cost_rather_than_zero():
    columns = ColumnsBuilder(["k"], PriceTable({}, shipped={}))
    columns.answer(0, _result())
    assert columns.columns["cost_usd"] == [None]
    other = ColumnsBuilder(["k"], PriceTable({}, shipped={}))
    other.fail(0, ServerError("boom", provider="sim", status=500))
    assert other.columns["error_type"] == ["ServerError"]
    bad = ColumnsBuilder(["a", "b"], PriceTable({}, shipped={}))
    bad.fail(1, ServerError("later", provider="sim", status=500))
    bad.fail(0, BadRow("column 'q' holds NoneType, not text"))
    assert isinstance(bad.first_error, ConfigError) and "holds NoneType" in str(bad.first_error)
