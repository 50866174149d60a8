"""``sluice chat --json`` against the recorded conformance traffic, served over loopback.

Every case of ``tests/conformance_data/manifest.json`` that has a recorded reply body gets one test
(request-only cases get none). A small replay server on 127.0.0.1 answers any POST with the
recorded status, the harmless recorded headers and the body bytes, then closes the
connection. The CLI runs in-process (``main([...])``) with ``--base-url`` pointing at that
server and ``--json``; ``--no-stream`` is added when the recording is a whole body. The JSON
it prints must match the normalized values the codec conformance modules
(``tests/test_conformance_*.py``) wrote out by hand for the same case: text, reasoning, tool
calls (arguments parsed), finish reason and usage; or, for an error, exit status 1 and the
error's type (the provider's own where it gave one), message and HTTP status.

Retries are off (``retry.max_attempts = 1`` through ``SLUICE_CONFIG``), so an error reply is
the call's result; the ledger file is off (``tests/conftest.py``).
"""

from __future__ import annotations

import http.server
import threading
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import attrs
import orjson
import pytest

from sluice._cli import main
from sluice._messages import Usage
from tests import (
    test_conformance_anthropic,
    test_conformance_gemini,
    test_conformance_ollama,
    test_conformance_openai,
)
from tests.conformance import Case, load_cases

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path
    from types import ModuleType

PROVIDERS: dict[str, tuple[str, str, ModuleType]] = {
    # recorded provider -> (sluice provider, base URL suffix, module with the expectations)
    "openai": ("openai", "/v1", test_conformance_openai),
    "openai_compat": ("openai", "/v1", test_conformance_openai),
    "deepseek": ("openai", "/v1", test_conformance_openai),
    "anthropic": ("anthropic", "/v1", test_conformance_anthropic),
    "gemini": ("gemini", "/v1beta", test_conformance_gemini),
    "ollama": ("ollama", "", test_conformance_ollama),
}
PATH_SUFFIX = {
    "openai": ("/v1/chat/completions",) * 2,
    "anthropic": ("/v1/messages",) * 2,
    "gemini": (":streamGenerateContent?alt=sse", ":generateContent"),
    "ollama": ("/api/chat",) * 2,
}
"""Per sluice provider: how the request path must end, (streamed, whole body)."""
DEFAULT_MODEL = {
    "openai": "gpt-4o",
    "anthropic": "claude-sonnet-4-5",
    "gemini": "gemini-2.5-flash",
    "ollama": "qwen3",
}
CONTENT_TYPE = {".sse": "text/event-stream", ".ndjson": "application/x-ndjson"}
DROPPED_HEADERS = frozenset(
    {
        "connection",
        "keep-alive",
        "content-length",
        "content-encoding",
        "transfer-encoding",
        "te",
        "trailer",
        "upgrade",
        "proxy-connection",
        "date",
        "server",
        "set-cookie",
        "alt-svc",
    }
)
"""Hop-by-hop headers, and ones the replay server writes itself or that describe the
recorder's connection (the stored bodies are already decoded)."""

CASES = [c for c in load_cases(frozenset(PROVIDERS)) if c.body_path is not None]


def expected_for(case: Case) -> Any:
    expected = PROVIDERS[case.provider][2].EXPECTED.get(case.name)
    assert expected is not None, f"no expectations written for {case.id}"
    return expected


def is_error(expected: Any) -> bool:
    """The conformance modules' ``ErrorReply`` classes all carry the error ``cls``."""
    return hasattr(expected, "cls")


def model_for(case: Case) -> str:
    provider, _, module = PROVIDERS[case.provider]
    recorded = case.request()
    if isinstance(recorded, dict) and isinstance(recorded.get("model"), str):
        return str(recorded["model"])
    request = getattr(module, "REQUESTS", {}).get(case.name)
    if request is not None:
        return str(request.model_name)
    return DEFAULT_MODEL[provider]


@attrs.define
class Seen:
    """What the replay server received."""

    requests: list[tuple[str, bytes]] = attrs.field(factory=list)


@contextmanager
def replay_server(status: int, headers: dict[str, str], body: bytes) -> Iterator[tuple[str, Seen]]:
    """Serve ``body`` with ``status`` and ``headers`` to any POST; yield the root URL."""
    seen = Seen()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            seen.requests.append((self.path, self.rfile.read(length)))
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("content-length", str(len(body)))
            self.send_header("connection", "close")
            self.end_headers()
            self.wfile.write(body)
            self.wfile.flush()
            self.close_connection = True

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def reply_headers(case: Case) -> dict[str, str]:
    headers = {k: v for k, v in case.headers().items() if k not in DROPPED_HEADERS}
    if "content-type" not in headers:
        path = case.body_path
        assert path is not None
        headers["content-type"] = CONTENT_TYPE.get(path.suffix, "application/json")
    return headers


@pytest.fixture(autouse=True)
def _no_retries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "sluice.json"
    config.write_bytes(orjson.dumps({"retry": {"max_attempts": 1}}))
    monkeypatch.setenv("SLUICE_CONFIG", str(config))


def run_chat(
    case: Case, capsys: pytest.CaptureFixture[str], body: bytes | None = None
) -> tuple[int, Any, str, list[tuple[str, bytes]]]:
    """Serve the case's reply, run ``sluice chat --json`` at it; return the exit status, the
    printed JSON, the model asked for and the requests the server saw."""
    provider, suffix, _ = PROVIDERS[case.provider]
    expected = expected_for(case)
    # A recorded error without headers (Anthropic's second 529) is served with the status
    # its source reported, which the expectations hold.
    status = expected.status if is_error(expected) else case.status()
    model = model_for(case)
    body = case.body() if body is None else body
    with replay_server(status, reply_headers(case), body) as (url, seen):
        argv = [
            "chat",
            f"{provider}:{model}",
            "hi",
            "--base-url",
            url + suffix,
            "--api-key",
            "test-key",
            "--json",
        ]
        if not case.streamed:
            argv.append("--no-stream")
        code = main(argv)
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert len(lines) == 1, f"expected one JSON line, got {out!r}"
    return code, orjson.loads(lines[0]), model, seen.requests


def assert_request_sent(case: Case, model: str, requests: list[tuple[str, bytes]]) -> None:
    """One request, to the protocol's path, saying "hi" and asking for a stream or not."""
    provider = PROVIDERS[case.provider][0]
    assert len(requests) == 1, "retries are off: one attempt"
    path, raw = requests[0]
    assert path.endswith(PATH_SUFFIX[provider][0 if case.streamed else 1])
    if provider == "gemini":
        assert f"/models/{model}:" in path
    else:
        assert orjson.loads(raw)["model"] == model
    assert b'"hi"' in raw


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_chat_json_prints_the_normalized_result(
    case: Case, capsys: pytest.CaptureFixture[str]
) -> None:
    expected = expected_for(case)
    code, printed, model, requests = run_chat(case, capsys)
    assert_request_sent(case, model, requests)
    if is_error(expected):
        assert code == 1, printed
        assert printed == {
            "error": {
                "type": getattr(expected, "error_type", None) or expected.cls.__name__,
                "message": expected.message,
                "status": expected.status,
            }
        }
        return
    if expected.finish_reason is None:
        # Ollama's documented example stops before its done line: the stream broke off.
        assert code == 1, printed
        assert printed["error"]["type"] == "StreamBroken"
        assert printed["error"]["status"] is None
        return
    assert code == 0, printed
    assert printed == {
        "provider": PROVIDERS[case.provider][0],
        "model": model,
        "text": expected.text,
        "reasoning": expected.reasoning,
        "tool_calls": [
            {"id": id_, "name": name, "arguments": arguments}
            for id_, name, arguments in expected.tool_calls
        ],
        "finish_reason": expected.finish_reason,
        "usage": attrs.asdict(expected.usage),
    }


DOC_CASES = [c for c in CASES if c.provider == "ollama" and c.name.startswith("DOC_")]


@pytest.mark.parametrize("case", DOC_CASES, ids=[c.id for c in DOC_CASES])
def test_documented_ollama_stream_completed_with_a_done_line(
    case: Case, capsys: pytest.CaptureFixture[str]
) -> None:
    """With the made-up ``done`` line of the Ollama module appended, the call completes."""
    expected = expected_for(case)
    body = case.body() + test_conformance_ollama.DONE_LINE
    code, printed, model, _ = run_chat(case, capsys, body)
    assert code == 0, printed
    assert printed == {
        "provider": "ollama",
        "model": model,
        "text": expected.text,
        "reasoning": expected.reasoning,
        "tool_calls": [
            {"id": id_, "name": name, "arguments": arguments}
            for id_, name, arguments in expected.tool_calls
        ],
        "finish_reason": "tool_calls",
        "usage": attrs.asdict(Usage(20, 9, 0, 0, 0)),
    }


def test_every_reply_case_is_covered() -> None:
    """Each recorded reply of the corpus is served to the CLI here."""
    if not CASES:
        pytest.skip("the conformance corpus is not there")
    with_bodies = [c for c in load_cases() if c.body_path is not None]
    assert [c.id for c in CASES] == [c.id for c in with_bodies]
