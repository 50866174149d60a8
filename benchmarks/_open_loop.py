"""An open-loop HTTP/1.1 load generator for streamed chat completions, cheap per chunk.

Request *i* of a phase is due at ``t0 + i / rate`` whatever happened to the ones before (open
loop: a target that falls behind is charged for the queue it causes, and cannot slow the
sender down). It goes out on an idle keep-alive connection to the target, or a new one when all
are busy. Each response is read to its end and judged by :class:`Response`: a stream counts as
a success only with status 200, a complete body, no error event and a final ``data: [DONE]``.

The generator records, per request, its *send lag* (when it actually went out, minus when it
was due: the generator's own lateness), its time to first byte and its latency (due time to the
response's last byte). A phase whose send lag p99 exceeds a bound did not keep the schedule,
and its numbers describe the generator as much as the target.

Against a paced upstream every chunk is a separate read, tens of thousands per second at the
rates measured, so the loop is plain ``epoll`` and non-blocking sockets rather than trio (whose
per-wake-up cost would make the generator the bottleneck); every socket event of one
``epoll_wait`` shares the timestamp taken when it returned. Linux only.
"""

from __future__ import annotations

import errno
import gc
import math
import select
import socket
import time
from dataclasses import dataclass, field

__all__ = ["Generator", "PhaseResult", "Response", "percentile", "request_bytes"]


def request_bytes(host: str, port: int, path: str, model: str, headers: dict[str, str]) -> bytes:
    """One streamed chat-completions request (``include_usage`` on), head and body."""
    body = (
        b'{"model":"%s","messages":[{"role":"user","content":"Say something."}],'
        b'"stream":true,"stream_options":{"include_usage":true}}' % model.encode()
    )
    head = f"POST {path} HTTP/1.1\r\nhost: {host}:{port}\r\ncontent-type: application/json\r\n"
    head += "accept: text/event-stream\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return head.encode() + b"content-length: %d\r\n\r\n" % len(body) + body


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (nearest rank, from below); NaN when empty."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


_DONE = b"data: [DONE]"
_TAIL = 1024  # body bytes kept: enough for the usage chunk and [DONE] of any server measured


class Response:
    """Incremental reader of one HTTP/1.1 response to a streamed request.

    :meth:`feed` takes the bytes as they arrive and returns True once the response is complete;
    :attr:`error` then says why it is not a success (None when it is). The body may be
    chunked, ``content-length`` delimited or (``eof`` True at :meth:`end_of_file`) delimited by
    the connection's close. Only the body's last bytes are kept, to find the final events
    (usage and ``[DONE]``); error events are looked for across the whole body.
    """

    __slots__ = (
        "_buf",
        "_chunk_left",
        "_length_left",
        "_mode",
        "_tail",
        "error",
        "keep_alive",
        "status",
        "usage_tokens",
    )

    def __init__(self) -> None:
        self._buf = b""  # unparsed head, or chunk framing not yet complete
        self._mode = "head"  # head | chunked | trailer | length | close | done
        self._chunk_left = 0  # data bytes left in the current chunk (+2 for its CRLF)
        self._length_left = 0
        self._tail = b""  # the body's last bytes
        self.status = 0
        self.keep_alive = True
        self.error: str | None = None
        self.usage_tokens: int | None = None

    def feed(self, data: bytes) -> bool:
        if self._mode == "head":
            data = self._buf + data
            end = data.find(b"\r\n\r\n")
            if end < 0:
                self._buf = data
                if len(data) > 65536:
                    return self._fail("head too large")
                return False
            self._buf = b""
            self._head(data[:end])
            if self._mode == "done":
                return True
            data = data[end + 4 :]
        if self._mode == "chunked":
            return self._chunked(data)
        if self._mode == "trailer":
            return self._trailer(data)
        if self._mode == "length":
            self._body(data[: self._length_left])
            self._length_left -= len(data)
            if self._length_left <= 0:
                return self._finish()
            return False
        if self._mode == "close":
            self._body(data)
        return False

    def end_of_file(self) -> bool:
        """The connection closed: True when that completes the response (close-delimited)."""
        self.keep_alive = False
        if self._mode == "close":
            return self._finish()
        if self._mode != "done":
            self._fail("connection closed mid-response")
        return True

    def _head(self, head: bytes) -> None:
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
            self._fail(f"bad status line {lines[0][:80]!r}")
            return
        self.status = int(parts[1])
        self.keep_alive = parts[0] == b"HTTP/1.1"
        chunked, length = False, None
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            value = value.strip().lower()
            if name == b"transfer-encoding":
                chunked = value.endswith(b"chunked")
            elif name == b"content-length" and value.isdigit() and len(value) <= 18:
                length = int(value)
            elif name == b"connection":
                self.keep_alive = value == b"keep-alive" or (self.keep_alive and value != b"close")
        if chunked:
            self._mode = "chunked"
        elif length is not None:
            self._mode = "length"
            self._length_left = length
            if length == 0:
                self._finish()
        else:
            self._mode = "close"
            self.keep_alive = False

    def _chunked(self, data: bytes) -> bool:
        if self._buf:
            data = self._buf + data
            self._buf = b""
        pos, size = 0, len(data)
        while pos < size:
            left = self._chunk_left
            if left:
                take = min(left, size - pos)
                if left > 2:  # the chunk's data, then its CRLF
                    self._body(data[pos : pos + min(take, left - 2)])
                self._chunk_left = left - take
                pos += take
                continue
            eol = data.find(b"\r\n", pos)
            if eol < 0:
                self._buf = data[pos:]
                if len(self._buf) > 1024:
                    return self._fail("bad chunk size line")
                return False
            line = data[pos:eol].split(b";", 1)[0].strip()
            if not line or len(line) > 16:
                return self._fail(f"bad chunk size {line[:20]!r}")
            try:
                chunk = int(line, 16)
            except ValueError:
                return self._fail(f"bad chunk size {line[:20]!r}")
            pos = eol + 2
            if chunk == 0:  # the last chunk: then trailer lines, if any, and a blank line
                self._mode = "trailer"
                return self._trailer(data[pos:])
            self._chunk_left = chunk + 2
        return False

    def _trailer(self, data: bytes) -> bool:
        data = self._buf + data
        while True:
            eol = data.find(b"\r\n")
            if eol < 0:
                self._buf = data
                if len(data) > 8192:
                    return self._fail("trailer too large")
                return False
            if eol == 0:
                self._buf = b""
                return self._finish()
            data = data[eol + 2 :]

    def _body(self, piece: bytes) -> None:
        if not piece:
            return
        window = self._tail + piece
        if b'data: {"error"' in window or b"event: error" in window:
            self.error = self.error or "error event in the stream"
        self._tail = window[-_TAIL:]

    def _finish(self) -> bool:
        self._mode = "done"
        tail = self._tail
        at = tail.rfind(b'"completion_tokens":')
        if at >= 0:
            digits = tail[at + 20 : at + 40].split(b",", 1)[0].split(b"}", 1)[0].strip()
            if digits.isdigit():
                self.usage_tokens = int(digits)
        if self.error is None:
            if self.status != 200:
                self.error = f"HTTP {self.status}"
            elif not self._tail.rstrip().endswith(_DONE):
                self.error = "stream ended without data: [DONE]"
        return True

    def _fail(self, why: str) -> bool:
        self._mode = "done"
        self.keep_alive = False
        self.error = self.error or why
        return True


class _Conn:
    __slots__ = ("fd", "first", "index", "response", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.fd = sock.fileno()
        self.index = -1  # the request in flight on it, or -1 when idle
        self.response: Response | None = None
        self.first = 0.0  # when the response's first bytes arrived (0: not yet)


@dataclass
class PhaseResult:
    """What one phase measured (times in seconds)."""

    sent: int = 0
    ok: int = 0
    latencies: list[float] = field(default_factory=list)
    """Due time to last byte, successes only."""
    first_bytes: list[float] = field(default_factory=list)
    """Due time to the response's first byte, successes only."""
    send_lags: list[float] = field(default_factory=list)
    """Actual send minus due time, every request."""
    errors: dict[str, int] = field(default_factory=dict)
    usage_mismatch: int = 0
    """Successes whose usage chunk did not report the expected completion tokens."""
    wall_s: float = 0.0

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())

    def error(self, why: str) -> None:
        self.errors[why] = self.errors.get(why, 0) + 1


class Generator:
    """Keep-alive connections to one target, and phases of requests at a fixed rate over them.

    Connections left idle by one phase serve the next (so a warm-up leaves the pool filled).
    Not thread-safe; one phase at a time.
    """

    def __init__(
        self,
        host: str,
        port: int,
        request: bytes,
        *,
        max_connections: int = 4000,
        expect_tokens: int | None = None,
    ) -> None:
        self.address = (host, port)
        self.request = request
        self.max_connections = max_connections
        self.expect_tokens = expect_tokens
        self.ep = select.epoll()
        self.conns: dict[int, _Conn] = {}
        self.idle: list[_Conn] = []

    def close(self) -> None:
        for conn in list(self.conns.values()):
            self._drop(conn)
        self.ep.close()

    def phase(self, rate: float, duration: float, drain: float) -> PhaseResult:
        """Send ``rate * duration`` requests on schedule and wait up to ``drain`` seconds after
        the last is due for the ones still running; those, and any that failed, are errors."""
        count = max(1, int(rate * duration))
        result = PhaseResult()
        dues: list[float] = []
        interval = 1.0 / rate
        ep, conns = self.ep, self.conns
        gc.disable()  # no collector pauses mid-phase (collect before a phase, outside its timing)
        try:
            start = time.monotonic()
            t0 = start + 0.02
            deadline = t0 + (count - 1) * interval + drain
            index = 0
            in_flight = 0
            next_due = t0
            while True:
                now = time.monotonic()
                while index < count and next_due <= now:
                    dues.append(next_due)
                    if self._start(index, now, result):
                        in_flight += 1
                    result.send_lags.append(now - next_due)
                    index += 1
                    next_due = t0 + index * interval
                if index >= count and (in_flight == 0 or now >= deadline):
                    break
                timeout = next_due - now if index < count else min(0.1, deadline - now)
                # epoll_wait takes milliseconds (rounded up): a send is at most ~1 ms late.
                events = ep.poll(max(0.0, timeout))
                if not events:
                    continue
                now = time.monotonic()
                for fd, mask in events:
                    conn = conns.get(fd)
                    if conn is None:
                        continue
                    if mask & select.EPOLLOUT:
                        if not self._connected(conn, result):
                            in_flight -= 1
                        continue
                    in_flight -= self._readable(conn, now, dues, result)
            result.sent = count
            for conn in list(conns.values()):
                if conn.index >= 0:
                    result.error("no complete response before the phase's end")
                    self._drop(conn)
            result.wall_s = time.monotonic() - start
        finally:
            gc.enable()
        return result

    def _start(self, index: int, now: float, result: PhaseResult) -> bool:
        """Send request ``index``; False when it failed at once (counted as an error)."""
        while self.idle:
            conn = self.idle.pop()
            if conn.fd in self.conns:
                break
        else:
            if len(self.conns) >= self.max_connections:
                result.error("generator's connection cap reached")
                return False
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = _Conn(sock)
            conn.index = index
            conn.response = Response()
            self.conns[conn.fd] = conn
            code = sock.connect_ex(self.address)
            if code in (0, errno.EINPROGRESS):
                self.ep.register(conn.fd, select.EPOLLOUT)
                return True
            result.error(f"connect: {errno.errorcode.get(code, code)}")
            self._drop(conn)
            return False
        conn.index = index
        conn.response = Response()
        conn.first = 0.0
        return self._send(conn, result)

    def _send(self, conn: _Conn, result: PhaseResult) -> bool:
        try:
            sent = conn.sock.send(self.request)
        except OSError as exc:
            sent, why = -1, f"send: {type(exc).__name__}"
        else:
            why = "send did not fit the socket buffer"
        if sent == len(self.request):
            return True
        result.error(why)
        self._drop(conn)
        return False

    def _connected(self, conn: _Conn, result: PhaseResult) -> bool:
        """Send the waiting request on a new connection; False when that failed (an error)."""
        code = conn.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if code:
            result.error(f"connect: {errno.errorcode.get(code, code)}")
            self._drop(conn)
            return False
        self.ep.modify(conn.fd, select.EPOLLIN)
        return self._send(conn, result)

    def _readable(self, conn: _Conn, now: float, dues: list[float], result: PhaseResult) -> int:
        """Read what arrived; 1 when that ended the request in flight, else 0."""
        try:
            data = conn.sock.recv(262144)
        except BlockingIOError:
            return 0
        except OSError:
            data = b""
        response = conn.response
        if response is None:  # an idle connection: the server closed it (or sent junk)
            self._drop(conn)
            return 0
        index = conn.index
        if not conn.first:
            conn.first = now
        done = response.feed(data) if data else response.end_of_file()
        if not done:
            return 0
        if response.error is None:
            result.ok += 1
            result.latencies.append(now - dues[index])
            result.first_bytes.append(conn.first - dues[index])
            if self.expect_tokens is not None and response.usage_tokens != self.expect_tokens:
                result.usage_mismatch += 1
        else:
            result.error(response.error)
        conn.index = -1
        conn.response = None
        if response.keep_alive and data:
            self.idle.append(conn)
        else:
            self._drop(conn)
        return 1

    def _drop(self, conn: _Conn) -> None:
        if self.conns.pop(conn.fd, None) is None:
            return
        try:
            self.ep.unregister(conn.fd)
        except (OSError, ValueError):
            pass
        conn.sock.close()


def lag_ms(result: PhaseResult) -> dict[str, float]:
    """Send lag percentiles of a phase, in milliseconds."""
    lags = result.send_lags
    return {
        "send_lag_p50_ms": percentile(lags, 0.5) * 1000,
        "send_lag_p99_ms": percentile(lags, 0.99) * 1000,
        "send_lag_max_ms": (max(lags) if lags else math.nan) * 1000,
    }
