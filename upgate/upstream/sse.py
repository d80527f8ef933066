"""Server-sent events: an incremental parser for upstream streams and the bytes we emit.

The parser follows the WHATWG event-stream rules that matter to a relay: lines end in
CRLF, LF or CR; a blank line dispatches the event; only `data:` fields are kept (several
are joined with "\\n"); comments, `event:`, `id:` and `retry:` are dropped. We never emit
`id:` or `retry:` ourselves: the openai client would then turn the next keep-alive
comment into an empty event and fail to parse it.
"""

DONE = b"data: [DONE]\n\n"
KEEPALIVE = b": keep-alive\n\n"

_BOM = b"\xef\xbb\xbf"


def event(payload: bytes) -> bytes:
    """One SSE event carrying `payload` as its data."""
    return b"data: " + payload + b"\n\n"


class SSEParser:
    """Feed raw body bytes as they arrive; get back the data payload of each complete event.

    Chunks may be split anywhere, including between the CR and LF of one line ending.
    """

    __slots__ = ("_buf", "_data", "_after_cr", "_started")

    def __init__(self) -> None:
        self._buf = b""  # an incomplete last line, line endings already normalised to LF
        self._data: list[bytes] = []  # data lines of the event being built
        self._after_cr = False  # the previous chunk ended in CR: a leading LF belongs to it
        self._started = False

    def feed(self, data: bytes) -> list[bytes]:
        if not data:
            return []
        if self._after_cr and data[0] == 0x0A:
            data = data[1:]
        self._after_cr = data[-1:] == b"\r"
        if not self._started:
            buf = self._buf + data
            if len(buf) < 3 and _BOM.startswith(buf):
                self._buf = buf  # could still be the start of a byte-order mark
                return []
            self._started = True
            if buf.startswith(_BOM):
                buf = buf[3:]
        else:
            buf = self._buf + data if self._buf else data
        if b"\r" in buf:
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = buf.split(b"\n")
        self._buf = lines.pop()
        return self._lines(lines)

    def flush(self) -> list[bytes]:
        """End of stream: dispatch an event the upstream left unterminated (lenient: the
        standard would drop it, but a provider that omits the last blank line still meant it)."""
        lines = [self._buf] if self._buf else []
        self._buf = b""
        lines.append(b"")
        return self._lines(lines)

    def _lines(self, lines: list[bytes]) -> list[bytes]:
        events: list[bytes] = []
        data = self._data
        for line in lines:
            if not line:
                if data:
                    events.append(data[0] if len(data) == 1 else b"\n".join(data))
                    data = self._data = []
            elif line.startswith(b"data:"):
                value = line[5:]
                data.append(value[1:] if value[:1] == b" " else value)
            elif line == b"data":
                data.append(b"")
            # comments (":…") and every other field are ignored
        return events
