"""An incremental, sans-io decoder for ``text/event-stream`` bodies.

It follows the parts of the WHATWG event-stream rules that LLM providers exercise:

* a line ends in ``\\n``, ``\\r\\n`` or ``\\r``; a ``\\r`` at the end of one piece followed by
  ``\\n`` at the start of the next is one line ending, not two;
* ``data:`` lines (one optional space after the colon is dropped) accumulate, joined by ``\\n``;
* ``event:`` names the event; ``id:`` and ``retry:`` are read and ignored;
* a line starting with ``:`` is a comment;
* an empty line dispatches the event, if it has at least one ``data`` line;
* a leading UTF-8 byte order mark is skipped.

The decoder works on bytes and never decodes a payload, so input cut anywhere, inside a line
or inside a multi-byte UTF-8 character, gives the same events as the whole body.

Memory is bounded: a line longer than ``max_line`` bytes, or an event whose data lines add up to
more than ``max_event`` bytes, raises a terminal :class:`~sluice._errors.ProtocolError` naming
the limit (a server streaming one endless line would otherwise grow the buffer without end).
The checks are length checks on buffers, once per piece and once per data line.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from .decode_shared import MAX_EVENT_BYTES, MAX_LINE_BYTES, too_large

__all__ = ["SSEDecoder", "SSEEvent"]

_BOM = b"\xef\xbb\xbf"
# Building events with tuple.__new__ skips the NamedTuple's Python-level __new__, a cost that
# shows on the hot path.
_new_event = tuple.__new__


class SSEEvent(NamedTuple):
    """One dispatched event. ``data`` holds the raw bytes of its data lines."""

    event: str
    """The ``event:`` name, or ``"message"`` when the event named none."""
    data: bytes
    """The ``data`` lines joined by ``\\n``, undecoded."""


class SSEDecoder:
    """Turns body bytes into :class:`SSEEvent` values, one :meth:`feed` at a time.

    Guarantees: the concatenation of what ``feed`` returns for any split of a body equals what
    one ``feed`` of the whole body returns. Bytes after the last line ending stay buffered
    until more input or :meth:`end`.
    """

    __slots__ = (
        "_at_start",
        "_buf",
        "_data",
        "_event",
        "_held",
        "_held_size",
        "_max_event",
        "_max_line",
        "_size",
        "_skip_lf",
    )

    def __init__(self, *, max_line: int = MAX_LINE_BYTES, max_event: int = MAX_EVENT_BYTES) -> None:
        self._max_line = max_line
        self._max_event = max_event
        self._size = 0
        """Bytes in the data lines of the event being built."""
        self._buf = b""
        """The unfinished line: bytes after the last line ending, ``\\r`` already rewritten."""
        self._held: list[bytes] | None = None
        """Later pieces of that line, none with a line ending: joined once, when it ends, so a
        long line costs linear time rather than a copy of the whole line per piece. Made when
        a piece holds no line ending (rare: servers flush whole events)."""
        self._held_size = 0
        self._data: list[bytes] | None = None
        """Data lines of the event being built; made by the first line-by-line read (most
        streams have none: providers send whole events, read without it)."""
        self._event: str | None = None
        self._skip_lf = False
        """The previous piece ended in ``\\r``: a ``\\n`` starting this one ends no line."""
        self._at_start = True
        """No byte seen yet: a byte order mark may still come."""

    def feed(self, data: bytes) -> list[SSEEvent]:
        """Decode the next piece of the body and return the events it completes, in order.

        Raises:
            ProtocolError: a line or an event passed its size limit (terminal).
        """
        return self._feed(data, True)

    def feed_payloads(self, data: bytes) -> list[bytes]:
        """:meth:`feed` for a reader that needs only each event's ``data``: the same events,
        as their payloads (no event object is built per event; the names are not read).

        Raises:
            ProtocolError: a line or an event passed its size limit (terminal).
        """
        return self._feed(data, False)

    def _feed(self, data: bytes, named: bool) -> list[Any]:
        """:meth:`feed` (``named``: SSEEvent values) or :meth:`feed_payloads` (payloads)."""
        if self._at_start:
            data = self._strip_bom(data)
        if self._skip_lf and data:
            self._skip_lf = False
            if data[0] == 0x0A:
                data = data[1:]
        if 0x0D in data:
            # A trailing \r ends its line now; a \n that may open the next piece is its pair.
            self._skip_lf = data[-1] == 0x0D
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        end = data.rfind(b"\n")
        if end < 0:
            if data:
                if self._held is None:
                    self._held = [data]
                else:
                    self._held.append(data)
                self._held_size += len(data)
                if self._held_size + len(self._buf) > self._max_line:
                    raise too_large("an SSE line", self._max_line, "max_line_bytes")
            return []
        if self._held:
            end += len(self._buf) + self._held_size
            data = b"".join((self._buf, *self._held, data))
            self._held = None
            self._held_size = 0
        elif self._buf:
            end += len(self._buf)
            data = self._buf + data
        self._buf = tail = data[end + 1 :]
        if len(tail) > self._max_line:
            raise too_large("an SSE line", self._max_line, "max_line_bytes")
        if not named and not self._data and not self._size:
            # The whole events: all of the lines, or up to the last blank line when the piece
            # ends inside an event (a large read); what follows is read line by line.
            last = end if data[end - 1] == 0x0A else data.rfind(b"\n\n", 0, end) + 1
            payloads = self._usual_events(data, last) if last > 0 else None
            if payloads is not None:
                if last == end:
                    return payloads
                return payloads + self._lines(data[last + 1 :], end - last - 1, named)
        return self._lines(data, end, named)

    def _usual_events(self, buf: bytes, end: int) -> list[bytes] | None:
        """The payloads of ``buf[:end + 1]`` when it holds nothing but usual events (each one
        ``data: `` line and the empty line after it, as providers send them), read with one
        split and no Python step per event; else None (:meth:`_lines` reads it).

        Exact: the split at each ``\\n\\ndata: `` is taken only if the pieces hold no line
        ending themselves, and then each piece is one event's data line; no event is built
        from a line longer than the limits allow (those go to :meth:`_lines`, which raises).
        """
        if end < 7 or buf[end - 1] != 0x0A or not buf.startswith(b"data: "):
            return None
        payloads = buf[6 : end - 1].split(b"\n\ndata: ")
        if b"\n" in b"".join(payloads):  # memchr, where counting would step every byte
            return None
        longest = max(map(len, payloads))
        if longest + 6 > self._max_line or longest + 1 > self._max_event:
            return None
        self._event = None
        return payloads

    def end(self) -> list[SSEEvent]:
        """The body ended: return the event still being built, if any, and reset.

        The standard drops an event that no empty line closed; providers do end bodies with
        ``data: [DONE]`` and no blank line, so this treats the end of the body as the end of
        the last line and of the event. A caller that distrusts a truncated tail can tell it
        apart by the payload failing to parse.
        """
        tail = b"".join((self._buf, *(self._held or ())))
        self._buf = b""
        self._held = None
        self._held_size = 0
        events = self._lines(tail + b"\n\n", len(tail) + 1, True) if tail or self._data else []
        self._event = None
        self._size = 0
        self._skip_lf = False
        self._at_start = True
        return events

    def _strip_bom(self, data: bytes) -> bytes:
        """Hold back the first bytes until they can be told apart from a byte order mark."""
        data = self._buf + data
        self._buf = b""
        if len(data) < len(_BOM) and _BOM.startswith(data):
            self._buf = data
            return b""
        self._at_start = False
        return data[len(_BOM) :] if data.startswith(_BOM) else data

    def _lines(self, buf: bytes, end: int, named: bool) -> list[Any]:
        """Read the complete lines of ``buf[:end + 1]`` (``buf[end]`` is a line ending): the
        events they complete, as :class:`SSEEvent` values when ``named``, else payloads."""
        events: list[Any] = []  # SSEEvent values or payloads, as ``named`` says
        data = self._data
        if data is None:
            data = self._data = []
        find = buf.find
        startswith = buf.startswith
        size = self._size
        max_event = self._max_event
        max_line = self._max_line
        pos = 0
        while pos <= end:
            nl = find(b"\n", pos)
            if nl - pos > max_line:  # a whole line in one piece; feed() checks the tails
                raise too_large("an SSE line", max_line, "max_line_bytes")
            if nl == pos:
                if data:
                    payload = data[0] if len(data) == 1 else b"\n".join(data)
                    data.clear()
                    size = 0
                    events.append(
                        _new_event(SSEEvent, (self._event or "message", payload))
                        if named
                        else payload
                    )
                self._event = None
            elif startswith(b"data: ", pos):
                if not data and nl < end and buf[nl + 1] == 0x0A:
                    # The usual event: one data line and the empty line after it, read as one.
                    if nl - pos - 5 > max_event:
                        raise too_large("an SSE event", max_event, "max_event_bytes")
                    payload = buf[pos + 6 : nl]
                    events.append(
                        _new_event(SSEEvent, (self._event or "message", payload))
                        if named
                        else payload
                    )
                    self._event = None
                    pos = nl + 2
                    continue
                data.append(buf[pos + 6 : nl])
                size += nl - pos - 5  # the line and the newline joining it to the next
                if size > max_event:
                    raise too_large("an SSE event", max_event, "max_event_bytes")
            elif buf[pos] != 0x3A:  # a line opening with ":" is a comment
                line = buf[pos:nl]
                if line.startswith(b"data"):
                    size += nl - pos - 3
                    if size > max_event:
                        raise too_large("an SSE event", max_event, "max_event_bytes")
                self._field(line, data)
            pos = nl + 1
        self._size = size
        return events

    def _field(self, line: bytes, data: list[bytes]) -> None:
        name, colon, value = line.partition(b":")
        if colon and value.startswith(b" "):
            value = value[1:]
        if name == b"data":
            data.append(value)
        elif name == b"event":
            self._event = value.decode("utf-8", "replace")
        # "id", "retry" and unknown fields change nothing a caller of this decoder reads.
