"""OpenAI Batch lines: splitting, parsing and rendering (pure, sync)."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluice._errors import ConfigError, ServerError, StreamBroken
from sluice._jobs.batch_lines import (
    BadLine,
    InputLine,
    LineSplitter,
    parse_input_line,
    render_bad_line,
    render_error_line,
    render_result_line,
)
from sluice._messages import ChatRequest, ChatResult, Message, Usage


def split_all(data: bytes, cuts: list[int]) -> list[tuple[int, bytes]]:
    splitter = LineSplitter()
    out = []
    start = 0
    for cut in sorted(cuts):
        out += splitter.feed(data[start:cut])
        start = cut
    out += splitter.feed(data[start:])
    out += splitter.close()
    return out


def test_lines_are_numbered_from_one_counting_blank_ones():
    data = b'{"a":1}\n\n{"b":2}\r\nlast'
    assert split_all(data, []) == [(1, b'{"a":1}'), (2, b""), (3, b'{"b":2}'), (4, b"last")]


def test_a_final_newline_does_not_make_an_extra_line():
    assert split_all(b"x\ny\n", []) == [(1, b"x"), (2, b"y")]


@given(
    lines=st.lists(
        st.text(alphabet=st.characters(exclude_categories=["Cs"], exclude_characters="\r\n")),
        max_size=8,
    ),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=10),
)
def test_any_chunking_gives_the_same_lines(lines, cuts):
    data = "".join(line + "\n" for line in lines).encode()
    expected = [(i + 1, line.encode()) for i, line in enumerate(lines)]
    assert split_all(data, [c for c in cuts if c <= len(data)]) == expected


def line(**fields) -> bytes:
    fields.setdefault("custom_id", "r1")
    fields.setdefault("method", "POST")
    fields.setdefault("url", "/v1/chat/completions")
    fields.setdefault(
        "body", {"model": "sim:sim-small", "messages": [{"role": "user", "content": "Hi"}]}
    )
    return orjson.dumps(fields)


def test_a_valid_line_becomes_a_streaming_request():
    item = parse_input_line(line(), 3)
    assert isinstance(item, InputLine)
    assert (item.lineno, item.custom_id, item.request.model) == (3, "r1", "sim:sim-small")
    assert item.endpoint == "chat" and isinstance(item.request, ChatRequest)
    assert item.request.stream is True


def test_method_and_url_may_be_left_out():
    raw = orjson.dumps(
        {
            "custom_id": "r",
            "body": {"model": "sim:x", "messages": [{"role": "user", "content": "y"}]},
        }
    )
    assert isinstance(parse_input_line(raw, 1), InputLine)


def test_blank_lines_are_not_requests():
    assert parse_input_line(b"   ", 4) is None


def test_model_override_applies_to_bare_model_names():
    item = parse_input_line(
        line(body={"model": "gpt-4o", "messages": [{"role": "user", "content": "x"}]}),
        1,
        model="sim:m",
    )
    assert isinstance(item, InputLine)
    assert item.request.model == "sim:m"


@pytest.mark.parametrize(
    ("raw", "custom_id", "code", "message"),
    [
        (b"{not json", None, "invalid_json_line", "line 7: not valid JSON"),
        (b"[1, 2]", None, "invalid_json_line", "line 7: expected a JSON object"),
        (line(custom_id=None), None, "missing_required_parameter", "line 7: custom_id missing"),
        (
            line(custom_id=5),
            None,
            "missing_required_parameter",
            "line 7: custom_id must be a non-empty string",
        ),
        (line(method="GET"), "r1", "invalid_method", "line 7: method must be POST"),
        (
            line(url="/v1/images/generations"),
            "r1",
            "invalid_url",
            "line 7: url must be /v1/chat/completions, /v1/responses or /v1/embeddings",
        ),
        (
            orjson.dumps({"custom_id": "r1"}),
            "r1",
            "missing_required_parameter",
            "line 7: body missing",
        ),
        (
            line(body={"model": "gpt-4o", "messages": [{"role": "user", "content": "x"}]}),
            "r1",
            "invalid_request",
            "line 7: body.model: 'gpt-4o' names no provider; write it as 'provider:model'",
        ),
    ],
)
def test_bad_lines_say_which_line_and_what_is_wrong(raw, custom_id, code, message):
    item = parse_input_line(raw, 7)
    assert isinstance(item, BadLine)
    assert (item.lineno, item.custom_id, item.code) == (7, custom_id, code)
    assert item.message.startswith(message)


def test_result_line_has_the_openai_batch_shape():
    result = ChatResult(
        call_id="c1",
        provider="sim",
        model="sim-small",
        message=Message.assistant("Hi!"),
        finish_reason="stop",
        usage=Usage(3, 2),
        request_id="req-1",
    )
    raw = render_result_line("r1", result, line_id="batch_req_1", created=5)
    assert raw.endswith(b"\n") and raw.count(b"\n") == 1
    out = orjson.loads(raw)
    assert out["id"] == "batch_req_1"
    assert out["custom_id"] == "r1"
    assert out["error"] is None
    assert out["response"]["status_code"] == 200
    assert out["response"]["request_id"] == "req-1"
    assert out["response"]["body"]["object"] == "chat.completion"
    assert out["response"]["body"]["choices"][0]["message"]["content"] == "Hi!"
    assert out["response"]["body"]["usage"]["total_tokens"] == 5


def test_bad_line_has_no_response():
    out = orjson.loads(
        render_bad_line(BadLine(2, None, "invalid_json_line", "line 2: nope"), line_id="b")
    )
    assert out == {
        "id": "b",
        "custom_id": None,
        "response": None,
        "error": {"code": "invalid_json_line", "message": "line 2: nope"},
    }


def test_provider_error_keeps_its_status_and_type():
    error = ServerError(
        "boom", provider="sim", model="m", status=503, error_type="server_error", request_id="q"
    )
    out = orjson.loads(render_error_line("r1", 4, error, line_id="b"))
    assert out["custom_id"] == "r1"
    assert out["error"]["code"] == "server_error"
    assert out["error"]["message"].startswith("line 4: ")
    assert "boom" in out["error"]["message"]
    assert out["response"]["status_code"] == 503
    assert out["response"]["request_id"] == "q"
    assert out["response"]["body"]["error"]["message"] == "boom"


def test_error_without_a_reply_has_no_response_and_uses_the_class_name():
    out = orjson.loads(render_error_line("r1", 9, StreamBroken("cut"), line_id="b"))
    assert out["response"] is None
    assert out["error"]["code"] == "StreamBroken"
    out = orjson.loads(
        render_error_line("r2", 10, ConfigError("unknown provider 'x'"), line_id="b")
    )
    assert out["error"] == {"code": "ConfigError", "message": "line 10: unknown provider 'x'"}


def test_scan_output_marks_store_errors_for_redoing_and_keeps_other_errors():
    from sluice._jobs.batch_lines import scan_output

    store_error = {"code": "StoreUnavailable", "message": "line 1: the quota store does not answer"}
    other_error = {"code": "RateLimited", "message": "line 2: 429"}
    lines = [
        orjson.dumps({"custom_id": "a", "response": None, "error": store_error}) + b"\n",
        orjson.dumps({"custom_id": "b", "response": None, "error": other_error}) + b"\n",
        orjson.dumps({"custom_id": "c", "response": {}, "error": None}) + b"\n",
    ]
    answered = scan_output(lines)
    assert answered.redo == frozenset({"a"})
    assert answered.custom_ids == frozenset({"b", "c"})
    assert answered.keep == sum(len(x) for x in lines)
