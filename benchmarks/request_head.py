"""What reading one request head costs: the gateway's parser against h11's.

    .venv/bin/python -m benchmarks.request_head
    .venv/bin/python -m benchmarks.request_head --runs 9 --number 20000

The head is what the OpenAI Python SDK sends for a chat completion (its header set, with a
placeholder key). ``sluice`` times :func:`sluice._gateway.request_head.parse_head` on it; ``h11``
times what a server on h11 does per request: a connection's ``receive_data`` and
``next_event`` up to the ``Request`` (a fresh ``h11.Connection`` each time, built outside the
timing). Prints one JSON line: microseconds per head for each (the best of ``--runs``).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import time

import h11
import orjson

from sluice._gateway.request_head import parse_head

HEAD = (
    b"POST /v1/chat/completions HTTP/1.1\r\n"
    b"Host: 127.0.0.1:8080\r\n"
    b"Accept-Encoding: gzip, deflate\r\n"
    b"Connection: keep-alive\r\n"
    b"Accept: application/json\r\n"
    b"Content-Type: application/json\r\n"
    b"User-Agent: OpenAI/Python 1.99.0\r\n"
    b"X-Stainless-Lang: python\r\n"
    b"X-Stainless-Package-Version: 1.99.0\r\n"
    b"X-Stainless-OS: Linux\r\n"
    b"X-Stainless-Arch: x64\r\n"
    b"X-Stainless-Runtime: CPython\r\n"
    b"X-Stainless-Runtime-Version: 3.11.2\r\n"
    b"Authorization: Bearer sk-placeholder-0000000000000000000000000000\r\n"
    b"X-Stainless-Async: false\r\n"
    b"x-stainless-retry-count: 0\r\n"
    b"x-stainless-read-timeout: 600\r\n"
    b"Content-Length: 95\r\n"
    b"\r\n"
)


def time_sluice(number: int) -> float:
    head = HEAD[:-4]  # the parser takes the head without its blank line
    start = time.perf_counter()
    for _ in range(number):
        parse_head(head)
    return (time.perf_counter() - start) / number


def time_h11(number: int) -> float:
    connections = [h11.Connection(h11.SERVER) for _ in range(number)]
    start = time.perf_counter()
    for conn in connections:
        conn.receive_data(HEAD)
        event = conn.next_event()
    elapsed = time.perf_counter() - start
    assert isinstance(event, h11.Request)
    return elapsed / number


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--number", type=int, default=10_000, help="heads per run")
    args = parser.parse_args()
    assert parse_head(HEAD[:-4]).content_length == 95
    sluice = min(time_sluice(args.number) for _ in range(args.runs))
    h11_time = min(time_h11(args.number) for _ in range(args.runs))
    print(
        orjson.dumps(
            {
                "sluice_us": round(sluice * 1e6, 2),
                "h11_us": round(h11_time * 1e6, 2),
                "ratio": round(h11_time / sluice, 1),
                "h11": importlib.metadata.version("h11"),
            }
        ).decode()
    )


if __name__ == "__main__":
    main()
