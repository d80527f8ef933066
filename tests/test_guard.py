"""Nothing unauthenticated holds memory or the loop (issue 27): against `upgate serve` in its own
process, over raw sockets, with the process's RSS read from /proc and the loop's largest gap
measured as the slowest answer of a /healthz poller running meanwhile.

Before upgate/handlers/guard.py, the console (sign-in, every POST, even /admin/static/) read a
body of any size before any check (1 GB: RSS to 2 GB), /admin/v1 read and shape-checked a whole
20 MB body before its token (20 such: 1-2 s stalls), and a 62 KB Cookie header cost a console
page 50 ms of loop.
"""
from __future__ import annotations

import select
import socket
import threading
import time

import httpx
import pytest

from tests.admin_kit import make_token
from tests.gateway import load_catalog
from tests.load_kit import Gateway

pytestmark = pytest.mark.timeout(240)

GIGABYTE = 1_000_000_000
SENT_AT_MOST = 24 << 20  # what the attacker pushes of its 1 GB before expecting the answer
GAP_LIMIT_S = 0.3  # the slowest /healthz allowed under attack (a few ms unloaded; margin for CI)


@pytest.fixture
def gateway(redis_url, mock_provider, tmp_path):
    load_catalog(redis_url)
    gw = Gateway(redis_url, mock_provider.base_url, tmp_path)
    gw.wait_ready()
    yield gw
    gw.stop()


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


class Poller:
    """GET /healthz in a loop on one kept-alive connection: the slowest answer is the longest
    the node's loop was held meanwhile."""

    def __init__(self, url: str):
        self.url, self.worst, self.count = url, 0.0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(timeout=60) as c:
            while not self._stop.is_set():
                t = time.monotonic()
                assert c.get(self.url + "/healthz").status_code == 200
                self.worst = max(self.worst, time.monotonic() - t)
                self.count += 1
                time.sleep(0.005)

    def __enter__(self) -> "Poller":
        self._thread.start()
        deadline = time.monotonic() + 30
        while self.count < 3 and time.monotonic() < deadline:  # running before the attack starts
            time.sleep(0.01)
        self.worst = 0.0  # (the first answers include the connection's set-up)
        return self

    def __exit__(self, *exc) -> None:
        time.sleep(0.05)  # an answer after the attack, too
        self._stop.set()
        self._thread.join(60)
        assert self.count > 3, "the poller never ran"
        print(f"slowest /healthz of {self.count}: {self.worst * 1000:.1f} ms")


def readable(sock: socket.socket) -> bool:
    """The server answered or closed. poll, not select(): in a full test run this process holds
    more than 1024 descriptors, past which select() refuses."""
    p = select.poll()
    p.register(sock, select.POLLIN | select.POLLERR | select.POLLHUP)
    return bool(p.poll(0))


def attack(port: int, head: str, body_piece: bytes, total: int = SENT_AT_MOST, chunked: bool = False) -> bytes:
    """Send `head` then pieces of a body until `total` bytes, the server's answer or its close;
    return what the server answered (b"" when it said nothing within 10 s of the last byte)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        sock.sendall(head.encode())
        sent, answer = 0, b""
        while sent < total:
            if readable(sock):
                break  # the server answered (or closed): stop sending
            piece = b"%x\r\n%b\r\n" % (len(body_piece), body_piece) if chunked else body_piece
            try:
                sock.sendall(piece)
            except OSError:
                break  # refused and closed while sending: what should happen
            sent += len(body_piece)
        try:
            while chunk := sock.recv(65536):
                answer += chunk
        except (socket.timeout, ConnectionResetError):
            pass
        return answer
    finally:
        sock.close()


def status_of(answer: bytes) -> int | None:
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else None


ROUTES = [  # (method and path, the answer before any of the body is read)
    ("POST /admin/login", 413),  # public: 64 KB at most
    ("POST /admin/accounts/a1/topups", 303),  # no session: to the sign-in page
    ("POST /admin/static/console.css", 413),
    ("POST /admin/v1/accounts", 401),
    ("PUT /admin/v1/models", 401),
    ("POST /admin/v1/no-such-route", 404),
    ("POST /dashboard/keys", 303),  # the dashboard: no session, to its sign-in page
    ("POST /dashboard/login", 413),  # public: 16 KB at most
    ("POST /dashboard/static/dashboard.css", 413),
    ("POST /dashboard/no-such-page", 404),
]


@pytest.mark.serial  # it measures time: nothing else may run meanwhile (tests/parallel.py)
def test_a_gigabyte_to_any_admin_address_is_refused_unread(gateway):
    """Content-Length: 1e9 and bytes as fast as loopback takes them: the answer comes at once,
    the connection closes, the node's memory does not grow, and the loop stays free."""
    before = rss_mb(gateway.proc.pid)
    with Poller(gateway.url) as poller:
        for line, expected in ROUTES:
            head = f"{line} HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n" \
                   f"Content-Length: {GIGABYTE}\r\n\r\n"
            answer = attack(gateway.port, head, b"a" * (1 << 20))
            assert status_of(answer) == expected, (line, answer[:200])
            assert b"connection: close" in answer.lower(), (line, answer[:300])
        # a chunked body says no length: it is counted as it comes, and refused past 64 KB
        head = "POST /admin/login HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        assert status_of(attack(gateway.port, head, b"t" * 65536, chunked=True)) == 413
    grown = rss_mb(gateway.proc.pid) - before
    print(f"RSS grew {grown:.1f} MB")
    assert grown < 16, f"the node kept {grown:.0f} MB of refused bodies"
    assert poller.worst < GAP_LIMIT_S, f"/healthz waited {poller.worst * 1000:.0f} ms"


@pytest.mark.serial  # it measures time: nothing else may run meanwhile (tests/parallel.py)
def test_twenty_bodies_of_20_mb_without_a_token_cost_nothing(gateway):
    """Before: each was read and shape-checked, then refused 401 (1-2 s stalls for 20)."""
    n = (20 << 20) // 3
    body = b"[" + b"[]," * (n - 1) + b"[]]"
    head = (f"POST /admin/v1/accounts HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n")
    answers: list[bytes] = []
    pieces = [body[i:i + (1 << 20)] for i in range(0, len(body), 1 << 20)]

    def one() -> None:
        sock = socket.create_connection(("127.0.0.1", gateway.port), timeout=20)
        try:
            sock.sendall(head.encode())
            for piece in pieces:
                if readable(sock):
                    break
                sock.sendall(piece)
        except OSError:
            pass
        try:
            answers.append(sock.recv(65536))
        except OSError:
            answers.append(b"")
        sock.close()

    before = rss_mb(gateway.proc.pid)
    with Poller(gateway.url) as poller:
        threads = [threading.Thread(target=one) for _ in range(20)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    codes = [status_of(a) for a in answers]  # past 10 failures the address is throttled: 429
    assert len(codes) == 20 and set(codes) <= {401, 429} and codes.count(401) >= 10, codes
    assert rss_mb(gateway.proc.pid) - before < 16
    assert poller.worst < GAP_LIMIT_S, f"/healthz waited {poller.worst * 1000:.0f} ms"


def test_a_token_opens_the_real_limit_after_it_is_checked(gateway, redis_url):
    """A catalog of a few MB still loads with a token; past 20 MB it is 413 unread."""
    token = make_token(redis_url)
    auth = {"Authorization": f"Bearer {token}", "Content-Type": "application/toml"}
    from tests.gateway import CATALOG

    text = CATALOG.read_text() + "#" + "x" * (3 << 20) + "\n"
    r = httpx.put(gateway.url + "/admin/v1/models", content=text.encode(), headers=auth, timeout=60)
    assert r.status_code == 200, r.text
    head = (f"PUT /admin/v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Length: {GIGABYTE}\r\n\r\n")
    assert status_of(attack(gateway.port, head, b"#" * (1 << 20))) == 413


def test_a_cookie_header_past_8_kb_is_431_before_any_page_parses_it(gateway):
    many = "; ".join(f"c{i}=v" for i in range(62 * 1024 // 8))  # ~62 KB of tiny cookies
    for path in ("/admin/", "/admin/login"):
        r = httpx.get(gateway.url + path, headers={"Cookie": many[:62 * 1024]}, timeout=30)
        assert r.status_code == 431, (path, r.status_code)
    ok = httpx.get(gateway.url + "/admin/login", headers={"Cookie": "a=" + "b" * 7000}, timeout=30)
    assert ok.status_code == 200


def test_a_route_without_the_guard_stops_the_app_from_being_made(monkeypatch):
    """By construction: a dashboard page (or any) on a plain RequestHandler would let Tornado
    buffer any body before its prepare(); make_app refuses it."""
    import tornado.web

    from upgate import app, console
    from upgate.handlers.guard import BodyGuard

    made = app.make_app(ctx=None)
    assert all(issubclass(r.target, BodyGuard) for r in made.wildcard_router.rules)

    class DashboardPage(tornado.web.RequestHandler):
        def post(self) -> None:
            self.write("ok")

    routes = console.routes
    monkeypatch.setattr(console, "routes", lambda ctx: [*routes(ctx), (r"/dashboard/", DashboardPage)])
    with pytest.raises(TypeError, match="DashboardPage"):
        app.make_app(ctx=None)
