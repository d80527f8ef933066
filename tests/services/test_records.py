"""Request records (upgate/services/records.py, kept by settle.lua / release.lua): through a real gateway
node, the real `openai` client and the mock provider on a private real Redis; the request index
on the local Cluster; retention; and no prompt text anywhere in Redis."""
from __future__ import annotations

import asyncio
import secrets
import time

import openai
import orjson
import pytest
import redis

from tests.gateway import seed
from tests.ledger_kit import ACCT, KEY, TOMAN, run, seed_account, seed_key, settings
from upgate.billing import money
from upgate.services import accounts, audit, records, statements
from upgate.store import connection as store, keyspace


def _client(node, key):
    return openai.OpenAI(base_url=node.base, api_key=key, max_retries=0)


def _balance(redis_url, acct) -> int:
    return int(redis.Redis.from_url(redis_url).hget(keyspace.wallet(acct), "balance"))


def test_settled_and_released_requests_leave_records_with_what_was_charged(node, redis_url):
    key, acct, key_id = seed(redis_url, balance="100000")
    sync = store.connect_sync(redis_url)
    c = _client(node, key)
    before = _balance(redis_url, acct)
    resp = c.chat.completions.with_raw_response.create(model="mock/chat-1",
                                                       messages=[{"role": "user", "content": "hi"}])
    rid = resp.headers["X-Svc-Request-Id"]
    charged = before - _balance(redis_url, acct)
    rec = records.find(sync, rid)
    assert list(rec) == list(records.PUBLIC)
    assert rec["request_id"] == rid and rec["account_id"] == acct and rec["key_id"] == key_id
    assert rec["key_prefix"] and key.startswith(rec["key_prefix"])
    assert rec["model"] == rec["answered_model"] == "mock/chat-1" and rec["provider"] == "mock"
    assert rec["status"] == 200 and rec["code"] is None and rec["stream"] is False
    assert rec["cost_toman"] == money.fmt(charged) and charged > 0
    assert money.parse_toman(rec["hold_toman"]) >= charged
    assert rec["prompt_tokens"] > 0 and rec["completion_tokens"] == 5 and rec["cached_tokens"] == 0
    assert 0 <= rec["ttfb_ms"] <= rec["duration_ms"]

    # a stream
    before = _balance(redis_url, acct)
    stream = c.chat.completions.with_raw_response.create(
        model="mock/chat-1", messages=[{"role": "user", "content": "hi"}], stream=True)
    srid = stream.headers["X-Svc-Request-Id"]
    list(stream.parse())
    rec = records.find(sync, srid)
    assert rec["stream"] is True and rec["cost_toman"] == money.fmt(before - _balance(redis_url, acct))

    # a provider error: released, charged nothing, recorded with the code the client got
    with pytest.raises(openai.InternalServerError) as e:
        c.chat.completions.with_raw_response.create(model="mock/chat-1", messages=[{"role": "user", "content": "x"}],
                                                    extra_body={"mock": {"status": 500}})
    erid = e.value.response.headers["X-Svc-Request-Id"]
    rec = records.find(sync, erid)
    assert rec["status"] == 502 and rec["code"] == "upstream_error" and rec["cost_toman"] == "0.000000"
    assert rec["answered_model"] is None and rec["provider"] is None and rec["ttfb_ms"] is None

    # a stream the provider cuts part-way: settled for what was relayed, the cut recorded
    before = _balance(redis_url, acct)
    with pytest.raises(openai.APIError):
        for _ in c.chat.completions.create(model="mock/chat-1", messages=[{"role": "user", "content": "y"}],
                                           stream=True, extra_body={"mock": {"chunks": 8, "cut_after": 3}}):
            pass
    newest = records.list_requests(sync, acct, limit=1)[0]
    assert newest["code"] == "upstream_error" and newest["stream"] is True
    assert newest["cost_toman"] == money.fmt(before - _balance(redis_url, acct))

    listed = records.list_requests(sync, acct)
    assert [r["request_id"] for r in listed][1:4] == [erid, srid, rid]  # newest first
    # the wallet's charges are exactly the records' costs, and the money adds up
    total = sum(money.parse_toman(r["cost_toman"]) for r in listed)
    assert total == int(sync.hget(keyspace.wallet(acct), "charged"))
    assert audit.run(sync)["mismatches"] == []
    st = statements.statement(sync, acct)
    assert st["charges_toman"] == money.fmt(total) and st["requests"] == 3


def test_the_access_log_line_carries_the_record(node, redis_url):
    key, acct, key_id = seed(redis_url, balance="100000")
    lines = []
    node.ctx.access_log.write = lines.append  # what would go to stdout, before encoding
    resp = _client(node, key).chat.completions.with_raw_response.create(
        model="mock/chat-1", messages=[{"role": "user", "content": "hi"}])
    rid = resp.headers["X-Svc-Request-Id"]
    for _ in range(100):
        if any(x.get("request_id") == rid for x in lines):
            break
        asyncio.run(asyncio.sleep(0.02))
    line = next(x for x in lines if x.get("request_id") == rid)
    rec = records.find(store.connect_sync(redis_url), rid)
    for field in records.PUBLIC:
        if field not in ("time", "route", "refused"):  # (what a refused request's record adds)
            assert line[field] == rec[field], field


def test_no_prompt_text_anywhere_in_redis(node, redis_url):
    key, acct, _ = seed(redis_url, balance="100000")
    marker = "MARKER-" + secrets.token_hex(12)
    c = _client(node, key)
    msgs = [{"role": "system", "content": marker}, {"role": "user", "content": f"say {marker}"}]
    c.chat.completions.create(model="mock/chat-1", messages=msgs)
    list(c.chat.completions.create(model="mock/chat-1", messages=msgs, stream=True))
    with pytest.raises(openai.InternalServerError):
        c.chat.completions.create(model="mock/chat-1", messages=msgs, extra_body={"mock": {"status": 500}})
    r = redis.Redis.from_url(redis_url)
    assert len(records.list_requests(store.connect_sync(redis_url), acct)) == 3
    seen = 0
    for k in r.scan_iter(count=1000):
        seen += 1
        assert marker.encode() not in k
        kind = r.type(k)
        if kind == b"string":
            values = [r.get(k)]
        elif kind == b"hash":
            values = [x for kv in r.hgetall(k).items() for x in kv]
        elif kind == b"zset":
            values = [m for m, _ in r.zrange(k, 0, -1, withscores=True)]
        elif kind == b"list":
            values = r.lrange(k, 0, -1)
        elif kind == b"set":
            values = list(r.smembers(k))
        else:
            values = [r.dump(k)]
        assert not any(marker.encode() in v for v in values), k
    assert seen > 5


async def _one_with_record(L, i: int, cost: int) -> str:
    """Admit and settle request number i through the ledger, with its record; returns its id."""
    adm = await L.admit(account_id=ACCT, key_id=KEY, model="acme/chat-1", hold_micro=TOMAN,
                        stream=False, free=False)
    rid = f"req_{i:024x}"
    rec = {"request_id": rid, "key_id": KEY, "key_prefix": "sk-up-abcd", "model": "acme/chat-1",
           "answered_model": "acme/chat-1", "provider": "p", "stream": False, "status": 200,
           "code": None, "prompt_tokens": 1, "completion_tokens": 2, "cached_tokens": 0,
           "hold_micro": adm.hold_micro, "cost_micro": cost, "ttfb_ms": 3, "duration_ms": 4}
    await L.settle(ACCT, adm.hold_id, key_id=KEY, model="acme/chat-1", cost_micro=cost,
                   prompt_tokens=1, completion_tokens=2, record=rec)
    return rid


def _settle_with_record(url, sharded_sets=None, n=3):
    """Admit and settle n requests through the ledger, each with a record; returns the ids."""
    async def body(L):
        return [await _one_with_record(L, i, 1000 + i) for i in range(n)]
    return run(url, body, sharded_sets)


@pytest.mark.cluster
def test_find_by_request_id_on_a_cluster(cluster_url):
    sync = store.connect_sync(cluster_url)
    seed_account(sync, ACCT)
    seed_key(sync, ACCT, KEY)
    ids = _settle_with_record(cluster_url)
    for node in sync.get_primaries():  # no functions anywhere: the per-node lookup loads them
        sync.execute_command("FUNCTION", "FLUSH", target_nodes=node)
    for i, rid in enumerate(ids):
        rec = records.find(sync, rid)
        assert rec["account_id"] == ACCT and rec["cost_toman"] == money.fmt(1000 + i)
    with pytest.raises(records.UnknownRequest):
        records.find(sync, "req_" + "f" * 24)
    # the index is a per-slot shard in the account's own slot
    shard = keyspace.request_index_prefix(ACCT, True)
    assert keyspace.slot(ACCT) == sync.keyslot(shard + "1")


def test_retention_by_count_trims_records_and_their_index(redis_url):
    sync = store.connect_sync(redis_url)
    seed_account(sync, ACCT)
    seed_key(sync, ACCT, KEY)
    ids = _settle_with_record(redis_url, settings(request_log_max=2), n=5)
    assert [r["request_id"] for r in records.list_requests(sync, ACCT)] == [ids[4], ids[3]]
    for rid in ids[:3]:
        with pytest.raises(records.UnknownRequest):
            records.find(sync, rid)
    index = [k for k in sync.keys("reqidx:*")]
    assert sum(sync.hlen(k) for k in index if not k.endswith(b":n")) == 2  # the trimmed ids left it
    assert sync.pttl(keyspace.requests(ACCT)) > 0 and all(sync.pttl(k) > 0 for k in index)


def test_retention_by_age_runs_at_the_first_record_of_each_day_and_keeps_the_whole_retention(redis_url):
    """settle.lua sets the expiries and drops records past the retention once per account and UTC
    day (the wallet's rec_day), not on every request: the day's later records leave both alone;
    the next day's first one trims what is older than the retention, and nothing younger."""
    sync = store.connect_sync(redis_url)
    seed_account(sync, ACCT)
    seed_key(sync, ACCT, KEY)
    day_ms = records.DAY_MS
    day = int(time.time() * 1000) // day_ms + 10  # days ahead: the index's PEXPIREAT is absolute
    at = [day * day_ms + 10_000, day * day_ms + 3_600_000, (day + 1) * day_ms + 43_200_000,
          (day + 3) * day_ms + 10_000, (day + 3) * day_ms + 20_000]
    now = {"ms": at[0]}
    reqs = keyspace.requests(ACCT)

    async def body(L):
        ids = []
        for i, t in enumerate(at):
            now["ms"] = t
            ids.append(await _one_with_record(L, i, 1000))
            seen.append((sync.hget(keyspace.wallet(ACCT), "rec_day"), sync.pttl(reqs),
                                sync.llen(reqs)))
            if i == 0:
                sync.pexpire(reqs, 10_000_000)  # stands in for time gone by: the day's next record keeps it
            if i == 3:
                listed.extend(r["request_id"] for r in records.list_requests(sync, ACCT))
                sync.delete(reqs)  # gone behind the scripts' back: the same day's next record makes it
        return ids                 # again, and must give it an expiry although the day is marked

    seen: list = []
    listed: list = []
    keep_ms = 2 * day_ms
    ids = run(redis_url, body, settings(request_log_days=2), clock=lambda: now["ms"] / 1000)
    (d0, ttl0, n0), (d1, ttl1, n1), (d2, ttl2, n2), (d3, ttl3, n3), (d4, ttl4, n4) = seen
    assert d0 == d1 == str(day).encode() and d2 == str(day + 1).encode() and d3 == str(day + 3).encode()
    assert keep_ms + day_ms - 5_000 < ttl0 <= keep_ms + day_ms  # a day's last record is kept keep_ms too
    assert ttl1 <= 10_000_000  # the same day: no expiry set again
    assert keep_ms + day_ms - 5_000 < ttl2 <= keep_ms + day_ms
    assert (n0, n1, n2) == (1, 2, 3)
    # day + 3: the records of `day` are older than 2 days and go; day + 1's (36 h old) stays
    assert listed == [ids[3], ids[2]]
    assert d4 == d3 and n4 == 1 and keep_ms + day_ms - 5_000 < ttl4 <= keep_ms + day_ms
    for k in sync.keys(keyspace.REQ_INDEX + str(day) + ":*"):  # the day's count and its buckets
        assert sync.execute_command("PEXPIRETIME", k) == (day + 1) * day_ms + keep_ms


def test_lookups_refuse_cleanly(redis_url):
    sync = store.connect_sync(redis_url)
    with pytest.raises(accounts.UnknownAccount):
        records.list_requests(sync, "00000000-0000-4000-8000-000000000000")
    with pytest.raises(records.InvalidLimit):
        records.list_requests(sync, ACCT, limit=0)
    with pytest.raises(records.UnknownRequest, match="no record of request"):
        records.find(sync, "req_nope")


def test_a_reaped_request_leaves_a_record_that_a_late_settle_replaces(redis_url):
    sync = store.connect_sync(redis_url)
    seed_account(sync, ACCT)
    seed_key(sync, ACCT, KEY)
    now = int(time.time() * 1000)

    async def body(L):
        adm = await L.admit(account_id=ACCT, key_id=KEY, model="acme/chat-1", hold_micro=TOMAN, stream=True,
                            free=False, request_id="req_reaped1", now_ms=now)
        other = await L.admit(account_id=ACCT, key_id=KEY, model="acme/chat-1", hold_micro=TOMAN,
                              stream=False, free=False, request_id="req_reaped2", now_ms=now)
        assert await L.reap(now_ms=now + 31_000) == 2  # their node died: leases lapsed
        reaped = {r["request_id"]: r for r in records.list_requests(sync, ACCT)}
        assert set(reaped) == {"req_reaped1", "req_reaped2"}
        r1 = reaped["req_reaped1"]
        assert r1["code"] == "reaped" and r1["status"] is None and r1["cost_toman"] == "0.000000"
        assert r1["hold_toman"] == "1.000000" and r1["stream"] is True and r1["model"] == "acme/chat-1"
        assert records.find(sync, "req_reaped1")["code"] == "reaped"
        # the node was only stalled: its settlement arrives and replaces the reaper's record
        rec = records.new(request_id="req_reaped1", key_id=KEY, model="acme/chat-1", status=200,
                          hold_micro=TOMAN, cost_micro=777)
        assert await L.settle(ACCT, adm.hold_id, key_id=KEY, model="acme/chat-1", cost_micro=777,
                              prompt_tokens=1, completion_tokens=1, record=rec)
        assert not await L.release(ACCT, other.hold_id, record={**rec, "request_id": "req_reaped2",
                                                                 "status": 502, "code": "upstream_error",
                                                                 "cost_micro": 0})

    run(redis_url, body)
    kept = {r["request_id"]: r for r in records.list_requests(sync, ACCT)}
    assert len(kept) == 2 and kept["req_reaped1"]["cost_toman"] == "0.000777"
    assert kept["req_reaped1"]["code"] is None and kept["req_reaped2"]["code"] == "upstream_error"
    assert records.find(sync, "req_reaped1")["cost_toman"] == "0.000777"


def test_request_show_looks_back_as_far_as_any_node_keeps_records(make_node, redis_url):
    """A CLI whose UPGATE_REQUEST_LOG_DAYS is shorter than the nodes' still finds a record the
    nodes keep: each node publishes its retention when it connects (ZADD GT), and a lookup goes
    back the longest of its own and the published one."""
    sync = store.connect_sync(redis_url)
    acct, rid = ACCT, "req_" + secrets.token_hex(12)
    seed_account(sync, acct)
    t = int(time.time() * 1000) - 20 * records.DAY_MS  # filed 20 days ago, before the packed form
    old = orjson.dumps([rid, t, KEY, None, None, None, None, 0, None, None, 0, 0, 0, 0, 0, None, None])
    sync.zadd(keyspace.requests_v1(acct), {old: t})
    sync.hset(keyspace.REQ_INDEX + str(t // records.DAY_MS), rid, f"{acct}|{t}")
    with pytest.raises(records.UnknownRequest):
        records.find(sync, rid, keep_days=7)
    make_node(request_log_days=30)
    deadline = time.time() + 10
    while sync.zscore(keyspace.REQUEST_LOG_DAYS, "days") != 30:
        assert time.time() < deadline, "the node never published its retention"
        time.sleep(0.05)
    assert records.find(sync, rid, keep_days=7)["request_id"] == rid
    make_node(request_log_days=3)  # a node keeping less never shortens the lookback
    time.sleep(0.5)
    assert sync.zscore(keyspace.REQUEST_LOG_DAYS, "days") == 30


def test_a_reaped_record_of_a_gateway_id_is_found_and_replaced_in_place(redis_url):
    """reap.lua packs the id and the account as request_record does (lua/_lib.lua rid_key,
    acct_key): the reaper's record is found by the id, and a late settlement replaces it where
    it stands (the list keeps one record for the request)."""
    sync = store.connect_sync(redis_url)
    seed_account(sync, ACCT)
    seed_key(sync, ACCT, KEY)
    now = int(time.time() * 1000)
    rid = "req_" + secrets.token_hex(12)

    async def body(L):
        adm = await L.admit(account_id=ACCT, key_id=KEY, model="acme/chat-1", hold_micro=TOMAN, stream=False,
                            free=False, request_id=rid, now_ms=now)
        await _one_with_record(L, 7, 1000)  # a record after it
        assert await L.reap(now_ms=now + 31_000) == 1
        assert records.find(sync, rid)["code"] == "reaped"
        rec = records.new(request_id=rid, key_id=KEY, model="acme/chat-1", status=200, hold_micro=TOMAN,
                          cost_micro=555)
        assert await L.settle(ACCT, adm.hold_id, key_id=KEY, model="acme/chat-1", cost_micro=555,
                              prompt_tokens=1, completion_tokens=1, record=rec)

    run(redis_url, body)
    assert records.find(sync, rid)["cost_toman"] == "0.000555"
    listed = [r["request_id"] for r in records.list_requests(sync, ACCT)]
    assert listed.count(rid) == 1 and len(listed) == 2
