"""Server-sent events: an incremental parser for upstream streams and the bytes we emit.

The parser follows the WHATWG event-stream rules that matter to a relay: lines end in
CRLF, LF or CR; a blank line dispatches the event; only `data:` fields are kept (several
are joined with "\\n"); comments, `event:`, `id:` and `retry:` are dropped. We never emit
`id:` or `retry:` ourselves: the openai client would then turn the next keep-alive
comment into an empty event and fail to parse it.
"""
import orjson

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
        # an incomplete last line, line endings already normalised to LF, as the pieces it came
        # in: joined once its line ends, so a 10 MB event costs one join, not one per piece
        self._buf: list[bytes] = []
        self._data: list[bytes] = []  # data lines of the event being built
        self._after_cr = False  # the previous chunk ended in CR: a leading LF belongs to it
        self._started = False

    def feed(self, data: bytes) -> list[bytes]:
        if not data:
            return []
        if self._after_cr and data[0] == 0x0A:
            data = data[1:]
            if not data:
                return []
        self._after_cr = data[-1:] == b"\r"
        if not self._started:
            buf = b"".join(self._buf) + data
            if len(buf) < 3 and _BOM.startswith(buf):
                self._buf = [buf]  # could still be the start of a byte-order mark
                return []
            self._started = True
            self._buf = []
            if buf.startswith(_BOM):
                buf = buf[3:]
            data = buf
        if b"\r" in data:
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        if b"\n" not in data:
            self._buf.append(data)  # the line goes on
            return []
        if self._buf:
            self._buf.append(data)
            data = b"".join(self._buf)
        lines = data.split(b"\n")
        last = lines.pop()
        self._buf = [last] if last else []
        return self._lines(lines)

    def flush(self) -> list[bytes]:
        """End of stream: dispatch an event the upstream left unterminated (lenient: the
        standard would drop it, but a provider that omits the last blank line still meant it)."""
        lines = [b"".join(self._buf)] if self._buf else []
        self._buf = []
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


class JSONEventsToChunks:
    """A provider's own stream (JSON events over SSE) → chat-completions chunks: `_event(ev)`
    turns each event object into the chunks it means; a payload that is not JSON is passed on
    as it is, for the relay to treat as malformed. Subclasses call `__init__` and define `_event`."""

    def __init__(self) -> None:
        self._sse = SSEParser()

    def _event(self, ev: dict) -> list[bytes]:
        raise NotImplementedError

    def feed(self, data: bytes) -> list[bytes]:
        out = []
        for payload in self._sse.feed(data):
            try:
                ev = orjson.loads(payload)
            except orjson.JSONDecodeError:
                out.append(payload)  # the relay treats it as malformed
                continue
            if isinstance(ev, dict):
                out.extend(self._event(ev))
        return out
