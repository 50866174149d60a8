"""The batch backends' wire shapes against a test server of this suite's own (an
``httpx.MockTransport`` answering with the bodies the providers document, fields sluice ignores
included): what is sent (multipart fields, JSON bodies, headers, the key only where it
belongs) and what is read back. The request bodies are checked against what the realtime lane
sends for the same request, captured on the same test server."""

from __future__ import annotations

import email.parser
import email.policy
from typing import TYPE_CHECKING, Any

import httpx
import orjson
import pytest

import sluice
from sluice import ChatRequest, RuntimeConfig
from sluice._errors import BadRequest
from sluice._jobs.provider_batch.backends import backend_for

from .batch_wire_examples import (
    ANTHROPIC_BATCH,
    ANTHROPIC_BATCH_ENDED,
    ANTHROPIC_REALTIME_MESSAGE,
    ANTHROPIC_RESULTS,
    OPENAI_BATCH,
    OPENAI_BATCH_DONE,
    OPENAI_BATCH_FAILED,
    OPENAI_CHAT_COMPLETION,
    OPENAI_ERROR_LINE,
    OPENAI_EXPIRED_LINE,
    OPENAI_FILE,
    OPENAI_OUTPUT_LINE,
)

if TYPE_CHECKING:
    from collections.abc import Callable

OPENAI_KEY = "sk-proj-wire-test-key-7f3a9c"
ANTHROPIC_KEY = "sk-ant-api03-wire-test-key-2b8d"


def chat_request(provider: str) -> ChatRequest:
    return ChatRequest(
        model=f"{provider}:gpt-4o-mini",
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hello"},
        ],
        max_tokens=50,
        temperature=0.2,
        stream=False,
    )


class Server:
    """Records every request and answers with ``routes[(method, path)]`` (a body, a list of
    bodies answered in turn, or a callable of the request)."""

    def __init__(self, routes: dict[tuple[str, str], Any]) -> None:
        self.routes = routes
        self.seen: list[httpx.Request] = []

    def transport(self) -> httpx.MockTransport:
        async def handler(request: httpx.Request) -> httpx.Response:
            await request.aread()
            self.seen.append(request)
            answer = self.routes[(request.method, request.url.path)]
            if isinstance(answer, list):
                answer = answer.pop(0)
            if callable(answer):
                answer = answer(request)
            if isinstance(answer, httpx.Response):
                return answer
            if isinstance(answer, bytes):
                return httpx.Response(200, content=answer)
            return httpx.Response(200, json=answer, headers={"x-request-id": "req_ctl"})

        return httpx.MockTransport(handler)

    def requests_to(self, method: str, path: str) -> list[httpx.Request]:
        return [r for r in self.seen if r.method == method and r.url.path == path]


def jsonl(*records: dict[str, Any]) -> bytes:
    return b"".join(orjson.dumps(r) + b"\n" for r in records)


def multipart(request: httpx.Request) -> dict[str, tuple[str | None, bytes]]:
    """The form parts of a multipart request, read by the standard library's MIME parser."""
    head = f"Content-Type: {request.headers['content-type']}\r\n\r\n".encode()
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + request.content)
    parts: dict[str, tuple[str | None, bytes]] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        assert isinstance(name, str) and isinstance(payload, bytes)
        parts[name] = (part.get_filename(), payload)
    return parts


def assert_key_only_in_auth(server: Server, key: str, auth: Callable[[httpx.Request], str]) -> None:
    for request in server.seen:
        assert auth(request) == key
        assert key.encode() not in request.content
        assert key not in str(request.url)


async def test_openai_sends_the_documented_shapes_and_reads_the_documented_replies() -> None:
    server = Server(
        {
            ("POST", "/v1/chat/completions"): OPENAI_CHAT_COMPLETION,
            ("POST", "/v1/files"): OPENAI_FILE,
            ("POST", "/v1/batches"): OPENAI_BATCH,
            ("GET", "/v1/batches/batch_abc123"): [OPENAI_BATCH_DONE, OPENAI_BATCH_DONE],
            ("GET", "/v1/files/file-cvaTdG/content"): jsonl(OPENAI_OUTPUT_LINE),
            ("GET", "/v1/files/file-HOWS94/content"): jsonl(OPENAI_ERROR_LINE, OPENAI_EXPIRED_LINE),
            ("POST", "/v1/batches/batch_abc123/cancel"): OPENAI_BATCH
            | {"status": "cancelling", "cancelling_at": 1711471600},
        }
    )
    environ = {"OPENAI_API_KEY": OPENAI_KEY}
    async with sluice.open_runtime(
        RuntimeConfig(), transport=server.transport(), environ=environ
    ) as rt:
        realtime = await rt.chat(chat_request("openai"))
        [realtime_request] = server.requests_to("POST", "/v1/chat/completions")
        backend = backend_for(rt, "openai")
        assert backend is not None and backend.name == "openai"
        assert OPENAI_KEY not in repr(backend)
        entries = [backend.entry("request-2", chat_request("openai"))]
        file_id = await backend.upload(entries)
        assert file_id == "file-abc123"
        batch = await backend.create(entries, file_id, "fp-1")
        got = await backend.get("batch_abc123")
        outcomes = [o async for o in backend.results(got)]
        cancelling = await backend.cancel("batch_abc123")

    # What was sent: the file, as a multipart form OpenAI's parser reads.
    [upload] = server.requests_to("POST", "/v1/files")
    assert upload.headers["content-type"].startswith("multipart/form-data; boundary=")
    parts = multipart(upload)
    assert parts["purpose"] == (None, b"batch")
    filename, content = parts["file"]
    assert filename is not None and filename.endswith(".jsonl")
    [line] = [orjson.loads(raw) for raw in content.splitlines()]
    assert line == {
        "custom_id": "request-2",
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": orjson.loads(realtime_request.content),
    }
    assert "stream" not in line["body"] and line["body"]["max_completion_tokens"] == 50
    [create] = server.requests_to("POST", "/v1/batches")
    assert orjson.loads(create.content) == {
        "input_file_id": "file-abc123",
        "endpoint": "/v1/chat/completions",
        "completion_window": "24h",
        "metadata": {"sluice_fingerprint": "fp-1"},
    }
    assert create.headers["content-type"] == "application/json"
    for request in server.seen:
        assert request.headers["user-agent"].startswith("sluice/")
    assert_key_only_in_auth(
        server, OPENAI_KEY, lambda r: r.headers["authorization"].removeprefix("Bearer ")
    )

    # What was read.
    assert (batch.id, batch.state, batch.fingerprint) == ("batch_abc123", "running", "fp-1")
    assert batch.created_at == 1711471533.0
    assert (got.state, got.total, got.done, got.failed) == ("ended", 3, 3, 2)
    ok, error, expired = outcomes
    assert ok.wire_id == "request-2" and ok.kind == "ok" and ok.request_id == "req_c187b3"
    assert ok.output is not None
    assert ok.output.message == realtime.message
    assert ok.output.usage == realtime.usage
    assert ok.output.response_id == "chatcmpl-123"
    assert ok.output.system_fingerprint == "fp_3bc1b5746c"
    assert error.wire_id == "request-1" and error.kind == "error"
    assert isinstance(error.error, BadRequest) and error.error.status == 400
    assert error.error.param == "temperature" and error.error.code == "invalid_value"
    assert error.request_id == "req_789"
    assert (expired.wire_id, expired.kind) == ("request-3", "expired")
    assert cancelling.state == "cancelling"


async def test_openai_reads_a_failed_batch_and_pages_the_list_in_find() -> None:
    older = OPENAI_BATCH | {"id": "batch_old", "created_at": 1700000000, "metadata": None}
    mine = OPENAI_BATCH_FAILED | {"id": "batch_mine", "created_at": 1711471533}
    pages = [
        {
            "object": "list",
            "data": [OPENAI_BATCH | {"id": "batch_new", "metadata": {"other": "x"}}],
            "first_id": "batch_new",
            "last_id": "batch_new",
            "has_more": True,
        },
        {
            "object": "list",
            "data": [mine, older],
            "first_id": "batch_mine",
            "last_id": "batch_old",
            "has_more": True,
        },
    ]
    server = Server({("GET", "/v1/batches"): pages})
    environ = {"OPENAI_API_KEY": OPENAI_KEY}
    async with sluice.open_runtime(
        RuntimeConfig(), transport=server.transport(), environ=environ
    ) as rt:
        backend = backend_for(rt, "openai")
        assert backend is not None
        found = await backend.find("fp-1", since=1711471000.0)
    assert found is not None and found.id == "batch_mine" and found.state == "ended"
    assert found.problem is not None and "Enqueued token limit reached" in found.problem
    first, second = server.requests_to("GET", "/v1/batches")
    assert first.url.params["limit"] == "100" and "after" not in first.url.params
    assert second.url.params["after"] == "batch_new"


async def test_anthropic_sends_the_documented_shapes_and_reads_the_documented_replies() -> None:
    batch_path = "/v1/messages/batches/msgbatch_013Zva2CMHLNnXjNJJKqJ2EF"
    server = Server(
        {
            ("POST", "/v1/messages"): ANTHROPIC_REALTIME_MESSAGE,
            ("POST", "/v1/messages/batches"): ANTHROPIC_BATCH,
            ("GET", batch_path): ANTHROPIC_BATCH_ENDED,
            ("GET", batch_path + "/results"): jsonl(*ANTHROPIC_RESULTS),
            ("POST", batch_path + "/cancel"): ANTHROPIC_BATCH
            | {"processing_status": "canceling", "cancel_initiated_at": "2024-09-24T18:40:00Z"},
            ("GET", "/v1/messages/batches"): {
                "data": [ANTHROPIC_BATCH_ENDED],
                "has_more": False,
                "first_id": "msgbatch_013Zva2CMHLNnXjNJJKqJ2EF",
                "last_id": "msgbatch_013Zva2CMHLNnXjNJJKqJ2EF",
            },
        }
    )
    environ = {"ANTHROPIC_API_KEY": ANTHROPIC_KEY}
    async with sluice.open_runtime(
        RuntimeConfig(), transport=server.transport(), environ=environ
    ) as rt:
        realtime = await rt.chat(chat_request("anthropic"))
        [realtime_request] = server.requests_to("POST", "/v1/messages")
        backend = backend_for(rt, "anthropic")
        assert backend is not None and backend.name == "anthropic"
        assert ANTHROPIC_KEY not in repr(backend)
        entries = [
            backend.entry("my-second-request", chat_request("anthropic")),
            backend.entry("row 7/b", chat_request("anthropic")),
        ]
        assert await backend.upload(entries) is None
        batch = await backend.create(entries, None, "fp-1")
        ended = await backend.get(batch.id)
        outcomes = [o async for o in backend.results(ended)]
        cancelling = await backend.cancel(batch.id)
        found = await backend.find("fp-2", since=1727202000.0)

    [create] = server.requests_to("POST", "/v1/messages/batches")
    sent = orjson.loads(create.content)
    params = orjson.loads(realtime_request.content)
    assert sent == {
        "requests": [
            {"custom_id": "my-second-request", "params": params},
            {"custom_id": entries[1].wire_id, "params": params},
        ]
    }
    assert entries[1].wire_id.startswith("h-") and "stream" not in params
    for request in server.seen:
        assert request.headers["anthropic-version"] == "2023-06-01"
        assert request.headers["user-agent"].startswith("sluice/")
    assert_key_only_in_auth(server, ANTHROPIC_KEY, lambda r: r.headers["x-api-key"])
    assert server.requests_to("GET", "/v1/messages/batches")[0].url.params["limit"] == "100"

    assert (batch.state, batch.fingerprint, batch.total) == ("running", "fp-1", 2)
    assert batch.created_at == pytest.approx(1727203044.100435)
    assert (ended.state, ended.total, ended.done, ended.failed) == ("ended", 4, 4, 3)
    ok, errored, cancelled, expired = outcomes
    assert ok.kind == "ok" and ok.output is not None
    assert ok.output.message == realtime.message
    assert ok.output.response_id == "msg_014VwiXbi91y3JMjcpyGBHX5"
    assert errored.kind == "error" and isinstance(errored.error, BadRequest)
    assert errored.error.message == "max_tokens: Field required"
    assert errored.request_id == "req_011CSHoEeqs5C35K2UUqR7Fy"
    assert (cancelled.kind, expired.kind) == ("cancelled", "expired")
    assert cancelling.state == "cancelling"
    assert found is not None and found.fingerprint == "fp-2"


async def test_a_server_answering_html_is_a_clear_terminal_error() -> None:
    html = httpx.Response(200, content=b"<html><body>Welcome</body></html>")
    server = Server({("GET", "/v1/batches/batch_x"): lambda _: html})
    environ = {"OPENAI_API_KEY": OPENAI_KEY}
    async with sluice.open_runtime(
        RuntimeConfig(), transport=server.transport(), environ=environ
    ) as rt:
        backend = backend_for(rt, "openai")
        assert backend is not None
        with pytest.raises(sluice.CallError, match="not JSON") as caught:
            await backend.get("batch_x")
    assert not caught.value.retryable
    assert len(server.seen) == 1
