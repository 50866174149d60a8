"""A codec's first plain call loads none of the rarer modules; its first tool call still works.

The rarer events (reasoning and tool-call deltas), the errors with fields of their own, the
conversation parts a text chat never builds and the HTTP error mapping each load with the first
reply that needs them. Every codec names them through their packages where they are made, so a
program whose first reply is plain text (on any of the five protocols) never pays for their
classes. Each check runs in a fresh interpreter: in this one they are long loaded.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import orjson
import pytest

RARE_MODULES = (
    "sluice._conversation_rare",
    "sluice._errors.rare",
    "sluice._events.rare",
    "sluice._protocols.http_errors",
)

_WEATHER = {"city": "Paris"}

# Per protocol: a plain reply whole and streamed, a tool-call reply whole and streamed, and an
# error reply (status, body). Shapes as each API sends them; every text is "Hi".
REPLIES: dict[str, dict[str, Any]] = {
    "openai": {
        "body": {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "model": "gpt-x",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "Hi"},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
        },
        "stream": [
            b'data: {"id":"c1","object":"chat.completion.chunk","model":"gpt-x","choices":'
            b'[{"index":0,"delta":{"role":"assistant","content":"H"},"finish_reason":null}]}\n\n',
            b'data: {"id":"c1","object":"chat.completion.chunk","model":"gpt-x","choices":'
            b'[{"index":0,"delta":{"content":"i"},"finish_reason":"stop"}],'
            b'"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}\n\n',
            b"data: [DONE]\n\n",
        ],
        "tool_body": {
            "id": "chatcmpl-2",
            "object": "chat.completion",
            "model": "gpt-x",
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": "call_1",
                                "type": "function",
                                "function": {
                                    "name": "get_weather",
                                    "arguments": '{"city": "Paris"}',
                                },
                            }
                        ],
                    },
                    "finish_reason": "tool_calls",
                }
            ],
        },
        "tool_stream": [
            b'data: {"id":"c2","object":"chat.completion.chunk","model":"gpt-x","choices":'
            b'[{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"call_1",'
            b'"type":"function","function":{"name":"get_weather","arguments":""}}]}}]}\n\n',
            b'data: {"id":"c2","object":"chat.completion.chunk","model":"gpt-x","choices":'
            b'[{"index":0,"delta":{"tool_calls":[{"index":0,"function":'
            b'{"arguments":"{\\"city\\": \\"Paris\\"}"}}]},"finish_reason":"tool_calls"}]}\n\n',
            b"data: [DONE]\n\n",
        ],
        "error": (
            429,
            {"error": {"message": "slow down", "type": "requests", "code": "rate_limit_exceeded"}},
        ),
    },
    "anthropic": {
        "body": {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-x",
            "content": [{"type": "text", "text": "Hi"}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 3, "output_tokens": 1},
        },
        "stream": [
            b'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_1",'
            b'"type":"message","role":"assistant","model":"claude-x","content":[],'
            b'"stop_reason":null,"stop_sequence":null,'
            b'"usage":{"input_tokens":3,"output_tokens":1}}}\n\n',
            b'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
            b'"content_block":{"type":"text","text":""}}\n\n',
            b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
            b'"delta":{"type":"text_delta","text":"Hi"}}\n\n',
            b'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n',
            b'event: message_delta\ndata: {"type":"message_delta","delta":'
            b'{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":1}}\n\n',
            b'event: message_stop\ndata: {"type":"message_stop"}\n\n',
        ],
        "tool_body": {
            "id": "msg_2",
            "type": "message",
            "role": "assistant",
            "model": "claude-x",
            "content": [
                {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": _WEATHER}
            ],
            "stop_reason": "tool_use",
            "stop_sequence": None,
            "usage": {"input_tokens": 3, "output_tokens": 9},
        },
        "tool_stream": [
            b'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_2",'
            b'"type":"message","role":"assistant","model":"claude-x","content":[],'
            b'"stop_reason":null,"stop_sequence":null,'
            b'"usage":{"input_tokens":3,"output_tokens":1}}}\n\n',
            b'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
            b'"content_block":{"type":"tool_use","id":"call_1","name":"get_weather",'
            b'"input":{}}}\n\n',
            b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
            b'"delta":{"type":"input_json_delta","partial_json":"{\\"city\\": \\"Paris\\"}"}}\n\n',
            b'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n',
            b'event: message_delta\ndata: {"type":"message_delta","delta":'
            b'{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":9}}\n\n',
            b'event: message_stop\ndata: {"type":"message_stop"}\n\n',
        ],
        "error": (
            529,
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
        ),
    },
    "gemini": {
        "body": {
            "candidates": [
                {"content": {"parts": [{"text": "Hi"}], "role": "model"}, "finishReason": "STOP"}
            ],
            "usageMetadata": {
                "promptTokenCount": 3,
                "candidatesTokenCount": 1,
                "totalTokenCount": 4,
            },
            "modelVersion": "gemini-x",
            "responseId": "r1",
        },
        "stream": [
            b'data: {"candidates":[{"content":{"parts":[{"text":"H"}],"role":"model"}}],'
            b'"modelVersion":"gemini-x","responseId":"r1"}\r\n\r\n',
            b'data: {"candidates":[{"content":{"parts":[{"text":"i"}],"role":"model"},'
            b'"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":3,'
            b'"candidatesTokenCount":1,"totalTokenCount":4},"modelVersion":"gemini-x",'
            b'"responseId":"r1"}\r\n\r\n',
        ],
        "tool_body": {
            "candidates": [
                {
                    "content": {
                        "parts": [
                            {
                                "functionCall": {
                                    "id": "call_1",
                                    "name": "get_weather",
                                    "args": _WEATHER,
                                }
                            }
                        ],
                        "role": "model",
                    },
                    "finishReason": "STOP",
                }
            ],
            "modelVersion": "gemini-x",
        },
        "tool_stream": [
            b'data: {"candidates":[{"content":{"parts":[{"functionCall":{"id":"call_1",'
            b'"name":"get_weather","args":{"city":"Paris"}}}],"role":"model"},'
            b'"finishReason":"STOP"}],"modelVersion":"gemini-x"}\r\n\r\n',
        ],
        "error": (
            503,
            {
                "error": {
                    "code": 503,
                    "message": "The model is overloaded.",
                    "status": "UNAVAILABLE",
                }
            },
        ),
    },
    "ollama": {
        "body": {
            "model": "llama",
            "created_at": "2026-01-01T00:00:00Z",
            "message": {"role": "assistant", "content": "Hi"},
            "done": True,
            "done_reason": "stop",
            "prompt_eval_count": 3,
            "eval_count": 1,
        },
        "stream": [
            b'{"model":"llama","message":{"role":"assistant","content":"H"},"done":false}\n',
            b'{"model":"llama","message":{"role":"assistant","content":"i"},"done":false}\n',
            b'{"model":"llama","message":{"role":"assistant","content":""},"done":true,'
            b'"done_reason":"stop","prompt_eval_count":3,"eval_count":1}\n',
        ],
        "tool_body": {
            "model": "llama",
            "message": {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"id": "call_1", "function": {"name": "get_weather", "arguments": _WEATHER}}
                ],
            },
            "done": True,
            "done_reason": "stop",
        },
        "tool_stream": [
            b'{"model":"llama","message":{"role":"assistant","content":"","tool_calls":'
            b'[{"id":"call_1","function":{"name":"get_weather","arguments":{"city":"Paris"}}}]},'
            b'"done":false}\n',
            b'{"model":"llama","message":{"role":"assistant","content":""},"done":true,'
            b'"done_reason":"stop"}\n',
        ],
        "error": (500, {"error": "model runner has unexpectedly stopped"}),
    },
    "openai-responses": {
        "body": {
            "id": "resp_1",
            "object": "response",
            "status": "completed",
            "model": "gpt-x",
            "output": [
                {
                    "type": "message",
                    "id": "msg_1",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": "Hi", "annotations": []}],
                }
            ],
            "usage": {"input_tokens": 3, "output_tokens": 1, "total_tokens": 4},
        },
        "stream": [
            b'event: response.created\ndata: {"type":"response.created","response":'
            b'{"id":"resp_1","object":"response","status":"in_progress","model":"gpt-x",'
            b'"output":[]}}\n\n',
            b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta",'
            b'"item_id":"msg_1","output_index":0,"content_index":0,"delta":"Hi"}\n\n',
            b'event: response.completed\ndata: {"type":"response.completed","response":'
            b'{"id":"resp_1","object":"response","status":"completed","model":"gpt-x",'
            b'"output":[{"type":"message","id":"msg_1","role":"assistant","status":"completed",'
            b'"content":[{"type":"output_text","text":"Hi","annotations":[]}]}],'
            b'"usage":{"input_tokens":3,"output_tokens":1,"total_tokens":4}}}\n\n',
        ],
        "tool_body": {
            "id": "resp_2",
            "object": "response",
            "status": "completed",
            "model": "gpt-x",
            "output": [
                {
                    "type": "function_call",
                    "id": "fc_1",
                    "call_id": "call_1",
                    "name": "get_weather",
                    "arguments": '{"city": "Paris"}',
                    "status": "completed",
                }
            ],
        },
        "tool_stream": [
            b'event: response.output_item.added\ndata: {"type":"response.output_item.added",'
            b'"output_index":0,"item":{"type":"function_call","id":"fc_1","call_id":"call_1",'
            b'"name":"get_weather","arguments":"","status":"in_progress"}}\n\n',
            b'event: response.function_call_arguments.delta\ndata: {"type":'
            b'"response.function_call_arguments.delta","item_id":"fc_1","output_index":0,'
            b'"delta":"{\\"city\\": \\"Paris\\"}"}\n\n',
            b'event: response.completed\ndata: {"type":"response.completed","response":'
            b'{"id":"resp_2","object":"response","status":"completed","model":"gpt-x",'
            b'"output":[{"type":"function_call","id":"fc_1","call_id":"call_1",'
            b'"name":"get_weather","arguments":"{\\"city\\": \\"Paris\\"}",'
            b'"status":"completed"}]}}\n\n',
        ],
        "error": (
            400,
            {"error": {"message": "bad temperature", "type": "invalid_request_error"}},
        ),
    },
}

# Run in a fresh interpreter: the replies come in as JSON on stdin; what each step loaded and
# produced goes out as JSON on stdout.
_SCRIPT = """
import json, sys
import orjson
from sluice._messages import ChatRequest, Message
from sluice._protocols import codec_for

RARE = {rare!r}
data = json.loads(sys.stdin.read())
protocol = data["protocol"]
found = {{}}

def loaded():
    return [name for name in RARE if name in sys.modules]

def stream(codec, pieces):
    decoder = codec.stream_decoder("c1")
    kinds = []
    for piece in pieces:
        kinds += [type(event).__name__ for event in decoder.feed(piece.encode("latin-1"))]
    return kinds, decoder.finish()

codec = codec_for(protocol)
request = ChatRequest(model="p:m", messages=[Message.user("Hello")], stream=True)
codec.build_request(request, base_url="http://127.0.0.1:9/v1", api_key="k")
plain = codec.decode_body(orjson.dumps(data["body"]))
kinds, streamed = stream(codec, data["stream"])
found["plain"] = {{
    "loaded": loaded(),
    "text": plain.message.text,
    "finish": plain.finish_reason,
    "stream_text": streamed.message.text,
    "stream_events": sorted(set(kinds)),
}}

calls = codec.decode_body(orjson.dumps(data["tool_body"])).message.tool_calls
kinds, streamed = stream(codec, data["tool_stream"])
found["tools"] = {{
    "calls": [[c.id, c.name, json.loads(c.arguments)] for c in calls],
    "stream_calls": [
        [c.id, c.name, json.loads(c.arguments)] for c in streamed.message.tool_calls
    ],
    "stream_finish": streamed.finish_reason,
    "stream_events": sorted(set(kinds)),
}}
from sluice._messages import Tool, ToolCall
history = [
    Message.user("Weather?"),
    Message.assistant([ToolCall(id="call_1", name="get_weather", arguments='{{"city": "Paris"}}')]),
    Message.tool("call_1", "sunny"),
]
with_tools = ChatRequest(
    model="p:m", messages=history, tools=[Tool(name="get_weather")], tool_choice="auto"
)
sent = codec.build_request(with_tools, base_url="http://127.0.0.1:9/v1", api_key="k")
# The tool's own name is in its definition: the call's arguments and the result's text show
# that the call and its result reached the body too.
found["tools"]["request_names_the_call"] = b"Paris" in sent.body and b"sunny" in sent.body
status, error_body = data["error"]
error = codec.decode_error(status, {{}}, orjson.dumps(error_body), wall_now=0.0)
found["error"] = {{"type": type(error).__name__, "message": str(error)}}
print(json.dumps(found))
"""


def _run(protocol: str) -> dict[str, dict[str, Any]]:
    replies = dict(REPLIES[protocol])
    for key in ("stream", "tool_stream"):
        replies[key] = [piece.decode("latin-1") for piece in replies[key]]
    stdin = orjson.dumps({"protocol": protocol, **replies})
    script = _SCRIPT.format(rare=RARE_MODULES)
    done = subprocess.run(
        [sys.executable, "-c", script], input=stdin, capture_output=True, timeout=60
    )
    assert done.returncode == 0, done.stderr.decode()
    found: dict[str, dict[str, Any]] = orjson.loads(done.stdout)
    return found


EXPECTED_ERRORS = {
    "openai": "RateLimited",
    "anthropic": "Overloaded",
    "gemini": "Overloaded",
    "ollama": "ServerError",
    "openai-responses": "BadRequest",
}


@pytest.mark.parametrize("protocol", sorted(REPLIES))
def test_a_plain_first_call_loads_no_rare_module(protocol: str) -> None:
    """Building a text request and decoding a text reply, whole and streamed, loads none of
    the rarer modules, and decodes the text."""
    plain = _run(protocol)["plain"]
    assert plain == {
        "loaded": [],
        "text": "Hi",
        "finish": "stop",
        "stream_text": "Hi",
        "stream_events": ["TextDelta", "UsageReported"],
    }


@pytest.mark.parametrize("protocol", sorted(REPLIES))
def test_the_first_tool_call_and_error_after_a_plain_one_come_out_whole(protocol: str) -> None:
    """In the same fresh interpreter, after the plain call: a tool-call reply (whole and
    streamed), a request carrying a tool, a call and its result, and an error reply each load
    what they need on the spot and come out as they would with everything loaded."""
    found = _run(protocol)
    tools = found["tools"]
    call = ["call_1", "get_weather", _WEATHER]
    assert tools["calls"] == [call]
    assert tools["stream_calls"] == [call]
    assert tools["stream_finish"] == "tool_calls"
    assert "ToolCallDelta" in tools["stream_events"]
    assert tools["request_names_the_call"] is True
    assert found["error"]["type"] == EXPECTED_ERRORS[protocol]
