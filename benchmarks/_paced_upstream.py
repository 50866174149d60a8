"""A paced OpenAI-compatible streaming upstream: chunks spaced in time as a model emits them.

Every ``POST .../chat/completions`` gets a ``200 text/event-stream`` reply (chunked transfer
encoding, keep-alive) of ``chunks`` content chunks shaped like OpenAI's: after ``ttft_ms`` the
head and the role chunk, then one content chunk every ``itl_ms``, then, ``itl_ms`` later, the
``finish_reason`` chunk, the usage chunk (when the request asks for it with ``include_usage``)
and ``data: [DONE]``. That is ``chunks + 2`` separate writes per reply, each a wake-up for
whatever reads it, as a real model server causes; a mock that writes the whole body at once
lets a gateway coalesce it into one read and one write, which no real upstream allows.

It has to stay far cheaper than what it serves at a few thousand requests per second on a
2-core box, so it is one process with one ``epoll`` loop and no event-loop library: streams
due within the same millisecond sit in one bucket of a timer wheel, and each loop turn writes
the chunks of the buckets that came due with a plain non-blocking ``send`` (a write that does
not fit is queued and finished on ``EPOLLOUT``). Linux only, like the benchmarks' ``/proc``
accounting.

``--fail-every N`` ends every Nth reply with an OpenAI-style error event and no ``[DONE]``, as
an upstream failing mid-stream does (the benchmark must count those streams as errors).

    python -m benchmarks._paced_upstream --port 0 --ttft-ms 50 --itl-ms 15 --chunks 20

prints ``listening on 127.0.0.1:PORT`` once it accepts connections and serves until SIGTERM.
"""

from __future__ import annotations

import argparse
import errno
import gc
import heapq
import select
import signal
import socket
import sys
import time

_ID = b"chatcmpl-paced0000000000000000"
_PREFIX = (
    b'data: {"id":"' + _ID + b'","object":"chat.completion.chunk","created":1764460800,'
    b'"model":"gpt-4o-mini-2024-07-18","service_tier":"default",'
    b'"system_fingerprint":"fp_560af6e559",'
)
_WORDS = [b" alpha", b" beta", b" gamma", b" delta", b" epsilon", b" zeta", b" eta", b" theta"]
_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
    b"transfer-encoding: chunked\r\ncache-control: no-cache\r\n"
    b"x-request-id: req_paced\r\n\r\n"
)
_BAD_BODY = b'{"error":{"message":"paced upstream: unknown route","type":"invalid_request_error"}}'
_BAD = (
    b"HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
    % (len(_BAD_BODY), _BAD_BODY)
)
_ERROR_EVENT = (
    b'data: {"error":{"message":"paced upstream: injected failure","type":"server_error",'
    b'"param":null,"code":"injected"}}\n\n'
)


def _chunk(payload: bytes) -> bytes:
    """``payload`` framed as one HTTP/1.1 chunk."""
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _event(delta: bytes, finish: bytes = b"null") -> bytes:
    return (
        _PREFIX + b'"choices":[{"index":0,"delta":' + delta + b',"logprobs":null,'
        b'"finish_reason":' + finish + b'}],"usage":null}\n\n'
    )


def build_writes(chunks: int, usage: bool, fail: bool) -> list[bytes]:
    """The ``chunks + 2`` writes of one reply, in order, already framed (head in the first).

    A failing reply ends with an error event instead of the finish, usage and ``[DONE]``
    events (the chunked body itself ends cleanly: the failure is in the stream's content).
    """
    writes = [_HEAD + _chunk(_event(b'{"role":"assistant","content":""}'))]
    for i in range(chunks):
        word = _WORDS[i % len(_WORDS)]
        writes.append(_chunk(_event(b'{"content":"' + word + b'"}')))
    if fail:
        writes.append(_chunk(_ERROR_EVENT) + b"0\r\n\r\n")
        return writes
    last = _event(b"{}", b'"stop"')
    if usage:
        last += (
            _PREFIX + b'"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":%d,'
            b'"total_tokens":%d}}\n\n' % (chunks, chunks + 9)
        )
    writes.append(_chunk(last + b"data: [DONE]\n\n") + b"0\r\n\r\n")
    return writes


class _Conn:
    __slots__ = ("fd", "inbuf", "next_write", "outbuf", "sock", "writes")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.fd = sock.fileno()
        self.inbuf = b""
        self.outbuf = b""
        self.writes: list[bytes] | None = None  # the reply being streamed
        self.next_write = 0


class Server:
    """The epoll loop. State is owned by the one thread running :meth:`serve`."""

    def __init__(
        self, sock: socket.socket, ttft_ms: float, itl_ms: float, chunks: int, fail_every: int
    ) -> None:
        self.listener = sock
        self.ttft = max(0, round(ttft_ms))
        self.itl = max(0, round(itl_ms))
        self.fail_every = fail_every
        self.replies = {
            (usage, fail): build_writes(chunks, usage, fail)
            for usage in (False, True)
            for fail in (False, True)
        }
        if self.itl == 0:  # burst: the whole reply in one write after the first token
            self.replies = {key: [b"".join(w)] for key, w in self.replies.items()}
        self.served = 0
        self.ep = select.epoll()
        self.conns: dict[int, _Conn] = {}
        self.wheel: dict[int, list[_Conn]] = {}  # due millisecond -> streams to write then
        self.due: list[int] = []  # the wheel's keys, as a heap
        self.stopping = False

    def serve(self) -> None:
        self.ep.register(self.listener.fileno(), select.EPOLLIN)
        listen_fd = self.listener.fileno()
        while not self.stopping:
            timeout = 0.5
            if self.due:  # until the next due millisecond (epoll_wait rounds up to 1 ms)
                timeout = max(0.0, min(timeout, self.due[0] / 1000 - time.monotonic()))
            try:
                events = self.ep.poll(timeout)
            except InterruptedError:
                continue
            for fd, mask in events:
                if fd == listen_fd:
                    self._accept()
                    continue
                conn = self.conns.get(fd)
                if conn is None:
                    continue
                if mask & select.EPOLLOUT:
                    self._flush(conn)
                if mask & (select.EPOLLIN | select.EPOLLHUP | select.EPOLLERR):
                    self._readable(conn)
            self._tick()

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE):
                    return
                raise
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = _Conn(sock)
            self.conns[conn.fd] = conn
            self.ep.register(conn.fd, select.EPOLLIN)

    def _close(self, conn: _Conn) -> None:
        self.conns.pop(conn.fd, None)
        conn.writes = None  # a bucket still holding it skips it
        try:
            self.ep.unregister(conn.fd)
        except (OSError, ValueError):
            pass
        conn.sock.close()

    def _readable(self, conn: _Conn) -> None:
        try:
            data = conn.sock.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            self._close(conn)
            return
        if not data:
            self._close(conn)
            return
        conn.inbuf += data
        if conn.writes is None:
            self._request(conn)

    def _request(self, conn: _Conn) -> None:
        """Start the reply once ``inbuf`` holds a whole request (head, ``content-length`` body)."""
        buf = conn.inbuf
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            return
        head = buf[:end].lower()
        at = head.find(b"\r\ncontent-length:")
        length = 0
        if at >= 0:
            stop = head.find(b"\r\n", at + 2)
            length = int(head[at + 17 : stop if stop >= 0 else len(head)].strip()[:20] or b"0")
        if len(buf) < end + 4 + length:
            return
        body = buf[end + 4 : end + 4 + length]
        conn.inbuf = buf[end + 4 + length :]
        if not head.startswith(b"post ") or b"/chat/completions " not in head.split(b"\r\n", 1)[0]:
            self._send(conn, _BAD)
            return
        self.served += 1
        fail = self.fail_every > 0 and self.served % self.fail_every == 0
        usage = b'"include_usage":true' in body or b'"include_usage": true' in body
        conn.writes = self.replies[usage, fail]
        conn.next_write = 0
        self._schedule(conn, self.ttft)

    def _schedule(self, conn: _Conn, after_ms: int) -> None:
        self._at(int(time.monotonic() * 1000) + after_ms, conn)

    def _at(self, due: int, conn: _Conn) -> None:
        bucket = self.wheel.get(due)
        if bucket is None:
            self.wheel[due] = [conn]
            heapq.heappush(self.due, due)
        else:
            bucket.append(conn)

    def _tick(self) -> None:
        """Write the next chunk of every stream whose millisecond has come."""
        now = int(time.monotonic() * 1000)
        wheel, due = self.wheel, self.due
        while due and due[0] <= now:
            ms = heapq.heappop(due)
            for conn in wheel.pop(ms):
                writes = conn.writes
                if writes is None:
                    continue  # closed meanwhile
                self._send(conn, writes[conn.next_write])
                conn.next_write += 1
                if conn.next_write == len(writes):
                    conn.writes = None
                    if conn.inbuf:  # a pipelined request waited for this reply
                        self._request(conn)
                else:
                    # From the chunk's due time, not from now: a late turn does not stretch
                    # the stream (a chunk due by now goes out in this same turn).
                    self._at(ms + self.itl, conn)

    def _send(self, conn: _Conn, data: bytes) -> None:
        if conn.outbuf:
            conn.outbuf += data
            return
        try:
            sent = conn.sock.send(data)
        except BlockingIOError:
            sent = 0
        except OSError:
            self._close(conn)
            return
        if sent < len(data):
            conn.outbuf = data[sent:]
            self.ep.modify(conn.fd, select.EPOLLIN | select.EPOLLOUT)

    def _flush(self, conn: _Conn) -> None:
        try:
            sent = conn.sock.send(conn.outbuf)
        except BlockingIOError:
            return
        except OSError:
            self._close(conn)
            return
        conn.outbuf = conn.outbuf[sent:]
        if not conn.outbuf:
            self.ep.modify(conn.fd, select.EPOLLIN)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--ttft-ms", type=float, default=50.0)
    parser.add_argument("--itl-ms", type=float, default=15.0)
    parser.add_argument("--chunks", type=int, default=20)
    parser.add_argument("--fail-every", type=int, default=0)
    args = parser.parse_args(argv)
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", args.port))
    listener.listen(4096)
    listener.setblocking(False)
    server = Server(listener, args.ttft_ms, args.itl_ms, args.chunks, args.fail_every)

    def stop(_signum: int, _frame: object) -> None:
        server.stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    gc.freeze()
    gc.disable()  # its objects form no cycles: no collector pauses in the middle of a run
    host, port = listener.getsockname()
    print(f"listening on {host}:{port}", flush=True)
    server.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
