"""One request on an HTTP/1.1 connection (upgate/http/connection.py): its body framed on the way in by
Tornado's rules (Content-Length, chunked, Expect: 100-continue), handed to the handler in pieces
of at most 64 KB, and its response written on the way out, through Tornado's HTTPConnection
interface (write_headers, write, finish), with Tornado's keep-alive rules.
"""
from __future__ import annotations

import asyncio
import re

from tornado import httputil
from tornado.http1connection import is_transfer_encoding_chunked, parse_hex_int, parse_int
from tornado.log import app_log

_CONTINUE = b"HTTP/1.1 100 (Continue)\r\n\r\n"
_CHUNK = 65536  # largest body piece handed to a handler at once
_CHUNK_LINE = 64  # longest chunk-size line (Tornado's limit)
_CHUNKS_PER_TURN = 256  # chunk-size lines framed before other connections get the loop

# reading states of a request
# (WAITING: on the handler, its prepare() or a data_received that returned a pending future)
HEAD, WAITING, BODY, CHUNK_SIZE, CHUNK_DATA, CHUNK_END, LAST_CRLF, READ = range(8)

FAILED = object()


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

    def __init__(self, conn,  # its upgate.http.connection.Connection (which imports this module)
                 start_line: httputil.RequestStartLine,
                 headers: httputil.HTTPHeaders) -> None:
        self.conn = conn
        self.context = conn.context
        self.start_line = start_line
        self.headers = headers
        self.delegate: httputil.HTTPMessageDelegate | None = None
        self.state = HEAD
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
        self._framed = False  # prepared() has run: WAITING from here on is back-pressure

    # ---- reading (driven by Connection._advance)
    def call(self, fn, *args):
        try:
            return fn(*args)
        except httputil.HTTPInputError:
            raise  # the request is malformed (e.g. no Host): a bare 400, as Tornado answers
        except Exception:
            app_log.error("Uncaught exception", exc_info=True)
            self.conn.transport.close()
            return FAILED

    def prepared(self, _future=None) -> None:
        """The handler's prepare() is done: frame the body (Tornado's rules and order)."""
        conn = self.conn
        if conn.gone() or self.state != WAITING or self._framed:
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
                self.state = CHUNK_SIZE
            elif length:
                self.state, self.remaining_in = BODY, length
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
        if state == READ or state == WAITING:
            return False  # answering, or waiting for the handler
        if state == BODY:
            n = min(len(buf), self.remaining_in, _CHUNK)
            if not n:
                return False
            self.remaining_in -= n
            self._deliver(_take(buf, n), None if self.remaining_in else self._end_body)
            return True
        if state == CHUNK_DATA:
            # chunk boundaries mean nothing: pieces are joined up to _CHUNK before the handler
            # sees them (a body of one-byte chunks must not become a million data_received
            # calls and a million objects held), and handed over whenever the buffer runs dry
            n = min(len(buf), self.remaining_in)
            if not n:
                return self._hand_over()
            self._pending += _take(buf, n)
            self.remaining_in -= n
            if not self.remaining_in:
                self.state = CHUNK_END
            if len(self._pending) >= _CHUNK:
                self._deliver(self._take_pending())
            return True
        if state == CHUNK_SIZE:
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
                self.state = LAST_CRLF
                return True
            self.total_in += size
            if self.total_in > conn.server.max_body_size:
                raise httputil.HTTPInputError("chunked body too large")
            self.state, self.remaining_in = CHUNK_DATA, size
            return True
        # CHUNK_END or LAST_CRLF: the CRLF after a chunk's data, or after the last chunk
        if len(buf) < 2:
            return self._hand_over()
        if buf[:2] != b"\r\n":
            raise httputil.HTTPInputError("improperly terminated chunked request")
        del buf[:2]
        if state == LAST_CRLF:
            if self._pending:
                self._deliver(self._take_pending(), self._end_body)
            else:
                self._end_body()
        else:
            self.state = CHUNK_SIZE
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
            if ret is FAILED:
                return
        if ret is not None:
            ret = asyncio.ensure_future(ret)  # an async data_received returns a coroutine
            if not ret.done():
                # back-pressure: read no further until the handler is ready
                saved, self.state = self.state, WAITING
                ret.add_done_callback(lambda f: self._resume(f, saved, then))
                return
            if not self._accepted(ret):
                return
        if then is not None:
            then()

    def _resume(self, future: asyncio.Future, state: int, then) -> None:
        if self.state != WAITING or self._told_lost or self.conn.gone():
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
        self.state = READ
        if not self.write_finished:
            self.call(self.delegate.finish)

    def lost(self) -> None:
        """The connection closed under this request."""
        if self.write_finished or self._told_lost:
            return
        self._told_lost = True
        if self.state != READ:  # still reading: the delegate hears it (Tornado's order)
            if self.delegate is not None and self.state != HEAD:
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
        if self.state != READ:
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
