"""Nothing on the hot path blocks the gateway's event loop.

Two checks while a node serves every kind of request (JSON, streams, errors, the svc and
model routes, health and metrics): no call that blocks a thread (file open, DNS lookup,
subprocess) is made on the loop's thread, seen through Python's audit hooks; and
asyncio's debug mode reports no callback that held the loop for long (its slow-callback log).
"""
from __future__ import annotations

import asyncio
import gc
import logging
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import jdatetime
import openai
import pytest

from tests.admin_kit import Admin, make_token
from tests.console_kit import signed_in
from tests.gateway import seed
from upgate.catalog import rules as catalog
from upgate.services import key_rules, transactions
from upgate.store import connection as store, keyspace

pytestmark = pytest.mark.timeout(300)

HELLO = [{"role": "user", "content": "Hello there, gateway!"}]
# audit events of calls that block the calling thread
BLOCKING = ("open", "socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyaddr",
            "subprocess.Popen", "os.system", "os.fork", "os.exec")
SLOW_CALLBACK_S = 0.25  # far above any callback of the gateway's (a GC pause included)


class _Watch:
    """One process-wide audit hook (hooks cannot be removed): records blocking calls made on
    `thread` while `on` is set."""

    thread: int | None = None
    on = False
    seen: list = []
    installed = False

    @classmethod
    def hook(cls, event, args) -> None:
        if cls.on and event in BLOCKING and threading.get_ident() == cls.thread:
            cls.seen.append((event, repr(args)[:120]))


def traffic(node, key) -> None:
    c = openai.OpenAI(base_url=node.base, api_key=key, max_retries=0)
    for _ in range(20):
        assert c.chat.completions.create(model="mock/chat-1", messages=HELLO).choices
    for _ in range(5):
        assert "".join(ch.choices[0].delta.content or "" for ch in
                       c.chat.completions.create(model="mock/chat-1", messages=HELLO, stream=True)
                       if ch.choices)
    assert c.embeddings.create(model="mock/embed-1", input="x").data
    assert c.models.list().data
    h = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=node.url, timeout=30) as x:
        assert x.get("/v1/svc/me", headers=h).status_code == 200
        assert x.get("/v1/svc/usage", headers=h).status_code == 200
        assert x.post("/v1/chat/completions", content=b"{oops", headers=h).status_code == 400
        assert x.post("/v1/chat/completions", json={}, headers={"Authorization": "Bearer sk-up-nope"}).status_code == 401
        assert x.get("/v1/nothing").status_code == 404
        assert x.get("/healthz").status_code == 200
        assert x.get("/metrics").status_code == 200


def burst(node, key, n: int = 24) -> None:
    """Concurrent reads of the store: its connection pool grows while the watch is on."""
    h = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=node.url, timeout=30, limits=httpx.Limits(max_connections=n)) as x:
        with ThreadPoolExecutor(n) as pool:
            for _ in range(3):
                codes = list(pool.map(lambda _: x.get("/v1/svc/me", headers=h).status_code, range(n)))
                assert codes == [200] * n


def _watch_on(node) -> None:
    if not _Watch.installed:
        sys.addaudithook(_Watch.hook)
        _Watch.installed = True
    _Watch.thread = node.thread.run(_ident())
    _Watch.seen, _Watch.on = [], True


async def _ident() -> int:
    return threading.get_ident()


def test_no_call_on_the_event_loop_thread_blocks_it(node, redis_url):
    key, _, _ = seed(redis_url, balance="1000000")
    traffic(node, key)  # warm: first-use imports and caches are not the hot path
    _watch_on(node)
    try:
        traffic(node, key)
        burst(node, key)
    finally:
        _Watch.on = False
    assert _Watch.seen == []


@pytest.mark.serial  # it measures time: nothing else may run meanwhile (tests/parallel.py)
def test_no_callback_holds_the_event_loop_long(node, redis_url, caplog):
    """asyncio's debug mode logs every callback that ran longer than slow_callback_duration."""
    key, _, _ = seed(redis_url, balance="1000000")
    traffic(node, key)

    async def debug(on: bool) -> None:
        loop = asyncio.get_running_loop()
        loop.slow_callback_duration = SLOW_CALLBACK_S
        loop.set_debug(on)
    caplog.set_level(logging.WARNING, logger="asyncio")
    node.thread.run(debug(True))
    try:
        traffic(node, key)
    finally:
        node.thread.run(debug(False))
    slow = [r.getMessage() for r in caplog.records if r.name == "asyncio" and "took" in r.getMessage()]
    assert slow == []


def test_the_watch_sees_a_blocking_call(node):
    """The audit check is not vacuous: a file opened on the loop's thread is caught."""
    async def block():
        with open(__file__, "rb"):
            pass
    _watch_on(node)
    try:
        node.thread.run(block())
    finally:
        _Watch.on = False
    assert [e for e, _ in _Watch.seen] == ["open"]


# ---- no request, valid or hostile, holds the loop (issue 27) ------------------------------------
# Measured on the node's own loop: a probe task sleeping 2 ms records how late it wakes. Every
# other request on the node (a /healthz, a stream's next event) waits at least that long.

LAG_LIMIT_S = 0.05


class LoopLag:
    """`with LoopLag(node) as lag:` … `lag.worst`: the most CPU time the node's loop thread
    spent between two ticks of a probe task (seconds), i.e. the longest run of work that
    every other request on the node waited for. CPU time, not wall time: on this shared 2-core
    machine (load 9 while the suite runs) the OS alone parks a thread for hundreds of ms, which
    no code change can remove; the wall-clock gap is printed beside it.

    The objects alive when it starts are frozen out of the garbage collector (gc.freeze): this
    process holds pytest, the mock provider and every node of the test, so a collection here
    walks several times what it walks in one node's own process."""

    TICK_S = 0.002

    def __init__(self, node):
        self.node, self.stop, self.worst, self.wall = node, False, 0.0, 0.0

    async def _probe(self) -> None:
        loop = asyncio.get_running_loop()
        while not self.stop:
            t, cpu = loop.time(), time.thread_time()
            await asyncio.sleep(self.TICK_S)
            self.worst = max(self.worst, time.thread_time() - cpu)
            self.wall = max(self.wall, loop.time() - t - self.TICK_S)

    def __enter__(self):
        gc.freeze()
        self._done = asyncio.run_coroutine_threadsafe(self._probe(), self.node.thread.loop)
        return self

    def __exit__(self, *exc) -> None:
        self.stop = True
        self._done.result(10)
        gc.unfreeze()
        print(f"loop of node {self.node.port}: largest run {self.worst * 1000:.1f} ms of CPU "
              f"(wall-clock gap {self.wall * 1000:.0f} ms)")


def assert_loop_free(*lags: LoopLag) -> None:
    for lag in lags:
        assert lag.worst < LAG_LIMIT_S, f"node {lag.node.port}'s loop stalled {lag.worst * 1000:.0f} ms"


def _error(resp, status: int, param: str | None) -> None:
    """The error shape; `param` is named on /admin/v1 (the client API leaves it null)."""
    assert resp.status_code == status, resp.text
    err = resp.json()["error"]
    assert (err["code"], err["param"]) == ("invalid_request", param), err


CENTURIES = [("0001-01-01", "1500-01-01"), ("0001-01-01", "3000-01-01"), ("1300-01-01", "1405-01-01")]


def test_a_usage_range_of_centuries_is_refused_before_any_work(node, redis_url):
    """Any client key, outside the rpm counter: 0001..1500 held the whole node 10 s."""
    key, _, _ = seed(redis_url)
    h = {"Authorization": f"Bearer {key}"}
    with LoopLag(node) as lag:
        for start, end in CENTURIES:
            _error(httpx.get(node.base + "/svc/usage", params={"from": start, "to": end}, headers=h,
                             timeout=60), 400, None)
        ok = httpx.get(node.base + "/svc/usage", params={"from": "1404-01-01", "to": "1404-12-29"}, headers=h)
    assert ok.status_code == 200 and ok.json()["to"] == "1404-12-29", ok.text  # 365 days: allowed
    assert_loop_free(lag)


def test_an_overview_of_centuries_is_refused_before_any_work(node, redis_url):
    """A read-only token: 29 s of frozen node before; the account usage report shares the rule."""
    api = Admin(node, make_token(redis_url, read_only=True))
    _, acct, _ = seed(redis_url)
    with LoopLag(node) as lag:
        for start, end in CENTURIES:
            _error(api.get("/overview", params={"from": start, "to": end}), 400, "to")
            _error(api.get(f"/accounts/{acct}/usage", params={"from": start, "to": end}), 400, "to")
    assert_loop_free(lag)


def _catalog(n: int) -> bytes:
    return "".join(f'[[models]]\nid = "mock/m{i}"\nprovider = "mock"\nupstream_model = "m{i}"\n'
                   f'prompt_toman_per_million = "1"\ncompletion_toman_per_million = "2"\n\n'
                   for i in range(n)).encode()


def test_a_catalog_swap_at_the_size_limit_holds_no_node_loop(make_node, redis_url):
    """PUT of the largest catalog allowed: parsed on the admin pool, and every node (the other
    one too, which gets the swap by pub/sub) builds its new snapshot off the loop. 40,000
    models stalled the other node 2.6 s."""
    a, b = make_node(), make_node()
    api = Admin(a, make_token(redis_url))
    body = _catalog(catalog.MAX_MODELS)
    with LoopLag(a) as lag_a, LoopLag(b) as lag_b:
        resp = api.put("/models", content=body, headers={"Content-Type": "application/toml"})
        assert resp.status_code == 200, resp.text
        deadline = time.monotonic() + 60
        while {a.ctx.catalog.version, b.ctx.catalog.version} != {resp.json()["version"]}:
            assert time.monotonic() < deadline, "the swap never reached both nodes"
            time.sleep(0.05)
    assert len(b.ctx.catalog.visible()) == catalog.MAX_MODELS
    assert_loop_free(lag_a, lag_b)


def test_a_catalog_over_the_size_limit_is_refused_whole(node, redis_url):
    api = Admin(node, make_token(redis_url))
    before = node.ctx.catalog.version
    with LoopLag(node) as lag:
        resp = api.put("/models", content=_catalog(catalog.MAX_MODELS + 1),
                       headers={"Content-Type": "application/toml"})
    _error(resp, 400, None)
    assert f"at most {catalog.MAX_MODELS:,}" in resp.json()["error"]["message"]
    assert node.ctx.catalog.version == before
    assert_loop_free(lag)


def test_a_long_allowed_models_list_is_refused_without_holding_the_loop(node, redis_url):
    """50,000 distinct ids: de-duplicating them with a list's `in` took seconds on the loop."""
    api = Admin(node, make_token(redis_url))
    _, acct, key_id = seed(redis_url)
    ids = [f"mock/m{i}" for i in range(50_000)]
    with LoopLag(node) as lag:
        _error(api.post(f"/accounts/{acct}/keys", json={"allowed_models": ids}), 400, "allowed_models")
        _error(api.patch(f"/keys/{key_id}", json={"allowed_models": ids}), 400, "allowed_models")
        most = api.patch(f"/keys/{key_id}", json={"allowed_models": ids[:key_rules.MAX_ALLOWED_MODELS]})
    assert most.status_code == 200 and len(most.json()["allowed_models"]) == key_rules.MAX_ALLOWED_MODELS
    assert_loop_free(lag)


@pytest.mark.serial  # it measures time: nothing else may run meanwhile (tests/parallel.py)
def test_heavy_reads_do_not_hold_up_a_topup(node, redis_url):
    """A read-only token's distinct /overview ranges filled the 4-worker admin pool: a top-up
    queued behind them for seconds. Reads now have their own pool, and overviews go one at a
    time, so the top-up waits for neither; the loop stays free throughout."""
    client = store.connect_sync(redis_url)
    client.sadd(keyspace.ACCOUNTS, *(f"00000000-0000-4000-8000-{i:012d}" for i in range(100)))
    reader = Admin(node, make_token(redis_url, "reader", read_only=True))
    writer = Admin(node, make_token(redis_url, "writer"))
    acct = writer.account("09350000000")["id"]
    started = time.monotonic()
    assert reader.get("/overview", params={"from": "1404-01-01", "to": "1404-12-29"}).status_code == 200
    one_overview = time.monotonic() - started
    firsts = [jdatetime.date(1403, m, 1) for m in range(1, 7)]  # 6 distinct ranges of 365 days
    ranges = [(str(f), str(f + jdatetime.timedelta(days=364))) for f in firsts]
    with LoopLag(node) as lag, ThreadPoolExecutor(len(ranges)) as pool:
        h = {"Authorization": f"Bearer {reader.token}"}
        reads = [pool.submit(httpx.get, reader.base + "/overview", params={"from": f, "to": t}, headers=h,
                             timeout=300) for f, t in ranges]
        time.sleep(0.5)  # the reads have taken their workers
        assert sum(r.done() for r in reads) < 4  # more waiting than the old pool had workers
        started = time.monotonic()
        topup = writer.post(f"/accounts/{acct}/topups", json={"amount_toman": "100", "ref": "pay-1"})
        took = time.monotonic() - started
        finished_first = sum(r.done() for r in reads)
        codes = [r.result().status_code for r in reads]
    print(f"one overview {one_overview * 1000:.0f} ms; a top-up behind 6 of them {took * 1000:.0f} ms, "
          f"{finished_first} of them finished first")
    assert topup.status_code == 201, topup.text
    assert codes == [200] * len(ranges)
    # counted, not timed (a loaded machine stretches both): before, the top-up's turn on the
    # shared pool came after 3 of the overviews ahead of it had finished
    assert finished_first <= 1, f"the top-up waited for {finished_first} overviews"
    assert took < one_overview, f"the top-up waited {took:.2f} s behind reads"
    assert_loop_free(lag)


def test_console_pages_and_the_catalog_at_their_largest_hold_no_loop(node, redis_url):
    """The largest catalog and a month of 3,000 top-ups: the console's models and account
    pages rendered on the loop (~0.2 s each), GET /admin/v1/models encoded 5 MB there, and
    the overview page walked the catalog and the journal's files there."""
    api = Admin(node, make_token(redis_url))
    put = api.put("/models", content=_catalog(catalog.MAX_MODELS), headers={"Content-Type": "application/toml"})
    assert put.status_code == 200, put.text
    _, acct, _ = seed(redis_url)
    client = store.connect_sync(redis_url)
    for i in range(3000):
        transactions.topup(client, acct, "1", ref=f"pay-{i}")
    deadline = time.monotonic() + 60
    while node.ctx.catalog.version != put.json()["version"]:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    console = signed_in(node, make_token(redis_url, "console"))
    for path in ("/admin/models", "/admin/", f"/admin/accounts/{acct}"):
        with LoopLag(node) as lag:
            page = console.get(path, follow_redirects=True)  # an account page answers at its ?op= address
        assert page.status_code == 200, path
        assert b"mock/m9999" in page.content or path != "/admin/models"
        assert_loop_free(lag)
    with LoopLag(node) as lag:
        models = api.get("/models")
    assert len(models.json()["data"]) == catalog.MAX_MODELS
    assert_loop_free(lag)
