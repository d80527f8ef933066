"""Faults: the store going away or refusing writes, settlements that cannot reach it (the
journal), a gateway process killed mid-stream (the reaper), and an upstream that cuts, goes
silent, answers garbage or fails. After every one the money invariants hold exactly:
balance = initial − Σ charges, nothing held, no hold or stream slot left open.
"""
from __future__ import annotations

import os
import threading
import time

import httpx
import orjson
import pytest
import redis

from tests import gateway as gw
from tests.gateway import Node, load_catalog, seed
from tests.load_kit import (HELLO, META, Gateway, assert_settled, micro, response_cost, sse_payloads,
                            wait_for, wallet)
from tests.procs import RedisServer
from upgate.billing import money, sizing
from upgate.services import keys, records
from upgate.store import connection as store, keyspace
from upgate.upstream.providers import Provider

INITIAL = micro("1000")


def _providers(mock) -> dict:
    return {"mock": mock.provider(),
            "dead": Provider(name="dead", base_url="http://127.0.0.1:9/v1", api_key="x",
                             dialect="openai", available=True)}


def _mock_requests(mock) -> int:
    return httpx.get(f"http://127.0.0.1:{mock.port}/_mock/stats").json()["requests"]


def _chat(node, key, *, stream=False, mock_opts=None, timeout=30, **body) -> httpx.Response:
    payload = {"model": "mock/chat-1", "messages": HELLO, "max_tokens": 5, "stream": stream, **body}
    if mock_opts:
        payload["mock"] = mock_opts
    headers = {"Authorization": f"Bearer {key}", **META}
    return httpx.post(node.base + "/chat/completions", json=payload, headers=headers, timeout=timeout)


# ---- a private, restartable Redis -------------------------------------------------------------------

@pytest.fixture
def own_redis():
    """A redis-server of this test alone, on a fixed port, with an fsync-always AOF: killed with
    SIGKILL and started again on the same port and directory, it comes back with every write
    it acknowledged (balances, holds, keys, the catalog)."""
    server = RedisServer(extra=["--appendonly", "yes", "--appendfsync", "always"]).start()
    yield server
    server.close()


@pytest.fixture
def own_node(own_redis, mock, tmp_path):
    nodes = []
    load_catalog(own_redis.url)

    def make(**overrides):
        overrides.setdefault("journal_path", str(tmp_path / "settle.journal"))
        node = Node(gw.test_settings(own_redis.url, **overrides), _providers(mock))
        nodes.append(node)
        return node

    yield make
    for n in nodes:
        if n.thread.thread.is_alive():  # a test may have closed it already
            n.close()


def _health(node) -> httpx.Response:
    return httpx.get(node.url + "/healthz", timeout=10)


class _Load:
    """One client thread sending small billable requests back to back until stopped."""

    def __init__(self, node, key):
        self.node, self.key = node, key
        self.results: list[tuple[float, int, str | None, str | None, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        with httpx.Client(timeout=30) as c:
            while not self._stop.is_set():
                body = {"model": "mock/chat-1", "messages": HELLO, "max_tokens": 3}
                try:
                    resp = c.post(self.node.base + "/chat/completions", json=body,
                                  headers={"Authorization": f"Bearer {self.key}", **META})
                except httpx.HTTPError as e:  # never expected: recorded for the assertion
                    self.results.append((time.monotonic(), -1, repr(e), None, 0))
                    continue
                code = None if resp.status_code == 200 else resp.json()["error"]["code"]
                cost = response_cost(resp) if resp.status_code == 200 else 0
                self.results.append((time.monotonic(), resp.status_code, code,
                                     resp.headers.get("Retry-After"), cost))
                time.sleep(0.01)

    def since(self, t0: float) -> list:
        return [r for r in list(self.results) if r[0] >= t0]

    def stop(self):
        self._stop.set()
        self._thread.join(30)


def test_redis_outage_mid_load_503_then_recovers_by_itself(own_redis, own_node, mock):
    node = own_node(lease_s=3.0)
    key, account_id, key_id = seed(own_redis.url, balance="1000")
    r = redis.Redis(port=own_redis.port, decode_responses=True)
    load = _Load(node, key)
    try:
        wait_for(lambda: sum(1 for x in load.results if x[1] == 200) >= 10, 20, "requests to pass")
        own_redis.stop()  # SIGKILL: connections reset, nothing answers on the port
        t_down = time.monotonic()
        wait_for(lambda: sum(1 for x in load.since(t_down) if x[1] == 503) >= 5, 20, "503s")
        time.sleep(1.0)  # requests admitted just before the kill have left for the mock by now
        t_window, seen_by_mock = time.monotonic(), _mock_requests(mock)
        health = _health(node)  # its status code is the liveness policy's (health.py), not this test's
        assert health.json()["status"] == "degraded" and health.json()["redis"] == "unreachable"
        assert httpx.get(node.base + "/models").status_code == 200  # keyless, in-process catalog
        time.sleep(1.5)
        window = load.since(t_window)
        assert len(window) >= 5
        assert {(s, c, ra) for _, s, c, ra, _ in window} == {(503, "service_unavailable", "5")}, window
        assert _mock_requests(mock) == seen_by_mock, "a request went upstream without a hold"
    finally:
        load.stop()

    # The store comes back on the same port: the node notices by itself. Before any request,
    # change the key's allowed models behind the node's back (no event published): only a node
    # whose auth cache was flushed while the store was away can see it.
    own_redis.start()
    r.hset(keyspace.key_record(account_id, key_id), "allowed_models", '["mock/chat-big"]')
    wait_for(lambda: _health(node).json()["redis"] == "ok", 20, "healthz to recover")
    resp = _chat(node, key)
    assert resp.status_code == 403 and resp.json()["error"]["code"] == "model_not_allowed"
    keys.update_key(redis.Redis(port=own_redis.port), key_id, allowed_models=None)  # publishes
    after: list[httpx.Response] = []

    def passes():
        after.append(_chat(node, key))
        return after[-1].status_code == 200
    wait_for(passes, 10, "requests to pass again")

    # No charge lost, none applied twice: what every 200 said it cost is exactly what left the
    # wallet, once journaled settlements are replayed and leftover holds reaped.
    def settled():
        return wallet(r, account_id)[1] == 0 and not os.path.exists(node.settings.journal_path)
    wait_for(settled, 20, "holds to be settled, replayed or reaped")
    assert all(x[1] in (200, 503) for x in load.results), {x[1:3] for x in load.results}
    charged = sum(x[4] for x in load.results if x[1] == 200)
    charged += sum(response_cost(a) for a in after if a.status_code == 200)
    assert charged > 0
    assert_settled(r, account_id, INITIAL, charged, {key_id: charged})


# ---- the settlement journal ---------------------------------------------------------------------

def _in_thread(fn, *args, **kw):
    box: dict = {}

    def run():
        try:
            box["resp"] = fn(*args, **kw)
        except Exception as e:  # noqa: BLE001 - surfaced by the assertion
            box["resp"] = e
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, box


def _journal_lines(path) -> list[dict]:
    with open(path, "rb") as f:
        return [orjson.loads(line) for line in f.read().splitlines() if line]


def _strand_two_settlements(own_redis, node, key, account_id):
    """A JSON and a streamed request are admitted; while the provider thinks, the store dies;
    the provider answers; settlement fails, is retried, and goes to the journal. Returns the
    two responses (both served: 200) once they are in."""
    r = redis.Redis(port=own_redis.port)
    slow = {"latency_ms": 1500}
    t1, b1 = _in_thread(_chat, node, key, mock_opts=slow, messages=[{"role": "user", "content": "PROMPT-SECRET-1"}])
    t2, b2 = _in_thread(_chat, node, key, stream=True, mock_opts=slow,
                        messages=[{"role": "user", "content": "PROMPT-SECRET-2"}])
    wait_for(lambda: r.zcard(keyspace.holds(account_id)) == 2, 10, "both holds to be placed")
    own_redis.stop()
    t1.join(30)
    t2.join(30)
    return b1["resp"], b2["resp"]


def test_settlement_that_cannot_reach_redis_is_journaled_and_replayed_exactly_once(own_redis, own_node):
    node = own_node(lease_s=6.0)
    key, account_id, key_id = seed(own_redis.url, balance="1000")
    journal = node.settings.journal_path
    j, s = _strand_two_settlements(own_redis, node, key, account_id)

    # the client was served and told the price; the charge waits in the journal
    assert j.status_code == 200 and s.status_code == 200, (j, s)
    costs = response_cost(j), response_cost(s)
    assert all(costs) and sse_payloads(s.text)[-1] == "[DONE]"
    assert node.ctx.ledger.journaled == 2
    lines = _journal_lines(journal)
    assert len(lines) == 2
    assert sorted(e["c"] for e in lines) == sorted(costs)
    raw = open(journal, "rb").read()
    for e in lines:  # ids and numbers only: no prompt, no answer, no key material
        # + the request record (upgate/services/records.py: ids, numbers, no content) and its time
        assert set(e) == {"a", "h", "k", "m", "c", "p", "q", "t", "r", "rt"}
        assert e["a"] == account_id and e["k"] == key_id and e["m"] == "mock/chat-1"
        assert all(type(e[f]) is int for f in ("c", "p", "q", "t", "rt"))
        assert e["r"]["cost_micro"] == e["c"] and e["r"]["request_id"].startswith("req_")
    for secret in (b"PROMPT-SECRET", b"tok0", key.encode(), key[6:].encode()):
        assert secret not in raw
    assert oct(os.stat(journal).st_mode & 0o777) == "0o600"

    # the store returns with its state (holds still open): the node replays by itself
    own_redis.start()
    r = redis.Redis(port=own_redis.port, decode_responses=True)
    wait_for(lambda: node.ctx.ledger.replayed == 2, 20, "the journal to be replayed")
    assert not os.path.exists(journal)
    assert_settled(r, account_id, INITIAL, sum(costs), {key_id: sum(costs)})
    kept = records.list_requests(store.connect_sync(f"redis://127.0.0.1:{own_redis.port}/0"), account_id)
    assert sorted(money.parse_toman(x["cost_toman"]) for x in kept) == sorted(costs)

    # a crash between replaying and removing the journal would replay it again: harmless
    with open(journal, "wb") as f:
        f.write(raw)
    wait_for(lambda: not os.path.exists(journal) and node.ctx.ledger.replayed == 4, 20, "the second replay")
    assert_settled(r, account_id, INITIAL, sum(costs), {key_id: sum(costs)})
    assert not os.path.exists(journal + ".failed")


def test_journal_outlives_its_process_and_the_next_node_replays_it(own_redis, own_node, tmp_path):
    """Crash safety: the node that journaled is gone before the store returns; a node started
    later on the same journal path settles what it left, and the reaper does not release those
    holds for free first (the lease lapses during the outage: settle charges a reaped hold)."""
    first = own_node(lease_s=1.5)
    key, account_id, key_id = seed(own_redis.url, balance="1000")
    j, s = _strand_two_settlements(own_redis, first, key, account_id)
    assert j.status_code == 200 and s.status_code == 200
    costs = response_cost(j) + response_cost(s)
    first.close()
    time.sleep(2.0)  # past the 1.5 s lease: the holds are due for the reaper
    own_redis.start()
    r = redis.Redis(port=own_redis.port, decode_responses=True)
    assert wallet(r, account_id)[1] > 0  # still held: nobody settled anything yet
    second = own_node(lease_s=1.5, journal_path=first.settings.journal_path)
    wait_for(lambda: second.ctx.ledger.replayed == 2, 20, "the new node to replay the journal")
    wait_for(lambda: wallet(r, account_id)[1] == 0, 20, "nothing held")
    assert_settled(r, account_id, INITIAL, costs, {key_id: costs})


def test_settlement_that_reaches_neither_store_nor_journal_never_crashes_the_node(own_redis, own_node, caplog):
    """The store dies while two requests are upstream and the journal cannot be written (here:
    its directory does not exist; disk full or permissions look the same). The charge is logged
    as an error for the operator (ids and numbers), the JSON client gets 503 instead of an unbilled
    answer, the stream ends with an error event instead of [DONE], and the node goes on serving once the store is back;
    the reaper releases the two holds."""
    node = own_node(lease_s=1.5, journal_path="/nonexistent-upgate-dir/settle.journal")
    key, account_id, key_id = seed(own_redis.url, balance="1000")
    with caplog.at_level("ERROR", logger="upgate.billing.ledger"):
        j, s = _strand_two_settlements(own_redis, node, key, account_id)
    assert j.status_code == 503, j.text
    assert j.json()["error"]["code"] == "service_unavailable" and j.headers["Retry-After"] == "5"
    assert s.status_code == 200 and "[DONE]" not in s.text and "PROMPT-SECRET" not in s.text
    last = sse_payloads(s.text)[-1]  # the stream ends with an error event, not a bare close
    assert last["error"]["code"] == "service_unavailable" and last["choices"][0]["finish_reason"] == "error"
    lost = [rec.getMessage() for rec in caplog.records if "NOT recorded" in rec.getMessage()]
    assert len(lost) == 2 and all(account_id in m and "micro-toman" in m for m in lost), lost
    assert node.ctx.ledger.journaled == 0
    own_redis.start()
    r = redis.Redis(port=own_redis.port, decode_responses=True)
    wait_for(lambda: wallet(r, account_id)[1] == 0, 20, "the reaper to release both holds")
    ok = _chat(node, key)
    assert ok.status_code == 200, ok.text
    assert_settled(r, account_id, INITIAL, response_cost(ok), {key_id: response_cost(ok)})


def test_redis_refusing_writes_is_a_503_and_settlements_go_to_the_journal(redis_url, make_node, mock, tmp_path):
    """The store answers but refuses writes: a failover demoted it to a read-only replica (a
    failed RDB save, MISCONF, looks the same to the gateway). New billable requests get 503
    service_unavailable and never go upstream; a settlement refused that way is retried and
    journaled, not dropped, and replayed once the store takes writes again."""
    node = make_node(lease_s=6.0, journal_path=str(tmp_path / "settle.journal"))
    key, account_id, key_id = seed(redis_url, balance="1000")
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    from tests.procs import free_port
    t, box = _in_thread(_chat, node, key, mock_opts={"latency_ms": 1000})
    wait_for(lambda: r.zcard(keyspace.holds(account_id)) == 1, 10, "the hold to be placed")
    r.replicaof("127.0.0.1", free_port())  # nobody there: a replica that keeps its data, read-only
    try:
        t.join(30)
        served = box["resp"]
        seen = _mock_requests(mock)
        refused = [_chat(node, key), _chat(node, key, stream=True),
                   _chat(node, key, model="mock/chat-1:free")]
        assert _mock_requests(mock) == seen, "a request went upstream without a hold"
        assert node.ctx.ledger.journaled == 1
        assert os.path.exists(node.settings.journal_path)
    finally:
        r.replicaof("NO", "ONE")
    assert served.status_code == 200, served.text
    for resp in refused:
        assert resp.status_code == 503, resp.text
        assert resp.json()["error"]["code"] == "service_unavailable"
        assert resp.headers["Retry-After"] == "5" and resp.headers["X-Svc-Request-Id"]
    cost = response_cost(served)
    wait_for(lambda: node.ctx.ledger.replayed == 1, 20, "the journal to be replayed")
    assert_settled(r, account_id, INITIAL, cost, {key_id: cost})
    assert not os.path.exists(node.settings.journal_path + ".failed")


def test_redis_out_of_memory_never_loses_a_charge(redis_url, make_node, mock, tmp_path):
    """maxmemory reached with noeviction. Redis refuses every function that may write before it
    runs: new requests get 503 at admit, and the settlement of one admitted before is refused:
    every such settlement is journaled and applied once memory is back."""
    node = make_node(lease_s=6.0, journal_path=str(tmp_path / "settle.journal"))
    key, account_id, key_id = seed(redis_url, balance="1000")
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    t, box = _in_thread(_chat, node, key, mock_opts={"latency_ms": 800})
    wait_for(lambda: r.zcard(keyspace.holds(account_id)) == 1, 10, "the hold to be placed")
    r.config_set("maxmemory-policy", "noeviction")
    r.config_set("maxmemory", "1")
    try:
        t.join(30)
        more = [_chat(node, key), _chat(node, key, stream=True)]
    finally:
        r.config_set("maxmemory", "0")
    responses = [box["resp"], *more]
    for resp in responses:
        assert resp.status_code in (200, 503), resp.text
        if resp.status_code == 503:
            assert resp.json()["error"]["code"] == "service_unavailable"
    served = [resp for resp in responses if resp.status_code == 200]
    assert served and node.ctx.ledger.journaled == len(served)
    cost = sum(response_cost(resp) for resp in served)
    wait_for(lambda: node.ctx.ledger.replayed == len(served), 20, "the journal to be replayed")
    wait_for(lambda: wallet(r, account_id)[1] == 0, 20, "leftover holds to be reaped")
    assert_settled(r, account_id, INITIAL, cost, {key_id: cost})


# ---- the whole Redis Cluster down ---------------------------------------------------------------

@pytest.mark.cluster
def test_whole_cluster_down_settlement_is_journaled_and_replayed_once(redis_cluster, cluster_url, tmp_path):
    """With no cluster node answering, redis-py raises RedisClusterException (not a RedisError):
    the settlement is still retried and journaled, never lost, and replayed once when the
    cluster is back, exactly once."""
    from tests import ledger_kit as kit
    from upgate.store import connection as store
    from upgate.billing.ledger import STORE_ERRORS, store_unavailable

    sync = store.connect_sync(cluster_url)
    kit.seed_account(sync, balance=10 * kit.TOMAN)
    kit.seed_key(sync, rpm=600)
    sync.close()
    sets = kit.settings(tmp_path)

    async def body(L):
        a = await L.admit(account_id=kit.ACCT, key_id=kit.KEY, model="m/a", hold_micro=3 * kit.TOMAN,
                          stream=True, free=False)
        charge = dict(key_id=kit.KEY, model="m/a", cost_micro=2 * kit.TOMAN, prompt_tokens=5,
                      completion_tokens=7)
        redis_cluster.stop()
        try:
            assert await L.settle(kit.ACCT, a.hold_id, **charge) is True
            assert L.journaled == 1
            errors = []
            for _ in range(2):  # the first call meets a closed connection, the next no cluster at all
                try:
                    await L.admit(account_id=kit.ACCT, key_id=kit.KEY, model="m/a", hold_micro=1,
                                  stream=False, free=False)
                except STORE_ERRORS as e:
                    errors.append(e)
            assert len(errors) == 2 and all(store_unavailable(e) for e in errors), errors
            assert await L.replay_journal() == 0  # still down: the line stays in the journal
            assert L.replayed == 0 and len(_journal_lines(sets.journal_path)) == 1
        finally:
            redis_cluster.restart()
        assert await L.replay_journal() == 1
        assert await L.replay_journal() == 0
        assert not os.path.exists(sets.journal_path)
        assert await L.settle(kit.ACCT, a.hold_id, **charge) is False  # already applied

    kit.run(cluster_url, body, sets)
    sync = store.connect_sync(cluster_url)
    w = kit.h(sync, keyspace.wallet(kit.ACCT))
    assert (int(w["balance"]), int(w["held"])) == (8 * kit.TOMAN, 0)
    rec = kit.h(sync, keyspace.key_record(kit.ACCT, kit.KEY))
    assert int(rec["held"]) == 0
    assert sum(int(v) for f, v in rec.items() if f.startswith("spent:")) == 2 * kit.TOMAN
    assert sync.zcard(keyspace.holds(kit.ACCT)) == 0 and sync.zcard(keyspace.streams(kit.ACCT)) == 0
    sync.close()


@pytest.mark.cluster
def test_whole_cluster_down_is_a_503_and_a_node_still_starts(redis_cluster, cluster_url, mock, tmp_path):
    """Every request gets 503 service_unavailable (not a 500) while no cluster node answers, none
    goes upstream; a node started during the outage comes up, keeps its subscriber alive, and
    both nodes serve again once the cluster is back."""
    from upgate.context import Context

    load_catalog(cluster_url)
    key, account_id, key_id = seed(cluster_url, balance="1000")
    node = Node(gw.test_settings(cluster_url, journal_path=str(tmp_path / "a.journal")), _providers(mock))
    late_loop = gw.LoopThread("late-node")
    late = None
    try:
        first = _chat(node, key)
        assert first.status_code == 200
        redis_cluster.stop()
        try:
            seen = _mock_requests(mock)
            for stream in (False, True, False, False):
                resp = _chat(node, key, stream=stream)
                assert resp.status_code == 503, resp.text
                assert resp.json()["error"]["code"] == "service_unavailable"
                assert resp.headers["Retry-After"] == "5"
            assert _mock_requests(mock) == seen, "a request went upstream without a hold"
            assert _health(node).json()["redis"] == "unreachable"

            async def start_late():
                ctx = Context(gw.test_settings(cluster_url, journal_path=str(tmp_path / "b.journal")),
                              _providers(mock), access_log=False)
                await ctx.start()
                return ctx
            late = late_loop.run(start_late())
            time.sleep(1.5)  # a few reconnect attempts of its subscriber
            assert not late.redis_ok
            assert [t.get_name() for t in late._tasks if t.done()] == []
        finally:
            redis_cluster.restart()
        wait_for(lambda: late.subscribed.is_set(), 20, "the late node to subscribe")
        wait_for(lambda: _health(node).json()["redis"] == "ok", 20, "healthz to recover")
        after: list[httpx.Response] = []

        def passes():
            after.append(_chat(node, key))
            return after[-1].status_code == 200
        wait_for(passes, 20, "requests to pass again")
    finally:
        if late is not None:
            late_loop.run(late.stop())
        late_loop.close()
        node.close()
    r = redis.RedisCluster(host="127.0.0.1", port=redis_cluster.nodes[0].port, decode_responses=True)
    charged = response_cost(first) + response_cost(after[-1])
    assert_settled(r, account_id, INITIAL, charged, {key_id: charged})


# ---- a gateway process killed mid-stream -------------------------------------------------------------

@pytest.mark.slow
def test_sigkilled_node_leaves_nothing_held_once_its_leases_lapse(redis_url, make_node, mock, tmp_path):
    """A real `upgate serve` process with 2 s leases dies by SIGKILL with three streams open.
    Another node's reaper releases its holds and stream slots once the leases lapse: nothing is
    held, no slot is taken, and nothing was charged (the documented rule for reaped holds)."""
    survivor = make_node(lease_s=2.0, journal_path=str(tmp_path / "survivor.journal"))
    key, account_id, key_id = seed(redis_url, balance="1000")
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    victim = Gateway(redis_url, mock.base_url, tmp_path, "victim", UPGATE_LEASE_S="2")
    streams = []
    try:
        for _ in range(3):
            c = httpx.Client(timeout=30)
            cm = c.stream("POST", victim.base + "/chat/completions", headers={"Authorization": f"Bearer {key}"},
                          json={"model": "mock/chat-1", "messages": HELLO, "stream": True, "max_tokens": 50,
                                "mock": {"chunks": 50, "gate_after": 2}})
            resp = cm.__enter__()
            assert resp.status_code == 200
            lines = resp.iter_lines()
            assert next(l for l in lines if l.startswith("data: "))  # the stream is flowing
            streams.append((c, cm, lines))  # keep the line iterator: dropping it closes the stream
        balance, held = wallet(r, account_id)
        assert balance == INITIAL and held > 0
        assert r.zcard(keyspace.streams(account_id)) == 3
        time.sleep(2.5)  # leases renewed by the live victim: nothing reaped yet
        assert r.zcard(keyspace.holds(account_id)) == 3
        victim.kill()
        wait_for(lambda: wallet(r, account_id)[1] == 0 and r.zcard(keyspace.streams(account_id)) == 0,
                 15, "the survivor's reaper to release the dead node's holds")
    finally:
        for c, cm, _ in streams:
            try:
                cm.__exit__(None, None, None)
            except httpx.HTTPError:
                pass
            c.close()
        httpx.post(f"http://127.0.0.1:{mock.port}/_mock/release")
        if victim.proc.poll() is None:
            victim.kill()
    assert_settled(r, account_id, INITIAL, 0, {key_id: 0})
    assert r.zcard(keyspace.REAP_INDEX) == 0
    # a late settlement of a reaped hold would still charge it: the records are kept, marked
    reaped = [k for k in r.scan_iter(keyspace.hold(account_id, "*"))]
    assert len(reaped) == 3 and all(r.hget(k, "state") == "reaped" for k in reaped)
    # and the account's slots are really free: the survivor serves a stream at once
    resp = _chat(survivor, key, stream=True)
    assert resp.status_code == 200 and sse_payloads(resp.text)[-1] == "[DONE]"
    charged = response_cost(resp)
    assert_settled(r, account_id, INITIAL, charged, {key_id: charged})


# ---- the upstream misbehaving ---------------------------------------------------------------------------

def _expect_cost(node, body: dict, relayed_chars: int) -> int:
    """What the gateway charges for a stream cut after `relayed_chars` characters of content."""
    model = node.ctx.catalog.resolve("mock/chat-1")
    return sizing.cost_micro(model, sizing.prompt_tokens(body), (relayed_chars + 3) // 4, False)


def _sse_error(resp) -> dict:
    payloads = sse_payloads(resp.text)
    assert payloads and isinstance(payloads[-1], dict), resp.text
    last = payloads[-1]
    assert "[DONE]" not in payloads
    assert last["choices"][0]["finish_reason"] == "error"
    return last["error"]


# (mock switches, stream, expected client outcome, content chunks the client gets and is charged for)
UPSTREAM_FAULTS = {
    "cut-mid-stream": ({"cut_after": 2}, True, ("sse", "upstream_error"), 2),
    # before the first event the client has been sent nothing, headers included: a plain error
    # answer (and, with `models`, the next candidate), as before the provider's headers
    "cut-before-content-stream": ({"cut_after": 0}, True, (502, "upstream_error"), 0),
    "cut-json": ({"cut_after": 1}, False, (502, "upstream_error"), 0),
    "silent-mid-stream": ({"silence_after": 2}, True, ("sse", "upstream_error"), 2),
    "silent-after-headers-json": ({"silence_after": 0}, False, (504, "upstream_timeout"), 0),
    "silent-after-headers-stream": ({"silence_after": 0}, True, (504, "upstream_timeout"), 0),
    "silent-before-headers-json": ({"latency_ms": 5000}, False, (504, "upstream_timeout"), 0),
    "silent-before-headers-stream": ({"latency_ms": 5000}, True, (504, "upstream_timeout"), 0),
    "garbage-json": ({"garbage": True}, False, (502, "upstream_error"), 0),
    "garbage-stream": ({"garbage": "data: {not json\n\n"}, True, (502, "upstream_error"), 0),
    "html-stream": ({"garbage": True}, True, (502, "upstream_error"), 0),
    "error-after-headers-json": ({"error_after_headers": "partial"}, False, (502, "upstream_error"), 0),
    "error-after-headers-stream": ({"error_after_headers": True}, True, (502, "upstream_error"), 0),
    "5xx-json": ({"status": 500}, False, (502, "upstream_error"), 0),
    "5xx-stream": ({"status": 503}, True, (502, "upstream_error"), 0),
}


@pytest.mark.parametrize("case", list(UPSTREAM_FAULTS))
def test_upstream_faults_get_the_spec_error_and_leave_the_books_exact(case, make_node, redis_url, mock, tmp_path):
    opts, stream, (status, code), chunks = UPSTREAM_FAULTS[case]
    node = make_node(upstream_silence_s=1.0, journal_path=str(tmp_path / "settle.journal"))
    key, account_id, key_id = seed(redis_url, balance="1000")
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    seen = _mock_requests(mock)
    body = {"model": "mock/chat-1", "messages": HELLO, "max_tokens": 10, "stream": stream, "mock": opts}
    resp = httpx.post(node.base + "/chat/completions", json=body, timeout=30,
                      headers={"Authorization": f"Bearer {key}"})
    assert _mock_requests(mock) == seen + 1
    assert resp.headers["X-Svc-Request-Id"].startswith("req_")
    if status == "sse":
        assert resp.status_code == 200 and resp.headers["Content-Type"] == "text/event-stream"
        err = _sse_error(resp)
        assert err["code"] == code == err["type"]
        content = [p for p in sse_payloads(resp.text)[:-1] if p.get("choices") and p["choices"][0]["delta"].get("content")]
        assert len(content) == chunks
    else:
        assert resp.status_code == status, resp.text
        assert resp.json()["error"]["code"] == code
    relayed = sum(len(f"tok{i} ") for i in range(chunks))
    charged = _expect_cost(node, body, relayed) if chunks else 0
    assert_settled(r, account_id, INITIAL, charged, {key_id: charged})
    assert node.ctx.ledger.journaled == 0
    # the node keeps serving
    ok = _chat(node, key)
    assert ok.status_code == 200
    assert_settled(r, account_id, INITIAL, charged + response_cost(ok))


def test_client_leaving_mid_stream_frees_the_slot_and_pays_what_it_got(make_node, redis_url, mock, tmp_path):
    node = make_node(journal_path=str(tmp_path / "settle.journal"))
    key, account_id, key_id = seed(redis_url, balance="1000")
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    body = {"model": "mock/chat-1", "messages": HELLO, "max_tokens": 100, "stream": True,
            "mock": {"chunks": 100, "chunk_delay_ms": 50}}
    got = 0
    with httpx.Client(timeout=30) as c:
        with c.stream("POST", node.base + "/chat/completions", json=body,
                      headers={"Authorization": f"Bearer {key}"}) as resp:
            for line in resp.iter_lines():
                if line.startswith("data: ") and "tok" in line:
                    got += 1
                    if got == 3:
                        break
    wait_for(lambda: r.zcard(keyspace.streams(account_id)) == 0 and wallet(r, account_id)[1] == 0,
             10, "the slot and hold to be freed")
    balance, _ = wallet(r, account_id)
    charged = INITIAL - balance
    # at least what the client read, never the whole answer
    assert _expect_cost(node, body, len("tok0 tok1 tok2 ")) <= charged < _expect_cost(node, body, 100 * 6)
    assert_settled(r, account_id, INITIAL, charged, {key_id: charged})


_BUSY_7S = """local t0 = tonumber(redis.call('TIME')[1])
while tonumber(redis.call('TIME')[1]) - t0 < 7 do end
return 1"""


def test_an_admission_whose_answer_was_lost_is_released_when_the_store_recovers(mock):
    """The store stalls past the client timeout (5 s) with the admission queued: the client
    gets 503, nothing charged, then Redis runs admit.lua anyway. Its hold, stream slot and
    `:free` quota unit must come back at once, not after the lease by the reaper (which credits
    nothing back)."""
    from upgate.billing import jalali

    server = RedisServer(extra=["--busy-reply-threshold", "20000"]).start()  # queue, never BUSY
    try:
        load_catalog(server.url)
        node = Node(gw.test_settings(server.url, lease_s=60.0), _providers(mock))
        try:
            key, account_id, _ = seed(server.url, balance="1000")
            r = redis.Redis.from_url(server.url, decode_responses=True)
            warm = _chat(node, key, stream=True)  # (and the key is cached now)
            assert warm.status_code == 200
            day_free = keyspace.free(account_id, jalali.day_key(time.time()))
            free_before = int(r.get(day_free) or 0)
            def stall():
                try:
                    redis.Redis.from_url(server.url, socket_timeout=30).eval(_BUSY_7S, 0)
                except redis.RedisError:
                    pass  # (only the stall matters)
            threading.Thread(target=stall, daemon=True).start()
            time.sleep(0.3)
            answers = {}

            def ask(name, model):
                answers[name] = _chat(node, key, stream=True, model=model)
            threads = [threading.Thread(target=ask, args=(n, m))
                       for n, m in (("paid", "mock/chat-1"), ("free", "mock/chat-1:free"))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert {n: (a.status_code, a.json()["error"]["code"]) for n, a in answers.items()} == {
                "paid": (503, "service_unavailable"), "free": (503, "service_unavailable")}
            # the busy script ends at ~7 s and the queued admissions run; the lease is 60 s
            wait_for(lambda: r.zcard(keyspace.holds(account_id)) == 0
                     and r.zcard(keyspace.streams(account_id)) == 0, 20, "the lost holds released")
            assert int(r.get(day_free) or 0) == free_before  # the :free unit came back
            assert wallet(r, account_id) == (micro("1000") - response_cost(warm), 0)
        finally:
            node.close()
    finally:
        server.close()
