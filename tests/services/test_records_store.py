"""Request records in Redis in the packed form (lua/_lib.lua keep_record, services/records.py) on
a private real redis-server: the index buckets stay listpacks as a day grows, every id is found
in one call, a refused request's record goes the same way, records from before the packed form
are read beside the new ones, time windows are counted and read, and a million records take at
most 150 MiB."""
from __future__ import annotations

import secrets
import time

import orjson
import pytest

from tests.ledger_kit import ACCT, KEY, seed_account
from upgate.billing import request_record
from upgate.services import records
from upgate.store import connection as store, keyspace, lua_library


def _rec(rid: str, **kw) -> dict:
    return request_record.new(**{**dict(
        request_id=rid, key_id=secrets.token_hex(8), key_prefix="sk-up-Ab12", model="openai/gpt-4o-mini",
        answered_model="openai/gpt-4o-mini", provider="openai", stream=True, status=200,
        prompt_tokens=812, completion_tokens=240, hold_micro=2_500_000, cost_micro=731_400,
        ttfb_ms=420, duration_ms=3100), **kw})


def _keep_many(sync, accts, n, now_ms):
    """n records through keep_record (lua/keep_refused.lua: the same step settle.lua takes, into
    the account's refused list), round-robin over the accounts, in pipelines of 500; returns
    the ids."""
    script = store.script("keep_refused")
    one = request_record.keep_refused_call({**_rec("req_" + secrets.token_hex(12)), "account_id": accts[0]},
                                           now_ms, sharded=False, keep_days=7)
    lua_library.call_sync(sync, lambda: sync.execute_command(*script.command(*one)))  # loads the library
    ids = []
    for start in range(0, n, 500):
        pipe = sync.pipeline(transaction=False)
        for i in range(start, min(n, start + 500)):
            rid = "req_" + secrets.token_hex(12)
            ids.append(rid)
            keys, args = request_record.keep_refused_call({**_rec(rid), "account_id": accts[i % len(accts)]},
                                                          now_ms + i, sharded=False, keep_days=7)
            pipe.execute_command(*script.command(keys, args))
        pipe.execute()
    return ids


def test_a_days_index_stays_in_listpack_buckets_and_every_id_is_found(redis_url):
    sync = store.connect_sync(redis_url)
    accts = [f"00000000-0000-4000-8000-{i:012d}" for i in range(20)]
    for a in accts:
        seed_account(sync, a)
    now = int(time.time() * 1000)
    ids = _keep_many(sync, accts, 6000, now)
    day = now // records.DAY_MS
    buckets = [k for k in sync.keys(f"reqidx:{day}:*") if not k.endswith(b":n")]
    widths = {int(k.split(b":")[2]) for k in buckets}
    assert max(widths) >= 6 and len(widths) > 4  # the width grew with the day's count
    assert {sync.object("encoding", k) for k in buckets} == {b"listpack"}
    assert max(sync.hlen(k) for k in buckets) <= 128
    for rid in ids[::97] + ids[-3:]:
        rec = records.find(sync, rid)
        assert rec["request_id"] == rid and rec["cost_toman"] == "0.731400"
    with pytest.raises(records.UnknownRequest):
        records.find(sync, "req_" + "0" * 24)


def test_a_million_records_take_at_most_150_mib(redis_url):
    """Measured the way `python -m bench --records` does (there through admit + settle): the
    store's used_memory after the records less before, over 20,000 records of 25 accounts."""
    sync = store.connect_sync(redis_url)
    accts = [f"00000000-0000-4000-8000-{i:012d}" for i in range(25)]
    for a in accts:
        seed_account(sync, a)
    _keep_many(sync, accts, 25, int(time.time() * 1000))
    before = sync.info("memory")["used_memory"]
    n = 20_000
    _keep_many(sync, accts, n, int(time.time() * 1000))
    per = (sync.info("memory")["used_memory"] - before) / n
    assert per * 1_000_000 / 2**20 <= 150, per


def test_a_refused_request_is_kept_beside_the_billed_ones_and_found_by_id(redis_url):
    sync = store.connect_sync(redis_url)
    seed_account(sync, ACCT)
    now = int(time.time() * 1000)
    rid = "req_" + secrets.token_hex(12)
    refused = request_record.refused(request_id=rid, account_id=ACCT, key_id=KEY, key_prefix="sk-up-abcd",
                                     route="/v1/chat/completions", model="acme/chat-1", status=402,
                                     code="insufficient_balance")
    script = store.script("keep_refused")
    call = script.command(*request_record.keep_refused_call(refused, now, sharded=False, keep_days=7))
    assert lua_library.call_sync(sync, lambda: sync.execute_command(*call)) == 1
    gone = {**refused, "account_id": "00000000-0000-4000-8000-00000000dead"}
    call = script.command(*request_record.keep_refused_call(gone, now, sharded=False, keep_days=7))
    assert sync.execute_command(*call) == 0  # no such account: nothing kept
    got = records.find(sync, rid)
    assert got["status"] == 402 and got["code"] == "insufficient_balance" and got["refused"] is True
    assert got["route"] == "/v1/chat/completions" and got["cost_toman"] == "0.000000"
    assert records.list_requests(sync, ACCT)[0]["request_id"] == rid


def test_records_from_before_the_packed_form_are_listed_after_the_new_ones(redis_url):
    sync = store.connect_sync(redis_url)
    seed_account(sync, ACCT)
    now = int(time.time() * 1000)
    old_ids = [f"req_old{i}" for i in range(5)]
    for i, rid in enumerate(old_ids):  # as settle.lua wrote them before
        t = now - 3_600_000 + i
        raw = orjson.dumps([rid, t, KEY, None, "acme/chat-1", None, None, 0, 200, None, 1, 2, 0, 10, 5, 1, 2])
        sync.zadd(keyspace.requests_v1(ACCT), {raw: t})
        sync.hset(keyspace.REQ_INDEX + str(t // records.DAY_MS), rid, f"{ACCT}|{t}")
    new_ids = [f"req_new{i}" for i in range(7)]
    script = store.script("keep_refused")
    for i, rid in enumerate(new_ids):
        call = script.command(*request_record.keep_refused_call({**_rec(rid), "account_id": ACCT}, now + i,
                                                                sharded=False, keep_days=7))
        lua_library.call_sync(sync, lambda: sync.execute_command(*call))
    want = new_ids[::-1] + old_ids[::-1]
    assert [r["request_id"] for r in records.list_requests(sync, ACCT, limit=1000)] == want
    assert [r["request_id"] for r in records.list_requests(sync, ACCT, limit=3)] == want[:3]
    assert records.find(sync, "req_old2")["cost_toman"] == "0.000005"
    assert records.find(sync, "req_new3")["request_id"] == "req_new3"
    # a time window, counted and read, over the new lists and the old sets alike
    lo, hi = now - 3_600_000 + 2, now + 3  # old 2..4, new 0..2
    assert records.count_window(sync, [ACCT], lo, hi) == {ACCT: 6}
    got = sorted((ms, r["request_id"]) for r, ms in records.account_window(sync, [ACCT], lo, hi, 2))
    assert [rid for _, rid in got] == ["req_old3", "req_old4", "req_new1", "req_new2"]


@pytest.mark.cluster
def test_windows_lists_and_lookups_on_a_cluster(cluster_url):
    sync = store.connect_sync(cluster_url)
    accts = [f"00000000-0000-4000-8000-{i:012d}" for i in range(6)]  # in several slots
    for a in accts:
        seed_account(sync, a)
    now = int(time.time() * 1000)
    script = store.script("keep_refused")
    ids = []
    for i in range(30):
        rid = "req_" + secrets.token_hex(12)
        ids.append(rid)
        rec = request_record.refused(request_id=rid, account_id=accts[i % 6], key_id=KEY, key_prefix="sk-up-abcd",
                                     route="/v1/chat/completions", model="acme/chat-1", status=429, code="x")
        call = script.command(*request_record.keep_refused_call(rec, now + i, sharded=True, keep_days=7))
        lua_library.call_sync(sync, lambda: sync.execute_command(*call))
    assert records.count_window(sync, accts, now, now + 30) == {a: 5 for a in accts}
    got = list(records.account_window(sync, accts, now + 10, now + 30, 2))
    assert len(got) == 12 and all(now + 10 <= ms < now + 30 for _, ms in got)
    assert [r["request_id"] for r in records.list_requests(sync, accts[0], limit=2)] == [ids[24], ids[18]]
    assert records.find(sync, ids[7])["account_id"] == accts[1]
