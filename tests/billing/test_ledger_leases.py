"""Leases, renewal and the reaper (lua/renew.lua, lua/reap.lua), the settlement journal and the
reaper loop, against a private real redis-server. Time is injected (now_ms)."""
from __future__ import annotations

import asyncio
import time

import orjson
import pytest

from tests.ledger_kit import ACCT, KEY, T0, TOMAN, h, i, run, seed_account, seed_key, settings
from tests.procs import free_port
from upgate.billing import ledger as ledger_mod, reaper
from upgate.store import connection as store, keyspace
from upgate.billing.ledger import Ledger


def admit(L, hold=TOMAN, *, stream=False, free=False, key=KEY, acct=ACCT, now=T0):
    return L.admit(account_id=acct, key_id=key, model="acme/chat-1", hold_micro=hold, stream=stream,
                   free=free, now_ms=now)


def settle(L, hold_id, cost, *, acct=ACCT, key=KEY):
    return L.settle(acct, hold_id, key_id=key, model="acme/chat-1", cost_micro=cost, prompt_tokens=3,
                    completion_tokens=4)


def test_reap_releases_expired_holds_and_slots_charging_nothing(redis_url, r):
    seed_account(r, balance=50 * TOMAN)
    seed_key(r)

    async def body(L):
        a = await admit(L, 5 * TOMAN, stream=True, now=T0)
        await admit(L, 7 * TOMAN, now=T0 + 10_000)
        early = await L.reap(now_ms=T0 + 29_999)
        first = await L.reap(now_ms=T0 + 30_000)  # a's lease has lapsed, b's has not
        state_a = h(r, keyspace.hold(ACCT, a.hold_id))
        index = r.zscore(keyspace.REAP_INDEX, ACCT)
        second = await L.reap(now_ms=T0 + 40_000)
        return early, first, state_a, index, second

    early, first, state_a, index, second = run(redis_url, body)
    assert (early, first, second) == (0, 1, 1)
    assert state_a["state"] == "reaped"
    assert index == T0 + 40_000  # re-filed under b's deadline
    w = h(r, keyspace.wallet(ACCT))
    assert (w["balance"], w["held"]) == (str(50 * TOMAN), "0")
    assert i(r.hget(keyspace.key_record(ACCT, KEY), "held")) == 0
    assert r.zcard(keyspace.streams(ACCT)) == 0 and r.zcard(keyspace.holds(ACCT)) == 0
    assert r.zscore(keyspace.REAP_INDEX, ACCT) is None  # nothing left: out of the index
    assert not r.keys(keyspace.tag(ACCT) + ":usage:*")


def test_reaped_record_is_kept_for_a_late_settlement(redis_url, r):
    seed_account(r, balance=50 * TOMAN)
    seed_key(r)

    async def body(L):
        a = await admit(L, 5 * TOMAN, now=T0)
        b = await admit(L, 5 * TOMAN, now=T0)
        assert await L.reap(now_ms=T0 + 31_000) == 2
        ttl = r.pttl(keyspace.hold(ACCT, a.hold_id))
        late = await settle(L, a.hold_id, 2 * TOMAN)  # the request was served: charge it
        twice = await settle(L, a.hold_id, 2 * TOMAN)
        released = await L.release(ACCT, b.hold_id)  # a late release only forgets the record
        return ttl, late, twice, released

    ttl, late, twice, released = run(redis_url, body)
    assert 6 * 86_400_000 < ttl <= 7 * 86_400_000
    assert (late, twice, released) == (True, False, False)
    w = h(r, keyspace.wallet(ACCT))
    assert (w["balance"], w["held"]) == (str(48 * TOMAN), "0")
    assert i(r.hget(keyspace.key_record(ACCT, KEY), "held")) == 0
    assert not r.keys(keyspace.tag(ACCT) + ":hold:*")


def test_renew_extends_leases_of_holds_and_slots(redis_url, r):
    seed_account(r, balance=50 * TOMAN)
    seed_key(r)

    async def body(L):
        a = await admit(L, TOMAN, stream=True, now=T0)
        b = await admit(L, TOMAN, now=T0)
        await L.renew(ACCT, [a.hold_id, "not-a-hold"], now_ms=T0 + 20_000)
        n1 = await L.reap(now_ms=T0 + 31_000)  # b only
        slots = r.zscore(keyspace.streams(ACCT), a.hold_id)
        n2 = await L.reap(now_ms=T0 + 49_999)
        n3 = await L.reap(now_ms=T0 + 50_000)
        await L.renew(ACCT, [b.hold_id], now_ms=T0 + 60_000)  # reaped: renewing is a no-op
        return n1, slots, n2, n3, b

    n1, slots, n2, n3, b = run(redis_url, body)
    assert (n1, n2, n3) == (1, 0, 1)
    assert slots == T0 + 50_000
    assert r.zcard(keyspace.holds(ACCT)) == 0
    assert h(r, keyspace.hold(ACCT, b.hold_id))["state"] == "reaped"


def test_renew_names_the_holds_it_could_not_renew(redis_url, r, caplog):
    """A request whose node stalled past its lease finds its hold reaped (or gone): renew says
    which holds it did not renew, in one call, and logs a warning per lost hold (ids only)."""
    seed_account(r, balance=50 * TOMAN)
    seed_key(r)

    async def body(L):
        live = await admit(L, TOMAN, stream=True, now=T0)
        stalled = await admit(L, 2 * TOMAN, stream=True, now=T0 - 20_000)
        settled = await admit(L, TOMAN, now=T0)
        assert await settle(L, settled.hold_id, 5)
        assert await L.reap(now_ms=T0 + 10_000) == 1  # the stalled one's lease lapsed at T0 + 10 s
        calls = []
        real = L._renew

        async def counting(client, keys, args):
            calls.append(keys)
            return await real(client, keys, args)

        L._renew = counting
        lost = await L.renew(ACCT, [live.hold_id, stalled.hold_id, settled.hold_id], now_ms=T0 + 15_000)
        assert len(calls) == 1
        assert await L.renew(ACCT, [live.hold_id], now_ms=T0 + 16_000) == []
        assert await L.renew(ACCT, []) == []
        return live, stalled, settled, lost

    with caplog.at_level("WARNING", logger="upgate.billing.ledger"):
        live, stalled, settled, lost = run(redis_url, body)
    assert sorted(lost) == sorted([stalled.hold_id, settled.hold_id])
    assert r.zscore(keyspace.holds(ACCT), live.hold_id) == T0 + 16_000 + 30_000
    warnings = [rec.getMessage() for rec in caplog.records if "lease" in rec.getMessage()]
    assert len(warnings) == 2
    assert any(stalled.hold_id in w for w in warnings) and any(settled.hold_id in w for w in warnings)
    assert not any(KEY in w.split() or "acme" in w for w in warnings)


def test_concurrent_reapers_release_each_hold_once(redis_url, r):
    accounts = [f"acct-{n}" for n in range(8)]
    for a in accounts:
        seed_account(r, a, balance=100 * TOMAN)
        seed_key(r, a, KEY, rpm=600)

    async def body(*ledgers):
        for a in accounts:
            for j in range(5):
                await admit(ledgers[0], TOMAN, stream=j % 2 == 0, acct=a, now=T0)
        counts = await asyncio.gather(*(ledgers[j % 4].reap(now_ms=T0 + 31_000) for j in range(12)))
        return sum(counts)

    assert run(redis_url, body, clients=4) == 40
    for a in accounts:
        assert h(r, keyspace.wallet(a))["held"] == "0"
        assert r.zcard(keyspace.streams(a)) == 0
    assert r.zcard(keyspace.REAP_INDEX) == 0


def test_reaping_does_not_drop_an_account_that_just_got_a_hold(redis_url, r):
    """The race: a reaper empties an account while a new hold lands. Both are atomic in the
    account's slot, so whichever runs second sees the other: the new hold stays indexed."""
    seed_account(r, balance=100 * TOMAN)
    seed_key(r, rpm=600)

    async def body(L, M):
        a = await admit(L, TOMAN, now=T0)
        for step in range(30):
            now = T0 + 31_000 + step * 31_000
            results = await asyncio.gather(M.reap(now_ms=now), admit(L, TOMAN, now=now))
            new = results[1]
            assert r.zscore(keyspace.REAP_INDEX, ACCT) is not None
            assert r.zscore(keyspace.REAP_INDEX, ACCT) <= r.zscore(keyspace.holds(ACCT), new.hold_id)
        return a

    run(redis_url, body, clients=2)
    # every hold ends reapable
    async def sweep(L):
        return await L.reap(now_ms=T0 + 10**7)

    run(redis_url, sweep)
    assert h(r, keyspace.wallet(ACCT))["held"] == "0"
    assert r.zcard(keyspace.holds(ACCT)) == 0


def test_default_lease_comes_from_settings_and_redis_time(redis_url, r):
    seed_account(r)
    seed_key(r)

    async def body(L):
        a = await L.admit(account_id=ACCT, key_id=KEY, model="m/x", hold_micro=1, stream=True, free=False)
        return a

    a = run(redis_url, body, settings(lease_s=12.5))
    sec, usec = r.time()
    now_ms = sec * 1000 + usec // 1000
    deadline = int(r.zscore(keyspace.holds(ACCT), a.hold_id))
    assert now_ms + 12_500 - 2_000 < deadline <= now_ms + 12_500


def test_run_reaper_loop_reaps_with_short_leases(redis_url, r):
    seed_account(r, balance=10 * TOMAN)
    seed_key(r)

    async def body(L):
        await L.admit(account_id=ACCT, key_id=KEY, model="m/x", hold_micro=TOMAN, stream=True, free=False)
        task = asyncio.create_task(L.run_reaper(0.05))
        for _ in range(100):
            await asyncio.sleep(0.05)
            if r.zcard(keyspace.holds(ACCT)) == 0:
                break
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(redis_url, body, settings(lease_s=0.2))
    assert h(r, keyspace.wallet(ACCT))["held"] == "0"
    assert r.zcard(keyspace.streams(ACCT)) == 0


# ---- the settlement journal -------------------------------------------------------------------

def test_unreachable_settlement_is_journaled_and_replayed_once(redis_url, r, tmp_path, monkeypatch):
    monkeypatch.setattr(ledger_mod, "SETTLE_BACKOFF_S", (0, 0, 0))
    seed_account(r, balance=10 * TOMAN)
    seed_key(r)
    sets = settings(tmp_path)
    dead_url = f"redis://127.0.0.1:{free_port()}/0"

    async def body(L):
        a = await L.admit(account_id=ACCT, key_id=KEY, model="m/x", hold_micro=3 * TOMAN, stream=True,
                          free=False)
        dead = Ledger(store.connect_async(dead_url), sets)
        try:
            journaled = await dead.settle(ACCT, a.hold_id, key_id=KEY, model="acme/chat-1",
                                          cost_micro=1_500_000, prompt_tokens=11, completion_tokens=22)
        finally:
            await dead.client.aclose()
        assert dead.journaled == 1
        lines = (tmp_path / "settle.journal").read_bytes().splitlines()
        held_before = h(r, keyspace.wallet(ACCT))["held"]
        first = await L.replay_journal()
        second = await L.replay_journal()
        return a, journaled, lines, held_before, first, second

    a, journaled, lines, held_before, first, second = run(redis_url, body, sets)
    assert journaled is True
    entry = orjson.loads(lines[0])
    assert len(lines) == 1 and set(entry) == {"a", "h", "k", "m", "c", "p", "q", "t"}
    assert (entry["a"], entry["h"], entry["k"], entry["m"], entry["c"], entry["p"], entry["q"]) == \
        (ACCT, a.hold_id, KEY, "acme/chat-1", 1_500_000, 11, 22)
    assert held_before == str(3 * TOMAN)
    assert (first, second) == (1, 0)
    w = h(r, keyspace.wallet(ACCT))
    assert (w["balance"], w["held"]) == (str(10 * TOMAN - 1_500_000), "0")
    assert r.zcard(keyspace.streams(ACCT)) == 0
    assert not list(tmp_path.glob("settle.journal*"))


def test_journal_replay_is_idempotent_even_when_lines_repeat(redis_url, r, tmp_path):
    seed_account(r, balance=10 * TOMAN)
    seed_key(r)
    sets = settings(tmp_path)

    async def body(L):
        a = await L.admit(account_id=ACCT, key_id=KEY, model="m/x", hold_micro=TOMAN, stream=False, free=False)
        line = orjson.dumps({"a": ACCT, "h": a.hold_id, "k": KEY, "m": "m/x", "c": 400_000, "p": 1, "q": 2,
                             "t": int(time.time())}) + b"\n"
        (tmp_path / "settle.journal").write_bytes(line + b"garbage\n" + line)
        return await L.replay_journal()

    assert run(redis_url, body, sets) == 2  # applied once, then found already applied
    assert h(r, keyspace.wallet(ACCT))["balance"] == str(10 * TOMAN - 400_000)


def test_replay_of_a_hold_the_store_forgot_is_reported_not_counted(redis_url, r, tmp_path, caplog):
    """An unknown hold on replay: applied already when the line is younger than the store keeps
    unsettled hold records (counted, harmless to repeat); older, nobody can tell, so the operator
    gets an error naming the hold and the cost and the line is kept in <journal>.failed."""
    seed_account(r, balance=10 * TOMAN)
    seed_key(r)
    sets = settings(tmp_path)

    async def body(L):
        a = await L.admit(account_id=ACCT, key_id=KEY, model="m/x", hold_micro=TOMAN, stream=False, free=False)
        assert await settle(L, a.hold_id, 300_000)
        applied = orjson.dumps({"a": ACCT, "h": a.hold_id, "k": KEY, "m": "acme/chat-1", "c": 300_000,
                                "p": 3, "q": 4, "t": 0}) + b"\n"
        applied = applied.replace(b'"t":0', b'"t":%d' % int(time.time()))
        old = int(time.time() - reaper.REAPED_KEEP_MS / 1000 - 60)
        lost = orjson.dumps({"a": ACCT, "h": "0123456789abcdef", "k": KEY, "m": "m/x", "c": 777_000,
                             "p": 1, "q": 2, "t": old}) + b"\n"
        (tmp_path / "settle.journal").write_bytes(applied + lost)
        n = await L.replay_journal()
        return n, L.replayed, lost

    with caplog.at_level("ERROR", logger="upgate.billing.ledger"):
        n, replayed, lost = run(redis_url, body, sets)
    assert (n, replayed) == (1, 1)
    errors = [rec.getMessage() for rec in caplog.records if rec.levelname == "ERROR"]
    assert len(errors) == 1 and "0123456789abcdef" in errors[0] and "777000" in errors[0]
    assert (tmp_path / "settle.journal.failed").read_bytes() == lost
    assert not (tmp_path / "settle.journal").exists()
    assert h(r, keyspace.wallet(ACCT))["balance"] == str(10 * TOMAN - 300_000)


def test_settlement_that_reaches_neither_store_nor_journal_raises_a_clear_error(redis_url, r, tmp_path,
                                                                                 monkeypatch, caplog):
    """The store is unreachable and the journal cannot be written (disk full, permissions): settle
    logs the charge (ids and numbers only) and raises SettlementNotRecorded, a 503."""
    monkeypatch.setattr(ledger_mod, "SETTLE_BACKOFF_S", (0, 0, 0))
    seed_account(r, balance=10 * TOMAN)
    seed_key(r)
    sets = settings(journal_path=str(tmp_path / "no-such-dir" / "settle.journal"))

    async def body(L):
        a = await L.admit(account_id=ACCT, key_id=KEY, model="m/x", hold_micro=TOMAN, stream=False, free=False)
        dead = Ledger(store.connect_async(f"redis://127.0.0.1:{free_port()}/0"), sets)
        try:
            with pytest.raises(ledger_mod.SettlementNotRecorded) as info:
                await dead.settle(ACCT, a.hold_id, key_id=KEY, model="acme/chat-1", cost_micro=1_234_567,
                                  prompt_tokens=11, completion_tokens=22)
        finally:
            await dead.client.aclose()
        return a, info.value, dead.journaled

    with caplog.at_level("ERROR", logger="upgate.billing.ledger"):
        a, err, journaled = run(redis_url, body, sets)
    assert journaled == 0
    assert isinstance(err.__cause__, OSError)
    assert (err.status, err.code, err.headers()["Retry-After"]) == (503, "service_unavailable", "5")
    errors = [rec.getMessage() for rec in caplog.records if rec.levelname == "ERROR"]
    assert len(errors) == 1
    assert a.hold_id in errors[0] and ACCT in errors[0] and "1234567" in errors[0]
    assert "acme" not in errors[0] and KEY not in errors[0].split()
    assert h(r, keyspace.wallet(ACCT))["held"] == str(TOMAN)  # still held: the reaper releases it


def test_replay_keeps_lines_while_the_store_is_down(tmp_path):
    sets = settings(tmp_path)
    line = orjson.dumps({"a": ACCT, "h": "ab", "k": KEY, "m": "m/x", "c": 1, "p": 1, "q": 1, "t": 0}) + b"\n"
    (tmp_path / "settle.journal").write_bytes(line * 3)

    async def main():
        dead = Ledger(store.connect_async(f"redis://127.0.0.1:{free_port()}/0"), sets)
        try:
            return await dead.replay_journal()
        finally:
            await dead.client.aclose()

    assert asyncio.run(main()) == 0
    assert (tmp_path / "settle.journal").read_bytes() == line * 3
    assert [p.name for p in tmp_path.iterdir()] == ["settle.journal"]


def test_the_reaper_stops_when_cancelled_even_if_a_store_call_swallowed_the_cancel(tmp_path):
    """Python 3.11's wait_for (inside redis-py) can lose a cancel that races a reply. The reaper
    loop catches errors and carries on, so without looking at its task's cancel request it would
    run forever and the node's shutdown would hang."""
    sets = settings(tmp_path)

    async def main():
        L = Ledger(store.connect_async(f"redis://127.0.0.1:{free_port()}/0"), sets)
        entered = asyncio.Event()

        async def swallowing_reap(*_a, **_k):
            entered.set()
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                return 0  # what a lost cancel looks like to the caller
            return 0

        L.reap = swallowing_reap
        task = asyncio.create_task(L.run_reaper(0.01))
        await asyncio.wait_for(entered.wait(), 5)
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=5)
        await L.client.aclose()
        return task in done and task.cancelled()

    assert asyncio.run(main())
