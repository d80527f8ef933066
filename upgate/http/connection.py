"""HTTP/1.1 for the gateway's clients: Tornado's Application served from an asyncio Protocol.

Tornado's own HTTP1Connection reads every request through IOStream futures and coroutines
(header read, body read, a close listener armed and disarmed with two epoll_ctl calls, a
write future per response); it was the largest share of the gateway's CPU per request
(bench/PROFILE.md). Here the event loop hands bytes straight to `data_received`, a request is
framed in place, and a response is one `transport.write`. Tornado's rules stay: its start-line
parser, its header rules (`parse_headers` is held to `HTTPHeaders.parse` by a property test),
its body framing (Content-Length, chunked, Expect: 100-continue) and keep-alive rules, and the
Application, routing and RequestHandler on top, which see the same `HTTPConnection` interface.

A connection reads one request at a time, in order: bytes of a pipelined next request wait in
the buffer until the current response is finished, reading pauses while more than 1 MB
waits, and no next request starts while the client leaves its answers unread. A write returns
a done future unless the transport's buffer is over its high-water mark, so a streaming
handler that awaits its flush is held back only by a slow client.

This module is the server and its connections (reading, header blocks, flow control, idle
sweeps); one request's body framing and response writing are upgate/http/request.py.
"""
from __future__ import annotations

import asyncio
import logging
import re
import socket
import time

import tornado.ioloop
from tornado import httputil
from tornado.iostream import StreamClosedError

from upgate.http.request import FAILED, HEAD, READ, WAITING, Request

log = logging.getLogger("upgate")

# The end of a header block as Tornado finds it (`\r?\n\r?\n`, whose matches end where these
# do): starting on a literal \n lets the regex engine skip ahead to it, 7x faster.
_HEAD_END = re.compile(rb"\n\r?\n")
# One header line as Tornado 6.6 accepts it (HTTPHeaders.parse_line and add): a token, a colon,
# a value of visible or obs-text characters with inner spaces and tabs, optional whitespace
# around it, CRLF or LF. No folding, no control characters. The possessive `*+` after the colon
# and the atomic group per line keep a match linear: with plain `*` on both sides of an empty
# value, 15 lines of "X:  " before a bad one took seconds (3^n ways to split the spaces).
_LINE = (r"([!#$%&'*+\-.^_`|~0-9A-Za-z]+):[ \t]*+"
         r"((?:[\x21-\x7e\x80-\xff](?:[\x21-\x7e\x80-\xff \t]*[\x21-\x7e\x80-\xff])?)?)"
         r"[ \t]*\r?\n")
_HEADER_LINE = re.compile(_LINE)
_HEADER_LINES = re.compile("(?>" + _LINE.replace("(", "(?:").replace("(?:?:", "(?:") + ")*")
_BAD_REQUEST = b"HTTP/1.1 400 Bad Request\r\n\r\n"
# A client socket is writable once less than this is unsent in the kernel (Linux, 3.12+): the
# rest of a slow reader's answer waits in the transport, whose pause stops the stream relay,
# which pauses the provider's transfer (upgate/handlers/stream.py, docs/performance.md).
_TCP_NOTSENT_LOWAT = getattr(socket, "TCP_NOTSENT_LOWAT", 25)
NOTSENT_LOWAT = 16 * 1024
_TOO_LARGE = b"HTTP/1.1 431 Request Header Fields Too Large\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
MAX_HEADER_LINES = 100  # header lines of one request (as nginx and most servers bound them)
MAX_COOKIE_BYTES = 8 * 1024  # the Cookie header (nginx's default line buffer; a console's are < 1 KB)
_LINGER_S = 2.0  # after a 431, how long the rest of the client's request is read and dropped
_BUFFERED_MAX = 1 << 20  # bytes waiting in the buffer before reading pauses
_BACKLOG = 1024


def use_uvloop() -> None:
    try:
        import uvloop
    except ImportError:  # optional speed-up
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())



class HTTP1Server:
    """Accepts connections on bound sockets and serves `delegate` (a Tornado Application).

    Idle and slow connections are closed by a sweep every `IDLE_SWEEP_S`, not by a timer per
    request: a connection that has waited `idle_timeout_s` for its next request's headers (slow
    headers included), or `body_timeout_s` for a request's headers and body, or whose client
    has read nothing of its answer for `idle_timeout_s`. A request whose body is in is never
    cut otherwise, however long its answer takes."""

    IDLE_SWEEP_S = 5.0

    def __init__(self, delegate: httputil.HTTPServerConnectionDelegate, *, max_header_size: int = 65536,
                 max_body_size: int = 100 << 20, idle_timeout_s: float = 75.0,
                 body_timeout_s: float = 300.0, too_large=None) -> None:
        self.delegate = delegate
        self.too_large = too_large or (lambda: _TOO_LARGE)  # () → the bytes of a 431
        self.max_header_size = max_header_size
        self.max_body_size = max_body_size
        self.idle_timeout_s = idle_timeout_s
        self.body_timeout_s = body_timeout_s
        self.connections: set[Connection] = set()
        self._listeners: list[asyncio.AbstractServer] = []
        self._sweep: tornado.ioloop.PeriodicCallback | None = None
        self._all_closed: asyncio.Event | None = None

    async def listen(self, sockets) -> None:
        loop = asyncio.get_running_loop()
        for sock in sockets:
            self._listeners.append(await loop.create_server(self.accept, sock=sock, backlog=_BACKLOG))
        self._sweep = tornado.ioloop.PeriodicCallback(self.close_idle, self.IDLE_SWEEP_S * 1000)
        self._sweep.start()

    def accept(self) -> Connection:
        """The protocol of a newly accepted connection."""
        return Connection(self)

    def close_idle(self) -> int:
        """Close connections idle or slow past their limit; returns how many."""
        now, closed = time.monotonic(), 0
        for conn in list(self.connections):
            # An answer still leaving is not idle, however long the client takes to read it
            # (a slow reader of a big backlog, or of the last batch after the handler finished);
            # a client that makes no progress for the idle limit has stopped reading: abort.
            unsent = conn.transport.get_write_buffer_size()
            if unsent:
                sent = conn.written - unsent
                if not conn.waiting_since or sent > conn.sent_seen:
                    conn.waiting_since, conn.sent_seen = now, sent
                if now - conn.waiting_since >= self.idle_timeout_s:
                    conn.transport.abort()
                    closed += 1
                continue
            conn.waiting_since = 0.0
            if conn.transport.is_closing():
                conn.transport.abort()
                closed += 1
                continue
            req = conn.request
            if req is None or req.state == HEAD:
                limit = self.idle_timeout_s
            elif req.state != READ:
                limit = self.body_timeout_s
            else:
                continue
            if now - conn.since >= limit:
                conn.transport.close()
                closed += 1
        return closed

    def stop(self) -> None:
        """Stop accepting; open connections keep being served."""
        if self._sweep is not None:
            self._sweep.stop()
        for listener in self._listeners:
            listener.close()
        self._listeners = []

    async def close_all_connections(self, grace_s: float = 1.0) -> None:
        """Close every connection: what is already written is flushed for up to `grace_s`."""
        if not self.connections:
            return
        self._all_closed = asyncio.Event()
        for conn in list(self.connections):
            conn.transport.close()
        try:
            await asyncio.wait_for(self._all_closed.wait(), grace_s)
        except asyncio.TimeoutError:
            for conn in list(self.connections):  # a client that does not read: drop its bytes
                conn.transport.abort()
            await self._all_closed.wait()

    def _lost(self, conn: Connection) -> None:
        self.connections.discard(conn)
        if not self.connections and self._all_closed is not None:
            self._all_closed.set()


class _Context:
    """What Tornado's HTTPServerRequest reads from `connection.context`."""

    __slots__ = ("remote_ip", "protocol", "address")

    def __init__(self, address) -> None:
        self.address = address
        self.remote_ip = address[0] if isinstance(address, tuple) else "0.0.0.0"
        self.protocol = "http"

    def __str__(self) -> str:
        return self.remote_ip


class Connection(asyncio.Protocol):
    """One client connection. Reads requests in order and frames their bodies; `Request` is
    the HTTPConnection that Tornado's handler writes its response through."""

    def __init__(self, server: HTTP1Server) -> None:
        self.server = server
        self.transport: asyncio.Transport = None  # type: ignore[assignment]
        self.context: _Context | None = None
        self.buf = bytearray()
        self.request: Request | None = None  # the request being read or answered
        self.since = time.monotonic()  # when it began waiting for the current request
        self.closed = False
        self._scanned = 0  # bytes of buf already searched for the end of the header block
        self._lines = 0  # line ends in those bytes
        self._discarding = False  # answered 431: what still comes is dropped until the close
        self._reading = True
        self.stalled_since: float | None = None  # writing paused (the client is not reading)
        self.written = 0  # bytes handed to the transport, for the sweep's progress check
        self.sent_seen = 0  # of those, how many had left when the sweep last saw progress
        self.waiting_since = 0.0  # since when the sweep has seen unsent bytes and no progress
        self._waiters: list[asyncio.Future] = []  # writes waiting for the transport to drain
        self._done: asyncio.Future | None = None  # the future every unblocked write returns
        self.chunks_this_turn = 0

    # ---- transport events
    def connection_made(self, transport) -> None:
        self.transport = transport
        self.context = _Context(transport.get_extra_info("peername"))
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            # small SSE writes leave at once, never behind a delayed ACK (~40 ms otherwise)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            # what the kernel holds unsent for a client that reads slowly stays ~100 KB, not the
            # ~4 MB a send buffer autotunes to (a fast client's window is not limited by it)
            sock.setsockopt(socket.IPPROTO_TCP, _TCP_NOTSENT_LOWAT, NOTSENT_LOWAT)
        self._done = asyncio.get_running_loop().create_future()
        self._done.set_result(None)
        self.server.connections.add(self)

    def data_received(self, data: bytes) -> None:
        if self._discarding:
            return
        self.buf += data
        self._advance()

    def eof_received(self) -> bool:
        return False  # a client that half-closes is gone, as Tornado treats it: close

    def connection_lost(self, exc) -> None:
        self.closed = True
        self.server._lost(self)
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_exception(StreamClosedError())
                fut.exception()  # retrieved: its writer may be gone
        req = self.request
        if req is not None:
            req.lost()

    def pause_writing(self) -> None:
        self.stalled_since = time.monotonic()
        if not self.waiting_since:  # the sweep's progress check starts from here
            self.waiting_since = self.stalled_since
            self.sent_seen = self.written - self.transport.get_write_buffer_size()

    def resume_writing(self) -> None:
        self.stalled_since = None
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():  # a writer that gave up (cancelled) is skipped
                fut.set_result(None)
        self._advance_soon()

    # ---- writing
    def gone(self) -> bool:
        """Closed, or closing: nothing more can be written."""
        return self.closed or self.transport.is_closing()

    def send(self, data: bytes) -> asyncio.Future:
        if self.gone():
            fut = asyncio.get_running_loop().create_future()
            fut.set_exception(StreamClosedError())
            fut.exception()
            return fut
        self.written += len(data)  # first: write() may call pause_writing, which reads it
        self.transport.write(data)
        if self.stalled_since is None:
            return self._done  # type: ignore[return-value]
        fut = asyncio.get_running_loop().create_future()  # one per writer: one may cancel its own
        self._waiters.append(fut)
        return fut

    def bad_request(self) -> None:
        """Malformed framing: a bare 400 unless a response was already begun, then close."""
        req = self.request
        if not self.transport.is_closing() and (req is None or not req.began):
            self.transport.write(_BAD_REQUEST)
        self.transport.close()

    # ---- reading
    def _advance_soon(self) -> None:
        if self.buf and not self.closed:
            asyncio.get_running_loop().call_soon(self._advance)
        else:
            self._flow()

    def _advance(self) -> None:
        """Consume buffered bytes for as long as the current request can take them."""
        self.chunks_this_turn = 0
        try:
            while not self.gone():
                req = self.request
                if req is None:
                    if self.stalled_since is not None:
                        break  # the client is not reading its answers: take no more requests
                    if not self._begin():
                        break
                elif not req.consume():
                    break
        except httputil.HTTPInputError:
            log.debug("malformed request from %s: closed", self.context)
            self.bad_request()
            req = self.request
            if req is not None and req.state not in (HEAD, WAITING):
                req.lost()  # a handler is reading this body: it hears the connection go
            return
        self._flow()

    def _flow(self) -> None:
        """Read from the socket only while what waits in the buffer is small: bytes pile up
        while a handler prepares or answers (a pipelining client, a fast body)."""
        if self._reading:
            req = self.request  # (a header block is bounded by max_header_size instead)
            if len(self.buf) > _BUFFERED_MAX and req is not None and req.state != HEAD and not self.gone():
                self._reading = False
                self.transport.pause_reading()
        elif len(self.buf) <= _BUFFERED_MAX and not self.gone():
            self._reading = True
            self.transport.resume_reading()

    def too_large(self) -> None:
        """A header block past max_header_size or MAX_HEADER_LINES: 431, then close (every
        header line is work for the loop before any handler can refuse the request). What the
        client still sends is read and dropped for a moment: closing on unread bytes would send
        a reset, which can destroy the 431 before the client reads it."""
        transport = self.transport
        if transport.is_closing() or self._discarding:
            return
        transport.write(self.server.too_large())
        self._discarding = True
        self.buf.clear()
        if transport.can_write_eof():
            transport.write_eof()
        asyncio.get_running_loop().call_later(_LINGER_S, transport.close)

    def _begin(self) -> bool:
        """Start the next request once its whole header block is in."""
        buf, limit = self.buf, self.server.max_header_size
        # headers may come a few bytes at a time: search only what is new (and 3 bytes back)
        m = _HEAD_END.search(buf, max(0, self._scanned - 3), limit)
        end = len(buf) if m is None else m.end()
        self._lines += buf.count(b"\n", self._scanned, end)
        if self._lines > MAX_HEADER_LINES + 2 or (m is None and len(buf) > limit):  # (+ start, end)
            self.too_large()
            return False
        if m is None:
            self._scanned = len(buf)
            return False
        self._scanned = self._lines = 0
        block = bytes(buf[:end]).lstrip(b"\r\n")
        del buf[:end]
        if block.count(b"\n") != block.count(b"\r\n") or block.count(b"\r") != block.count(b"\r\n"):
            # a bare LF or CR ends no line here (llhttp's rule): a proxy in front that took it
            # for one would frame this request differently
            raise httputil.HTTPInputError("bare LF or CR in the header block")
        text = block.decode("latin1")
        eol = text.find("\n")
        start_line = httputil.parse_request_start_line(text[:eol].rstrip("\r"))
        headers = parse_headers(text[eol + 1:])
        if "Cookie" in headers and len(headers["Cookie"]) > MAX_COOKIE_BYTES:
            self.too_large()  # before any handler parses it (thousands of pairs: tens of ms)
            return False
        req = self.request = Request(self, start_line, headers)
        delegate = req.delegate = self.server.delegate.start_request(self, req)
        req.state = WAITING
        try:
            prepared = req.call(delegate.headers_received, start_line, headers)
        except httputil.HTTPInputError:
            req._told_lost = True  # refused before any handler existed: nobody to tell
            raise
        if prepared is FAILED:
            return False
        if prepared is not None:
            prepared = asyncio.ensure_future(prepared)  # Tornado's is a Future; any awaitable goes
            if not prepared.done():
                prepared.add_done_callback(req.prepared)
                return False
        req.prepared()
        return True

    def request_done(self, req: Request) -> None:
        """The response is finished: close, or take the next request."""
        if req is not self.request:
            return
        if req.disconnect:
            self.transport.close()
            return
        self.request = None
        self.since = time.monotonic()
        self._advance_soon()


def parse_headers(block: str) -> httputil.HTTPHeaders:
    """The header lines after a start line, each ending in CRLF or LF, then the blank line:
    what Tornado's HTTPHeaders.parse accepts, refuses and returns, with two regex passes over
    the block instead of four regex calls a line (Tornado's took 49 µs for the 17 header lines
    the openai SDK sends; this, 15). tests/http/test_http1.py holds it to Tornado's on generated
    input."""
    lines = block[:len(block) - (2 if block.endswith("\r\n") else 1)]  # less the blank line
    if _HEADER_LINES.fullmatch(lines) is None:
        raise httputil.HTTPInputError("Malformed HTTP header line")
    headers, seen = httputil.HTTPHeaders(), set()
    for name, value in _HEADER_LINE.findall(lines):
        key = name.lower()
        if key in seen:
            headers.add(name, value)  # a repeated field: its values are joined, as Tornado does
        else:
            seen.add(key)
            headers[name] = value
    return headers
