"""A plain OpenAI-compatible chat server for outage tests, independent of sluice.

Written on the standard library only (``http.server`` in a thread), so the faults it injects
do not go through the simulator's own fault code: a test that passes against it says sluice
copes with a server it has never seen. It streams ``echo: <prompt>`` in three SSE chunks, and
per request either answers, or (with probability ``fault_rate``) injects one of: 429, 500,
529, a disconnect after the first chunk, or a stall (the server hangs up after ``stall``
seconds without a reply). A 429 carries ``retry-after-ms`` when ``retry_after_ms`` is set, as
OpenAI's and Azure's do; without it the client falls back on its default cooldown. ``down``
turns the whole server into an outage: ``"502"`` answers an nginx-style HTML 502 page,
``"reset"`` resets every connection without a reply. Replies report ``completion_tokens``
output tokens (at most the request's ``max_tokens``), so a test knows what each costs.
"""

from __future__ import annotations

import json
import random
import socket
import struct
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from collections.abc import Iterator

FAULTS = ("429", "500", "529", "disconnect", "stall")
BAD_GATEWAY = (
    b"<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n"
    b"<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n"
    b"</html>\r\n"
)


class _QuietServer(ThreadingHTTPServer):
    request_queue_size = 1024
    """A batch opens hundreds of connections at once: with the default backlog of 5 the
    kernel drops handshakes, and the client's retransmissions can stall a call for minutes."""

    def handle_error(self, request: object, client_address: object) -> None:
        """Resets we caused ourselves: nothing to report."""


class FaultyServer:
    """Start with ``with FaultyServer(...) as server:``; ``server.url`` is its ``/v1`` base."""

    def __init__(
        self,
        *,
        fault_rate: float = 0.0,
        stall: float = 3.0,
        seed: int = 0,
        retry_after_ms: int | None = None,
        completion_tokens: int = 3,
        delay: float = 0.0,
    ) -> None:
        self.fault_rate = fault_rate
        self.delay = delay
        """Seconds every answer waits before its first byte (a provider's time to answer)."""
        self.completion_tokens = completion_tokens
        """The output tokens each reply reports, at most the request's ``max_tokens`` (as a
        real provider bills), so a test can know what every call costs."""
        self.retry_after_ms = retry_after_ms
        self.stall = stall
        self.down: Literal["502", "reset"] | None = None
        self.requests = 0
        """Chat requests received (every one, answered or not)."""
        self.faults: dict[str, int] = {}
        self.during_outage = 0
        """Chat requests received while ``down`` was set."""
        self.prompts: dict[str, int] = {}
        """Chat requests received per last message (tests tell their clients apart by it)."""
        self.arrivals: list[float] = []
        """``time.monotonic()`` of every chat request's arrival, in order."""
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._httpd = _QuietServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        assert isinstance(host, str)
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> FaultyServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=10)

    def _choose(self) -> str:
        with self._lock:
            self.requests += 1
            self.arrivals.append(time.monotonic())
            if self.down is not None:
                self.during_outage += 1
                choice = f"down_{self.down}"
            elif self._rng.random() < self.fault_rate:
                choice = self._rng.choice(FAULTS)
            else:
                choice = "ok"
            self.faults[choice] = self.faults.get(choice, 0) + 1
            return choice

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                choice = server._choose()
                messages = body.get("messages") or [{}]
                prompt = str(messages[-1].get("content"))
                with server._lock:
                    server.prompts[prompt] = server.prompts.get(prompt, 0) + 1
                try:
                    self._answer(choice, body)
                except OSError:
                    self.close_connection = True  # the client gave up (a stall): fine

            def _answer(self, choice: str, body: dict) -> None:
                if choice == "down_reset":
                    self._reset()
                    return
                if choice == "down_502":
                    self._plain(502, BAD_GATEWAY, "text/html")
                    return
                if choice in ("429", "500", "529"):
                    error = {"error": {"message": f"injected {choice}", "type": "injected"}}
                    hint = server.retry_after_ms if choice == "429" else None
                    data = json.dumps(error).encode()
                    self._plain(int(choice), data, "application/json", retry_after_ms=hint)
                    return
                if choice == "stall":
                    time.sleep(server.stall)
                    self.close_connection = True
                    return
                if server.delay > 0:
                    time.sleep(server.delay)
                prompt = body["messages"][-1]["content"]
                text = f"echo: {prompt}"
                pieces = [text[:5], text[5:10], text[10:]]
                limit = body.get("max_completion_tokens", body.get("max_tokens"))
                output = server.completion_tokens
                output = output if limit is None else min(output, limit)
                usage = {"prompt_tokens": 3, "completion_tokens": output}
                usage["total_tokens"] = 3 + output
                if not body.get("stream"):
                    reply = {**completion(text), "usage": usage}
                    self._plain(200, json.dumps(reply).encode(), "application/json")
                    return
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                for index, piece in enumerate(pieces):
                    self._chunk(chunk_event({"content": piece}, None))
                    if choice == "disconnect" and index == 0:
                        self._reset()
                        return
                self._chunk(chunk_event({}, "stop"))
                self._chunk(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode())
                self._chunk(b"data: [DONE]\n\n")
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

            def _plain(
                self, status: int, data: bytes, content_type: str, retry_after_ms: int | None = None
            ) -> None:
                self.send_response(status)
                self.send_header("content-type", content_type)
                if retry_after_ms is not None:
                    self.send_header("retry-after-ms", str(retry_after_ms))
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                self.wfile.flush()

            def _chunk(self, data: bytes) -> None:
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            def _reset(self) -> None:
                """Close with a TCP reset: no reply, not even a clean end of stream."""
                self.connection.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                )
                self.close_connection = True
                self.connection.close()

        return Handler


def chunk_event(delta: dict, finish: str | None) -> bytes:
    data = {
        "id": "chatcmpl-faulty",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return f"data: {json.dumps(data)}\n\n".encode()


def completion(text: str) -> dict:
    return {
        "id": "chatcmpl-faulty",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6},
    }


def input_lines(n: int) -> Iterator[bytes]:
    for i in range(n):
        body = {"model": "m", "messages": [{"role": "user", "content": f"line {i}"}]}
        line = {"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions"}
        yield json.dumps({**line, "body": body}).encode() + b"\n"
