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
"""
from __future__ import annotations

import asyncio
import logging
import re
import socket
import time

import tornado.ioloop
from tornado import httputil
from tornado.http1connection import is_transfer_encoding_chunked, parse_hex_int, parse_int
from tornado.iostream import StreamClosedError
from tornado.log import app_log

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
_CONTINUE = b"HTTP/1.1 100 (Continue)\r\n\r\n"
_BAD_REQUEST = b"HTTP/1.1 400 Bad Request\r\n\r\n"
_TOO_LARGE = b"HTTP/1.1 431 Request Header Fields Too Large\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
MAX_HEADER_LINES = 100  # header lines of one request (as nginx and most servers bound them)
_LINGER_S = 2.0  # after a 431, how long the rest of the client's request is read and dropped
_CHUNK = 65536  # largest body piece handed to a handler at once
_CHUNK_LINE = 64  # longest chunk-size line (Tornado's limit)
_BUFFERED_MAX = 1 << 20  # bytes waiting in the buffer before reading pauses
_CHUNKS_PER_TURN = 256  # chunk-size lines framed before other connections get the loop
_BACKLOG = 1024

# reading states of a request
# (_WAITING: on the handler, its prepare() or a data_received that returned a pending future)
_HEAD, _WAITING, _BODY, _CHUNK_SIZE, _CHUNK_DATA, _CHUNK_END, _LAST_CRLF, _READ = range(8)


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
            if req is None or req.state == _HEAD:
                limit = self.idle_timeout_s
            elif req.state != _READ:
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
            if req is not None and req.state not in (_HEAD, _WAITING):
                req.lost()  # a handler is reading this body: it hears the connection go
            return
        self._flow()

    def _flow(self) -> None:
        """Read from the socket only while what waits in the buffer is small: bytes pile up
        while a handler prepares or answers (a pipelining client, a fast body)."""
        if self._reading:
            req = self.request  # (a header block is bounded by max_header_size instead)
            if len(self.buf) > _BUFFERED_MAX and req is not None and req.state != _HEAD and not self.gone():
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
        req = self.request = Request(self, start_line, headers)
        delegate = req.delegate = self.server.delegate.start_request(self, req)
        req.state = _WAITING
        try:
            prepared = req.call(delegate.headers_received, start_line, headers)
        except httputil.HTTPInputError:
            req._told_lost = True  # refused before any handler existed: nobody to tell
            raise
        if prepared is _FAILED:
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


_FAILED = object()


def _take(buf: bytearray, n: int) -> bytes:
    """The first n bytes of buf, removed from it."""
    if n == len(buf):
        piece = bytes(buf)
        buf.clear()
    else:
        piece = bytes(buf[:n])
        del buf[:n]
    return piece


class Request(httputil.HTTPConnection):
    """One request on a Connection: its body framing on the way in, its response on the way out
    (Tornado's HTTPConnection interface: write_headers, write, finish, set_close_callback)."""

    def __init__(self, conn: Connection, start_line: httputil.RequestStartLine,
                 headers: httputil.HTTPHeaders) -> None:
        self.conn = conn
        self.context = conn.context
        self.start_line = start_line
        self.headers = headers
        self.delegate: httputil.HTTPMessageDelegate | None = None
        self.state = _HEAD
        self.remaining_in = 0  # body bytes still to read (fixed length, or of the current chunk)
        self.total_in = 0
        self._pending = bytearray()  # chunked body bytes joined, not yet handed over
        self.disconnect = not _keep_alive(start_line, headers)
        self.began = False  # response headers written
        self.write_finished = False
        self._told_lost = False
        self.chunking = False
        self.remaining_out: int | None = None  # response bytes Content-Length still allows
        self._close_callback = None
        self._framed = False  # prepared() has run: _WAITING from here on is back-pressure

    # ---- reading (driven by Connection._advance)
    def call(self, fn, *args):
        try:
            return fn(*args)
        except httputil.HTTPInputError:
            raise  # the request is malformed (e.g. no Host): a bare 400, as Tornado answers
        except Exception:
            app_log.error("Uncaught exception", exc_info=True)
            self.conn.transport.close()
            return _FAILED

    def prepared(self, _future=None) -> None:
        """The handler's prepare() is done: frame the body (Tornado's rules and order)."""
        conn = self.conn
        if conn.gone() or self.state != _WAITING or self._framed:
            return  # (framed already, by ready_for_body: an async data_received may wait now)
        self._framed = True
        headers = self.headers
        try:
            if header(headers, "Expect") == "100-continue" and not self.write_finished:
                conn.transport.write(_CONTINUE)
            length = None
            if "Content-Length" in headers:
                value = headers["Content-Length"]
                if "," in value:  # a proxy may repeat it: fine only if all copies agree
                    pieces = re.split(r",[ \t]*", value)
                    if any(p != pieces[0] for p in pieces):
                        raise httputil.HTTPInputError("Multiple unequal Content-Lengths")
                    value = headers["Content-Length"] = pieces[0]
                try:
                    length = parse_int(value)
                except ValueError:
                    raise httputil.HTTPInputError("Only integer Content-Length is allowed") from None
                if length > conn.server.max_body_size:
                    raise httputil.HTTPInputError("Content-Length too long")
            if is_transfer_encoding_chunked(headers):
                self.state = _CHUNK_SIZE
            elif length:
                self.state, self.remaining_in = _BODY, length
            else:
                self._end_body()
        except httputil.HTTPInputError:
            conn.bad_request()
            self.lost()
            return
        if _future is not None:  # resumed from a callback: carry on with what is buffered
            conn._advance()

    def ready_for_body(self) -> None:
        """Called at the end of the handler's prepare(): frame and deliver the buffered body
        now. Tornado's prepared future would call `prepared` a loop turn later, and the
        handler's task a turn after that; delivered now, a body that is all in lets the handler
        go straight on from prepare() into its method. Under load a turn is milliseconds."""
        if self.conn.request is self and self.delegate is not None:
            self.prepared(True)  # then Tornado's callback finds it framed and does nothing

    def consume(self) -> bool:
        """Take what the buffer holds; False when more bytes (or the response) are needed."""
        state, buf = self.state, self.conn.buf
        if state == _READ or state == _WAITING:
            return False  # answering, or waiting for the handler
        if state == _BODY:
            n = min(len(buf), self.remaining_in, _CHUNK)
            if not n:
                return False
            self.remaining_in -= n
            self._deliver(_take(buf, n), None if self.remaining_in else self._end_body)
            return True
        if state == _CHUNK_DATA:
            # chunk boundaries mean nothing: pieces are joined up to _CHUNK before the handler
            # sees them (a body of one-byte chunks must not become a million data_received
            # calls and a million objects held), and handed over whenever the buffer runs dry
            n = min(len(buf), self.remaining_in)
            if not n:
                return self._hand_over()
            self._pending += _take(buf, n)
            self.remaining_in -= n
            if not self.remaining_in:
                self.state = _CHUNK_END
            if len(self._pending) >= _CHUNK:
                self._deliver(self._take_pending())
            return True
        if state == _CHUNK_SIZE:
            conn = self.conn
            conn.chunks_this_turn += 1
            if conn.chunks_this_turn > _CHUNKS_PER_TURN:  # let other connections have the loop
                asyncio.get_running_loop().call_soon(conn._advance)
                return self._hand_over()
            eol = buf.find(b"\r\n", 0, _CHUNK_LINE)
            if eol < 0:
                if len(buf) >= _CHUNK_LINE:
                    raise httputil.HTTPInputError("chunk size line too long")
                return self._hand_over()
            try:
                size = parse_hex_int(buf[:eol].decode("latin1"))
            except ValueError:
                raise httputil.HTTPInputError("invalid chunk size") from None
            del buf[:eol + 2]
            if size == 0:
                self.state = _LAST_CRLF
                return True
            self.total_in += size
            if self.total_in > conn.server.max_body_size:
                raise httputil.HTTPInputError("chunked body too large")
            self.state, self.remaining_in = _CHUNK_DATA, size
            return True
        # _CHUNK_END or _LAST_CRLF: the CRLF after a chunk's data, or after the last chunk
        if len(buf) < 2:
            return self._hand_over()
        if buf[:2] != b"\r\n":
            raise httputil.HTTPInputError("improperly terminated chunked request")
        del buf[:2]
        if state == _LAST_CRLF:
            if self._pending:
                self._deliver(self._take_pending(), self._end_body)
            else:
                self._end_body()
        else:
            self.state = _CHUNK_SIZE
        return True

    def _take_pending(self) -> bytes:
        piece, self._pending = bytes(self._pending), bytearray()
        return piece

    def _hand_over(self) -> bool:
        """Out of bytes in a chunked body: what is joined so far goes to the handler now."""
        if self._pending:
            self._deliver(self._take_pending())
        return False

    def _deliver(self, piece: bytes, then=None) -> None:
        """Hand a body piece to the handler, then run `then` (the end of the body) once it
        took it: at once, or when an async data_received is done."""
        ret = None
        if not self.write_finished:  # else answered early: the rest of the body is dropped
            ret = self.call(self.delegate.data_received, piece)
            if ret is _FAILED:
                return
        if ret is not None:
            ret = asyncio.ensure_future(ret)  # an async data_received returns a coroutine
            if not ret.done():
                # back-pressure: read no further until the handler is ready
                saved, self.state = self.state, _WAITING
                ret.add_done_callback(lambda f: self._resume(f, saved, then))
                return
            if not self._accepted(ret):
                return
        if then is not None:
            then()

    def _resume(self, future: asyncio.Future, state: int, then) -> None:
        if self.state != _WAITING or self._told_lost or self.conn.gone():
            return  # the connection went meanwhile: the handler was told, nothing follows
        if not self._accepted(future):
            return
        self.state = state
        if then is not None:
            then()
        self.conn._advance()

    def _accepted(self, future: asyncio.Future) -> bool:
        """An async data_received that failed ends the request, as a raising one does."""
        if future.cancelled() or future.exception() is not None:
            if not future.cancelled():
                app_log.error("Uncaught exception", exc_info=future.exception())
            self.conn.transport.close()
            return False
        return True

    def _end_body(self) -> None:
        self.state = _READ
        if not self.write_finished:
            self.call(self.delegate.finish)

    def lost(self) -> None:
        """The connection closed under this request."""
        if self.write_finished or self._told_lost:
            return
        self._told_lost = True
        if self.state != _READ:  # still reading: the delegate hears it (Tornado's order)
            if self.delegate is not None and self.state != _HEAD:
                self.call(self.delegate.on_connection_close)
            return
        callback, self._close_callback = self._close_callback, None
        if callback is not None:
            callback()

    # ---- HTTPConnection: the response
    def set_close_callback(self, callback) -> None:
        self._close_callback = callback

    def set_body_timeout(self, timeout: float) -> None:
        pass  # the server's sweep bounds every body

    def set_max_body_size(self, max_body_size: int) -> None:
        pass  # the handlers enforce the body limit themselves, with the spec's 413

    def write_headers(self, start_line, headers, chunk=None) -> asyncio.Future:
        req_line = self.start_line
        code = start_line.code
        v11 = req_line.version == "HTTP/1.1"
        if self.state != _READ:
            # answered before the whole body is in: the connection closes after this response
            # (the only way not to read the rest), and the client is told so
            self.disconnect = True
        self.chunking = (v11 and req_line.method != "HEAD" and code not in (204, 304)
                         and not 100 <= code < 200 and "Content-Length" not in headers)
        if v11 and self.disconnect:
            headers["Connection"] = "close"
        elif req_line.version == "HTTP/1.0" and self.headers.get("Connection", "").lower() == "keep-alive":
            headers["Connection"] = "Keep-Alive"
        if self.chunking:
            headers["Transfer-Encoding"] = "chunked"
        if req_line.method == "HEAD" or code == 304:
            self.remaining_out = 0
        elif "Content-Length" in headers:
            self.remaining_out = int(headers["Content-Length"])  # RequestHandler set it
        else:
            self.remaining_out = None
        lines = [f"HTTP/1.1 {code} {start_line.reason}"]
        lines.extend([f"{name}: {value}" for name, value in headers.get_all()])
        head = "\r\n".join(lines)
        if head.count("\n") != len(lines) - 1 or head.count("\r") != len(lines) - 1:
            raise ValueError("Illegal characters (CR or LF) in header")
        self.began = True
        data = (head + "\r\n\r\n").encode("latin1")
        if chunk:
            data += self._frame(chunk)
        return self.conn.send(data)

    def write(self, chunk: bytes) -> asyncio.Future:
        return self.conn.send(self._frame(chunk))

    def writable(self) -> bool:
        """A write now goes out without waiting: the connection is open and its client reads."""
        conn = self.conn
        return conn.stalled_since is None and not conn.gone()

    def _frame(self, chunk: bytes) -> bytes:
        if self.remaining_out is not None:
            self.remaining_out -= len(chunk)
            if self.remaining_out < 0:
                self.conn.transport.close()  # stop a framing error from going further
                raise httputil.HTTPOutputError("Tried to write more data than Content-Length")
        if self.chunking and chunk:
            return b"%x\r\n%b\r\n" % (len(chunk), chunk)
        return chunk

    def finish(self) -> None:
        conn = self.conn
        if self.remaining_out and not conn.gone():
            conn.transport.close()
            raise httputil.HTTPOutputError(
                f"Tried to write {self.remaining_out} bytes less than Content-Length")
        if self.chunking:
            conn.send(b"0\r\n\r\n")
        self.write_finished = True
        self._close_callback = None
        conn.request_done(self)  # (write_headers decided whether the connection closes)


def parse_headers(block: str) -> httputil.HTTPHeaders:
    """The header lines after a start line, each ending in CRLF or LF, then the blank line:
    what Tornado's HTTPHeaders.parse accepts, refuses and returns, with two regex passes over
    the block instead of four regex calls a line (Tornado's took 49 µs for the 17 header lines
    the openai SDK sends; this, 15). tests/test_http1.py holds it to Tornado's on generated
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


def header(headers: httputil.HTTPHeaders, name: str) -> str | None:
    """headers.get(name), without Mapping.get's raise-and-catch of a KeyError when the header is
    absent (most of the few a request is asked for are: Expect, Connection, X-Svc-Include-Meta)."""
    return headers[name] if name in headers else None


def _keep_alive(start_line: httputil.RequestStartLine, headers: httputil.HTTPHeaders) -> bool:
    connection = header(headers, "Connection")
    if connection is not None:
        connection = connection.lower()
    if start_line.version == "HTTP/1.1":
        return connection != "close"
    if "Content-Length" in headers or "Transfer-Encoding" in headers or start_line.method in ("HEAD", "GET"):
        return connection == "keep-alive"
    return False
