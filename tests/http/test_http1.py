"""The gateway's HTTP/1.1 layer (upgate/http/connection.py) over real sockets, with a small Tornado app:
framing in and out, keep-alive rules, pipelining, back-pressure, disconnects."""

import asyncio
import hashlib
import socket
import time

import pytest
import tornado.netutil
import tornado.web
from hypothesis import given, settings
from hypothesis import strategies as st
from tornado.httputil import HTTPHeaders, HTTPInputError

from tests.gateway import LoopThread
from upgate.http.connection import HTTP1Server, parse_headers

pytestmark = pytest.mark.timeout(60)

EVENTS: list = []


@tornado.web.stream_request_body
class Echo(tornado.web.RequestHandler):
    """Answers with the body's length and sha256."""

    def prepare(self):
        self.h, self.n = hashlib.sha256(), 0
        if self.request.headers.get("X-Refuse"):
            self.set_status(413)
            self.finish("refused")

    def data_received(self, chunk):
        self.h.update(chunk)
        self.n += len(chunk)

    def post(self):
        self.finish(f"{self.n} {self.h.hexdigest()}")

    def get(self):
        self.finish("hello")


class Buffered(tornado.web.RequestHandler):
    """No stream_request_body: Tornado hands the whole body over at once."""

    def post(self):
        self.finish(digest(self.request.body))


@tornado.web.stream_request_body
class Sluggish(Echo):
    """A data_received that takes its time (back-pressure): the body still arrives whole."""

    async def data_received(self, chunk):
        await asyncio.sleep(0.01)
        super().data_received(chunk)


@tornado.web.stream_request_body
class Pieces(tornado.web.RequestHandler):
    """Answers with how many data_received calls the body took, and its digest."""

    def prepare(self):
        self.calls, self.body = 0, bytearray()

    def data_received(self, chunk):
        self.calls += 1
        self.body += chunk

    def post(self):
        self.finish(b"%d %s" % (self.calls, digest(bytes(self.body))))


@tornado.web.stream_request_body
class Prompt(Pieces):
    """Asks for its body at the end of prepare(), as upgate's BaseHandler does, and says
    whether post() ran in prepare()'s loop turn or a later one."""

    def prepare(self):
        super().prepare()
        self.turned = False
        asyncio.get_running_loop().call_soon(self._turn)  # runs at the next loop turn
        self.request.connection.ready_for_body()

    def _turn(self):
        self.turned = True

    def post(self):
        turn = b"later turn" if self.turned else b"same turn"
        self.finish(b"%s: %d %s" % (turn, self.calls, digest(bytes(self.body))))


@tornado.web.stream_request_body
class PromptSluggish(Prompt):
    """Asks for its body in prepare() and holds each piece back (async data_received)."""

    async def data_received(self, chunk):
        await asyncio.sleep(0.001)
        super().data_received(chunk)


@tornado.web.stream_request_body
class Failing(tornado.web.RequestHandler):
    async def data_received(self, chunk):
        raise ValueError("the handler broke")

    def post(self):
        EVENTS.append(("failing post ran", None))
        self.finish("should not happen")

    def on_connection_close(self):
        EVENTS.append(("failing closed", None))


class Big(tornado.web.RequestHandler):
    def get(self):
        EVENTS.append(("big", None))
        self.finish(b"y" * 65536)


class Firehose(tornado.web.RequestHandler):
    """Writes 64 KB pieces for as long as each flush returns; records how far it got."""

    async def get(self):
        sent = 0
        try:
            while sent < 512 << 20:
                self.write(b"x" * 65536)
                await self.flush()
                sent += 65536
                EVENTS.append(("sent", sent))
        except tornado.iostream.StreamClosedError:
            EVENTS.append(("closed", sent))

    def on_connection_close(self):
        EVENTS.append(("on_connection_close", None))


class Slow(tornado.web.RequestHandler):
    async def get(self):
        await asyncio.sleep(5)
        self.finish("late")

    def on_connection_close(self):
        EVENTS.append(("slow closed", None))


@pytest.fixture()
def server():
    EVENTS.clear()
    thread = LoopThread("http1-test")
    sockets = tornado.netutil.bind_sockets(0, "127.0.0.1")
    app = tornado.web.Application([("/echo", Echo), ("/buffered", Buffered), ("/sluggish", Sluggish),
                                   ("/firehose", Firehose), ("/slow", Slow), ("/big", Big),
                                   ("/pieces", Pieces), ("/failing", Failing), ("/prompt", Prompt),
                                   ("/prompt-sluggish", PromptSluggish)])

    async def start():
        srv = HTTP1Server(app, max_header_size=4096, max_body_size=1 << 20)
        await srv.listen(sockets)
        return srv
    srv = thread.run(start())
    srv.port = sockets[0].getsockname()[1]
    srv.thread = thread
    yield srv

    async def stop():
        srv.stop()
        await srv.close_all_connections()
    thread.run(stop())
    thread.close()


def connect(srv) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
    return sock


def read_response(sock, buf: bytearray) -> tuple[bytes, dict, bytes]:
    """One response off `sock` (Content-Length or chunked); leftovers stay in buf."""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            raise EOFError(bytes(buf))
        buf += chunk
    head, _, rest = bytes(buf).partition(b"\r\n\r\n")
    buf[:] = rest
    status, *lines = head.decode("latin1").split("\r\n")
    headers = {k.lower(): v for k, v in (line.split(": ", 1) for line in lines)}
    body = b""
    if "content-length" in headers:
        n = int(headers["content-length"])
        while len(buf) < n:
            buf += sock.recv(65536)
        body, buf[:] = bytes(buf[:n]), buf[n:]
    elif headers.get("transfer-encoding") == "chunked":
        while True:
            while b"\r\n" not in buf:
                buf += sock.recv(65536)
            size_line, _, rest = bytes(buf).partition(b"\r\n")
            size = int(size_line, 16)
            while len(rest) < size + 2:
                rest += sock.recv(65536)
            body += rest[:size]
            buf[:] = rest[size + 2:]
            if size == 0:
                break
    return status.encode(), headers, body


def closed(sock) -> bool:
    sock.settimeout(3)
    try:
        while True:
            if sock.recv(65536) == b"":
                return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def digest(body: bytes) -> bytes:
    return f"{len(body)} {hashlib.sha256(body).hexdigest()}".encode()


def test_pipelined_requests_are_answered_in_order_on_one_connection(server):
    sock, buf = connect(server), bytearray()
    body = b'{"a": 1}'
    sock.sendall(b"GET /echo HTTP/1.1\r\nHost: x\r\n\r\n"
                 + b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
                 + b"GET /echo HTTP/1.1\r\nHost: x\r\n\r\n")
    assert read_response(sock, buf)[2] == b"hello"
    assert read_response(sock, buf)[2] == digest(body)
    status, headers, out = read_response(sock, buf)
    assert (status, out) == (b"HTTP/1.1 200 OK", b"hello")
    assert "connection" not in headers  # kept alive


@pytest.mark.parametrize("path", [b"/buffered", b"/sluggish"])
@pytest.mark.parametrize("chunked", [False, True])
def test_handlers_that_buffer_or_hold_back_get_the_whole_body(server, path, chunked):
    sock, buf = connect(server), bytearray()
    body = bytes(range(256)) * 500
    if chunked:
        framed = b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + 30_000]), body[i:i + 30_000])
                          for i in range(0, len(body), 30_000)) + b"0\r\n\r\n"
        head = b"Transfer-Encoding: chunked"
    else:
        framed, head = body, b"Content-Length: %d" % len(body)
    for _ in range(2):  # and the connection carries on to the next request
        sock.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\n%s\r\n\r\n%s" % (path, head, framed))
        assert read_response(sock, buf)[2] == digest(body)


def test_a_head_answer_has_no_body_and_the_connection_carries_on(server):
    sock, buf = connect(server), bytearray()
    sock.sendall(b"HEAD /echo HTTP/1.1\r\nHost: x\r\n\r\nGET /echo HTTP/1.1\r\nHost: x\r\n\r\n")
    sock.settimeout(5)
    while buf.count(b"\r\n\r\n") < 2 or not buf.endswith(b"hello"):
        buf += sock.recv(65536)
    head, _, rest = bytes(buf).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 405 ") and b"Content-Length: " in head
    assert rest.startswith(b"HTTP/1.1 200 OK\r\n") and rest.endswith(b"\r\n\r\nhello")


def test_a_stray_crlf_before_a_request_is_skipped(server):
    sock, buf = connect(server), bytearray()
    raw = b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"
    sock.sendall(b"\r\n" + raw + raw)
    assert read_response(sock, buf)[2] == digest(b"abc")
    assert read_response(sock, buf)[2] == digest(b"abc")


def _answer_then_closed(sock) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


@pytest.mark.parametrize("line,header,blank", [("\n", "\n", "\n"), ("\r\n", "\r\n", "\n"),
                                               ("\n", "\r\n", "\r\n"), ("\r\n", "\n", "\r\n"),
                                               ("\r", "\r\n", "\r\n"), ("\r\n", "\r\r\n", "\r\n")])
def test_a_line_ended_by_a_bare_lf_or_cr_is_refused(server, line, header, blank):
    """llhttp refuses them: a front proxy that took them for line ends would frame differently."""
    sock = connect(server)
    sock.sendall(f"POST /echo HTTP/1.1{line}Host: x{header}Content-Length: 3\r\n{blank}abc".encode())
    assert _answer_then_closed(sock).startswith(b"HTTP/1.1 400 ")


def test_a_header_block_past_the_size_limit_is_431(server):
    """The fixture's limit is 4 KB (the gateway's is 64 KB): answered, then closed."""
    sock = connect(server)
    sock.sendall(b"GET /echo HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 5000)
    assert _answer_then_closed(sock).startswith(b"HTTP/1.1 431 ")


def test_more_than_100_header_lines_is_431(server):
    sock, buf = connect(server), bytearray()
    ok = b"GET /echo HTTP/1.1\r\nHost: x\r\n" + b"X: 1\r\n" * 99 + b"\r\n"
    sock.sendall(ok)
    assert read_response(sock, buf)[2] == b"hello"
    sock.sendall(b"GET /echo HTTP/1.1\r\nHost: x\r\n" + b"X: 1\r\n" * 100 + b"\r\n")
    assert _answer_then_closed(sock).startswith(b"HTTP/1.1 431 ")


def test_many_short_header_lines_are_refused_before_the_block_ends(server):
    sock = connect(server)
    sock.sendall(b"GET /echo HTTP/1.1\r\n" + b"X:\r\n" * 200)  # no blank line yet
    assert _answer_then_closed(sock).startswith(b"HTTP/1.1 431 ")


def test_headers_and_body_a_byte_at_a_time(server):
    sock, buf = connect(server), bytearray()
    body = b"0123456789" * 30
    raw = b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 300\r\n\r\n" + body
    for i in range(len(raw)):
        sock.send(raw[i:i + 1])
    assert read_response(sock, buf)[2] == digest(body)


def test_chunked_request_body_is_reassembled(server):
    sock, buf = connect(server), bytearray()
    body = bytes(range(256)) * 700  # 179,200 bytes: pieces above the 64 KB hand-over size
    chunks = [body[i:i + 50_000] for i in range(0, len(body), 50_000)]
    raw = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"
    sock.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + raw)
    assert read_response(sock, buf)[2] == digest(body)
    sock.sendall(b"GET /echo HTTP/1.1\r\nHost: x\r\n\r\n")  # and the connection is still good
    assert read_response(sock, buf)[2] == b"hello"


@pytest.mark.parametrize("raw", [
    b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nab\r\n0\r\n\r\n",
    b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabXX0\r\n\r\n",
    b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n",
    b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5, 6\r\n\r\nabcde",
    b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2000000\r\n\r\n",  # over max_body_size
    b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n",
    b"GET /echo HTTP/1.1\r\n\r\n",  # no Host
    b"GET /echo\r\nHost: x\r\n\r\n",
    b"GET /echo HTTP/1.1\r\nno colon here\r\n\r\n",
    b"\r\n\r\n",
])
def test_malformed_framing_gets_a_bare_400_and_the_connection_closes(server, raw):
    sock = connect(server)
    sock.sendall(raw)
    sock.settimeout(5)
    assert sock.recv(65536).startswith(b"HTTP/1.1 400 Bad Request\r\n")
    assert closed(sock)


def test_a_header_block_over_the_limit_is_dropped(server):
    sock = connect(server)
    sock.sendall(b"GET /echo HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 5000)
    assert closed(sock)


def test_expect_100_continue(server):
    sock, buf = connect(server), bytearray()
    sock.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n")
    sock.settimeout(5)
    assert sock.recv(65536) == b"HTTP/1.1 100 (Continue)\r\n\r\n"
    sock.sendall(b"abc")
    assert read_response(sock, buf)[2] == digest(b"abc")


def test_http10_closes_unless_keep_alive_is_asked(server):
    sock, buf = connect(server), bytearray()
    sock.sendall(b"GET /echo HTTP/1.0\r\n\r\n")
    assert read_response(sock, buf)[2] == b"hello"
    assert closed(sock)
    sock, buf = connect(server), bytearray()
    sock.sendall(b"GET /echo HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
    status, headers, body = read_response(sock, buf)
    assert headers["connection"] == "Keep-Alive" and body == b"hello"
    sock.sendall(b"GET /echo HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
    assert read_response(sock, buf)[2] == b"hello"


def test_connection_close_is_honoured(server):
    sock, buf = connect(server), bytearray()
    sock.sendall(b"GET /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    status, headers, body = read_response(sock, buf)
    assert headers["connection"] == "close" and body == b"hello"
    assert closed(sock)


def test_an_answer_before_the_body_is_read_closes_the_connection(server):
    sock, buf = connect(server), bytearray()
    sock.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nX-Refuse: 1\r\nContent-Length: 100000\r\n\r\nabc")
    status, headers, body = read_response(sock, buf)
    assert status == b"HTTP/1.1 413 Request Entity Too Large" and headers["connection"] == "close"
    assert closed(sock)


def test_a_client_that_stops_reading_holds_the_writer_back(server):
    sock = connect(server)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    sock.sendall(b"GET /firehose HTTP/1.1\r\nHost: x\r\n\r\n")
    time.sleep(1.0)
    sent = [n for what, n in EVENTS if what == "sent"]
    assert sent and sent[-1] < 64 << 20  # held by the full socket, not buffered without end
    sock.close()
    deadline = time.monotonic() + 5
    while not any(what == "closed" for what, _ in EVENTS) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ("on_connection_close", None) in EVENTS
    assert any(what == "closed" for what, _ in EVENTS)  # its next flush raised StreamClosedError


def test_pipelined_requests_wait_while_the_client_does_not_read_its_answers(server):
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    sock.connect(("127.0.0.1", server.port))
    n = 300  # 19.7 MB of answers: far past what the socket buffers hold
    sock.sendall(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n" * n)
    time.sleep(1.0)
    served = sum(1 for what, _ in EVENTS if what == "big")
    assert 0 < served < n  # the server stopped taking requests instead of buffering answers
    buf = bytearray()
    bodies = [read_response(sock, buf)[2] for _ in range(n)]
    assert all(b == b"y" * 65536 for b in bodies)
    assert sum(1 for what, _ in EVENTS if what == "big") == n


def test_tiny_chunks_are_joined_before_the_handler_sees_them(server):
    sock, buf = connect(server), bytearray()
    body = bytes(range(256)) * 80  # 20,480 one-byte chunks
    raw = b"".join(b"1\r\n%s\r\n" % body[i:i + 1] for i in range(len(body))) + b"0\r\n\r\n"
    sock.sendall(b"POST /pieces HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + raw)
    calls, _, got = read_response(sock, buf)[2].partition(b" ")
    assert got == digest(body)
    assert int(calls) < 200  # one per read of the socket at most, not one per chunk


def test_a_failing_async_data_received_ends_the_request(server):
    sock = connect(server)
    sock.sendall(b"POST /failing HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc")
    assert closed(sock)
    deadline = time.monotonic() + 3
    while ("failing closed", None) not in EVENTS and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ("failing closed", None) in EVENTS and ("failing post ran", None) not in EVENTS


def test_the_sweep_drops_a_client_that_stopped_reading_its_answer(server):
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    sock.connect(("127.0.0.1", server.port))
    sock.sendall(b"GET /firehose HTTP/1.1\r\nHost: x\r\n\r\n")
    time.sleep(0.6)  # the transport fills and pauses

    async def sweep():
        server.idle_timeout_s = 0.3
        return server.close_idle()
    assert server.thread.run(sweep()) == 1
    deadline = time.monotonic() + 5
    while not any(what == "closed" for what, _ in EVENTS) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ("on_connection_close", None) in EVENTS
    assert any(what == "closed" for what, _ in EVENTS)  # its pending flush raised StreamClosedError
    assert server.thread.run(_count(server)) == 0


async def _count(server) -> int:
    return len(server.connections)


def test_a_client_that_leaves_mid_request_is_heard(server):
    sock = connect(server)
    sock.sendall(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
    time.sleep(0.3)
    sock.close()
    deadline = time.monotonic() + 3
    while ("slow closed", None) not in EVENTS and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ("slow closed", None) in EVENTS


def test_accepted_connections_have_nodelay_and_close_all_closes_them(server):
    socks = [connect(server) for _ in range(3)]
    for s in socks:
        s.sendall(b"GET /echo HTTP/1.1\r\nHost: x\r\n\r\n")
        assert read_response(s, bytearray())[2] == b"hello"

    async def check():
        conns = list(server.connections)
        flags = [c.transport.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
                 for c in conns]
        await server.close_all_connections()
        return flags, len(server.connections)
    flags, left = server.thread.run(check())
    assert len(flags) == 3 and all(flags) and left == 0
    assert all(closed(s) for s in socks)


# ---- the header parser against Tornado's

# one character of each class that matters: token, separator, space, tab, controls, DEL, obs-text
_LINE_CHARS = "a-: \t\x00\x7f\xe9\r;"
_NAMES = st.text("a-! \t:\x7f\xe9;", max_size=4)
_VALUES = st.text("a; \t:\x00\x0b\x7f\xe9\r", max_size=5)
_VALID = st.builds(lambda n, v: f"{n}: {v}", st.sampled_from(["Host", "x-a", "X-A", "Content-Length"]),
                   st.text("az09 ,=/", max_size=6))
_ODD = st.one_of(st.builds(lambda n, v: f"{n}:{v}", _NAMES, _VALUES),  # shaped like a header
                 st.text(_LINE_CHARS, max_size=12))  # anything
_EOL = st.sampled_from(["\r\n", "\n"])


@settings(max_examples=1500, deadline=None)
@given(st.lists(st.tuples(_VALID, _EOL), max_size=2), st.tuples(_ODD, _EOL),
       st.lists(st.tuples(_VALID, _EOL), max_size=2), _EOL)
def test_parse_headers_accepts_refuses_and_returns_what_tornado_does(before, odd, after, blank):
    """One arbitrary line among valid ones: it alone decides whether the block is refused."""
    lines = [(text, end) for text, end in [*before, odd, *after] if text not in ("", "\r")]  # a blank line ends the block
    block = "".join(text + end for text, end in lines) + blank
    try:
        expected = list(HTTPHeaders.parse(block).get_all())
    except HTTPInputError:
        expected = None
    try:
        got = list(parse_headers(block).get_all())
    except HTTPInputError:
        got = None
    assert got == expected


def _outcome(parse, block):
    try:
        return list(parse(block).get_all())
    except HTTPInputError:
        return "refused"


@pytest.mark.timeout(20)
@pytest.mark.parametrize("block", [
    "Host: x\r\n" + "X:  \r\n" * 40 + "bad\r\n\r\n",  # 3^40 ways to split the spaces, had they been free
    "X:" + " " * 200_000 + "\x01\r\n\r\n",
    "X: a" + " a" * 100_000 + " \x01\r\n\r\n",
    "X: a\r\n" * 50_000 + "X : b\r\n\r\n",
])
def test_parse_headers_refuses_hostile_blocks_in_linear_time(block):
    with pytest.raises(HTTPInputError):
        parse_headers(block)


@pytest.mark.parametrize("block", [
    "Host: x\r\n\r\n", "Host: x\r\nX-A: 1\r\nx-a:  2 \r\n\r\n", "\r\n", "\n", "Host:\r\n\r\n",
    "X: a\tb\r\n\n", "X: a\n\r\n", "X: caf\xe9\r\n\r\n", "X:\t a \t\r\n\r\n", "X: a,b;c=d\r\n\r\n",
    # refused by Tornado, so by us
    "X : a\r\n\r\n", ": a\r\n\r\n", "X\r\n\r\n", " X: a\r\n\r\n", "\tX: a\r\n\r\n",
    "X: a\x7fb\r\n\r\n", "X: a\x00b\r\n\r\n", "X: a\x0b\r\n\r\n", "X: \x0ba\r\n\r\n", "X: a\rb\r\n\r\n", "X: \x01a\r\n\r\n", "X: a\x01\r\n\r\n",
    "X: a\r\r\n\r\n", "X\xe9: a\r\n\r\n", "X\x7f: a\r\n\r\n", "X(: a\r\n\r\n", "Host: x\r\nbad\r\n\r\n",
])
def test_parse_headers_on_known_blocks(block):
    assert _outcome(parse_headers, block) == _outcome(HTTPHeaders.parse, block)


def test_a_body_that_is_all_in_reaches_the_method_in_the_turn_of_prepare(server):
    body = b"x" * 5000
    sock = connect(server)
    sock.sendall(b"POST /prompt HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    status, _, answer = read_response(sock, bytearray())
    assert status == b"HTTP/1.1 200 OK"
    assert answer == b"same turn: 1 " + digest(body)


@pytest.mark.parametrize("expect", [False, True])
def test_a_body_asked_for_in_prepare_may_be_held_back_by_the_handler(server, expect):
    # the body is framed once: Tornado's later prepared callback must not frame it again
    # while an async data_received holds it back (nor send a second 100 Continue)
    body = b"y" * 300_000
    sock = connect(server)
    head = b"POST /prompt-sluggish HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n" % len(body)
    sock.sendall(head + (b"Expect: 100-continue\r\n\r\n" if expect else b"\r\n"))
    buf = bytearray()
    if expect:
        status, _, _ = read_response(sock, buf)
        assert status == b"HTTP/1.1 100 (Continue)"
    sock.sendall(body + b"GET /echo HTTP/1.1\r\nHost: x\r\n\r\n")  # a pipelined next request
    status, _, answer = read_response(sock, buf)
    assert status == b"HTTP/1.1 200 OK" and answer.endswith(b" " + digest(body))
    assert read_response(sock, buf)[2] == b"hello"


@pytest.mark.parametrize("chunked", [False, True])
def test_a_body_still_coming_after_prepare_arrives_whole(server, chunked):
    body = bytes(range(256)) * 40
    sock = connect(server)
    if chunked:
        head = b"POST /prompt HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        pieces = [b"%x\r\n%s\r\n" % (len(body[i:i + 1000]), body[i:i + 1000]) for i in range(0, len(body), 1000)]
        pieces.append(b"0\r\n\r\n")
    else:
        head = b"POST /prompt HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body)
        pieces = [body[i:i + 1000] for i in range(0, len(body), 1000)]
    sock.sendall(head)
    for piece in pieces:
        time.sleep(0.01)  # the handler is prepared before the body is in
        sock.sendall(piece)
    status, _, answer = read_response(sock, bytearray())
    assert status == b"HTTP/1.1 200 OK"
    assert answer.startswith(b"later turn: ") and answer.endswith(digest(body))
    sock.sendall(b"GET /echo HTTP/1.1\r\nHost: x\r\n\r\n")  # the connection carries on
    assert read_response(sock, bytearray())[2] == b"hello"
