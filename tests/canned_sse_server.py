"""A chat-completions server that answers every request with one canned SSE reply, written in
one piece: run as its own process (``python tests/canned_sse_server.py``), so a test that counts
the client's task steps or memory counts the client alone. Standard library only.

It prints its port on the first line of stdout once it listens. A request whose path starts with
``/c<N>/`` gets a reply of N content chunks instead of the usual five. One whose path starts with
``/hold/`` gets the head and the first chunk at once, and the rest of its reply only after a
line arrives on stdin (so a test can hold many streams open, measure, then let them finish).
"""

from __future__ import annotations

import asyncio
import json
import sys

CHUNKS = 5


def _event(payload: dict) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def _chunk(delta: dict, finish: str | None = None) -> dict:
    return {
        "id": "chatcmpl-canned",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "canned",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def _framed(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def _rest(chunks: int) -> bytes:
    """The reply after its first chunk, for a reply of ``chunks`` content chunks."""
    return (
        b"".join(_framed(_event(_chunk({"content": f" word{i}"}))) for i in range(1, chunks))
        + _framed(_event(_chunk({}, "stop")))
        + _framed(
            _event(
                {
                    "id": "chatcmpl-canned",
                    "choices": [],
                    "usage": {
                        "prompt_tokens": 3,
                        "completion_tokens": chunks,
                        "total_tokens": 3 + chunks,
                    },
                }
            )
        )
        + _framed(b"data: [DONE]\n\n")
        + b"0\r\n\r\n"
    )


HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
    b"transfer-encoding: chunked\r\nx-request-id: req_canned\r\n\r\n"
)
FIRST = _framed(_event(_chunk({"role": "assistant", "content": "word0"})))
REST = _rest(CHUNKS)
_SIZED: dict[int, bytes] = {}
"""Whole replies of ``/c<N>/...`` requests (N content chunks), made once per N."""


def _sized(path: bytes) -> bytes | None:
    """The whole reply for a path ``/c<N>/...``, or None for any other path."""
    first = path.split(b"/", 2)[1]
    if not (first.startswith(b"c") and first[1:].isdigit()):
        return None
    chunks = int(first[1:])
    if chunks not in _SIZED:
        _SIZED[chunks] = HEAD + FIRST + _rest(chunks)
    return _SIZED[chunks]


async def _serve(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, release: asyncio.Event
) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            await reader.readexactly(length)
            sized = _sized(head.split(b" ", 2)[1])
            if sized is not None:
                writer.write(sized)
            elif head.startswith(b"POST /hold/"):
                writer.write(HEAD + FIRST)
                await writer.drain()
                await release.wait()
                writer.write(REST)
            else:
                writer.write(HEAD + FIRST + REST)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        writer.close()


async def main() -> None:
    release = asyncio.Event()
    server = await asyncio.start_server(
        lambda r, w: _serve(r, w, release), "127.0.0.1", 0, backlog=1024
    )
    print(server.sockets[0].getsockname()[1], flush=True)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.readline)
    release.set()
    async with server:
        await asyncio.Event().wait()  # until the test terminates this process


if __name__ == "__main__":
    asyncio.run(main())
