"""Shared pieces of the ledger tests: seeding wallets and keys straight into Redis (the
accounts code is written in parallel), a runner for async bodies, the Tehran clock, and the
concurrency suite that runs on one Redis and again on the local Redis Cluster."""
from __future__ import annotations

import asyncio
import random
from datetime import datetime

import jdatetime

from upgate.billing import jalali
from upgate.store import connection as store, keyspace
from upgate.billing.ledger import Ledger, Rejected
from upgate.settings import Settings

ACCT = "11111111-2222-3333-4444-555555555555"
KEY = "key1"
T0 = 1_790_000_000_000  # a fixed "now" in ms for time-injected tests
TOMAN = 1_000_000


def settings(tmp_path=None, **kw) -> Settings:
    base = {"topup_url": "https://pay.example/topup", "lease_s": 30.0, "cooldown_s": 30.0}
    if tmp_path is not None:
        base["journal_path"] = str(tmp_path / "settle.journal")
    base.update(kw)
    return Settings(**base)


def seed_account(r, acct: str = ACCT, *, balance: int = 100 * TOMAN, held: int = 0, suspended: str = "0",
                 free_quota: int | None = None) -> None:
    fields = {"phone": "+989120000000", "balance": balance, "held": held, "suspended": suspended,
              "created_at": 1}
    if free_quota is not None:
        fields["free_quota"] = free_quota
    r.hset(keyspace.wallet(acct), mapping=fields)


def seed_key(r, acct: str = ACCT, key: str = KEY, **fields) -> None:
    base = {"account_id": acct, "name": "test", "prefix": "sk-up-abcd", "last4": "wxyz", "hash": "h",
            "revoked": "0", "created_at": 1}
    base.update({k: v for k, v in fields.items() if v is not None})
    r.hset(keyspace.key_record(acct, key), mapping=base)
    r.sadd(keyspace.account_keys(acct), key)


def connect(url: str):
    """The gateway's own client (store.connect_async): on a cluster, no command retries and 512
    connections per node (redis-py's async cluster client opens one per in-flight command and
    fails at once, MaxConnectionsError, past that)."""
    return store.connect_async(url)


def run(url: str, body, sets: Settings | None = None, clock=None, clients: int = 1):
    """Run `await body(ledger)` (or body(*ledgers) with clients > 1: one client per "node")."""

    async def main():
        conns = [connect(url) for _ in range(clients)]
        for c in conns:
            if store.is_cluster(url):
                # Discover the cluster before the burst, as a gateway does at start-up: redis-py
                # 8.1's async cluster client, initialised lazily by many concurrent first
                # commands, marks the connections it is opening for reconnect and then closes
                # them mid-handshake (AttributeError: 'NoneType' object has no attribute
                # 'writelines'), a cascade that fails a few commands.
                await c.initialize()
        ledgers = [Ledger(c, sets or settings(), clock=clock) for c in conns]
        try:
            return await body(*ledgers)
        finally:
            for c in conns:
                await c.aclose()

    return asyncio.run(main())


def tehran_ts(y: int, m: int, d: int, hh: int = 0, mm: int = 0, ss: int = 0) -> float:
    """Unix seconds of a Jalali date and Tehran wall time."""
    g = jdatetime.date(y, m, d).togregorian()
    return datetime(g.year, g.month, g.day, hh, mm, ss, tzinfo=jalali.TEHRAN).timestamp()


async def outcome(coro) -> str:
    """"ok" or the rejection code."""
    try:
        await coro
        return "ok"
    except Rejected as e:
        return e.code


def _t(v) -> str:
    return v.decode() if isinstance(v, bytes) else v


def h(r, key: str) -> dict:
    """HGETALL as a str → str dict, whatever the client's decoding."""
    return {_t(k): _t(v) for k, v in r.hgetall(key).items()}


def i(value) -> int:
    return int(value or 0)


# ---- the concurrency suite: one Redis (tests/billing/test_ledger_concurrency.py) and the cluster ------

def check_parallel_wallet(url: str, sync, n_ok: int = 37, attempts: int = 200) -> None:
    """A wallet covering exactly n_ok holds: exactly n_ok of `attempts` parallel admits win."""
    hold = 3 * TOMAN + 123
    seed_account(sync, balance=hold * n_ok + hold - 1)  # one micro short of n_ok + 1
    seed_key(sync, rpm=600)

    async def body(*ledgers):
        return await asyncio.gather(*(outcome(ledgers[j % len(ledgers)].admit(
            account_id=ACCT, key_id=KEY, model="m/a", hold_micro=hold, stream=False, free=False))
            for j in range(attempts)))

    results = run(url, body, clients=4)
    assert results.count("ok") == n_ok
    assert results.count("insufficient_balance") == attempts - n_ok
    assert i(sync.hget(keyspace.wallet(ACCT), "held")) == hold * n_ok
    assert i(sync.hget(keyspace.key_record(ACCT, KEY), "held")) == hold * n_ok
    assert sync.zcard(keyspace.holds(ACCT)) == n_ok


def check_parallel_monthly_limit(url: str, sync) -> None:
    """Waves of parallel admits and settles never push settled + held past the key's limit."""
    limit = 50 * TOMAN
    hold = 4 * TOMAN
    seed_account(sync, balance=10_000 * TOMAN)
    seed_key(sync, rpm=600, monthly_limit=limit)
    rng = random.Random(7)

    async def body(*ledgers):
        admitted = []
        for wave in range(6):
            res = await asyncio.gather(*(ledgers[j % len(ledgers)].admit(
                account_id=ACCT, key_id=KEY, model="m/a", hold_micro=hold, stream=False, free=False)
                for j in range(40)), return_exceptions=True)
            ok = [a for a in res if not isinstance(a, Exception)]
            errors = [e for e in res if isinstance(e, Exception)]
            assert all(isinstance(e, Rejected) and e.code == "key_monthly_limit_reached" for e in errors), \
                {repr(e) for e in errors}
            admitted.extend(ok)
            rec = await ledgers[0].client.hgetall(keyspace.key_record(ACCT, KEY))
            month = [k for k in rec if k.startswith(b"spent:")]
            spent = sum(int(rec[k]) for k in month)
            assert spent + int(rec.get(b"held", 0)) <= limit
            if wave == 0:
                assert len(ok) == limit // hold
            # settle half of the open ones below their hold, in parallel with new admits
            half, admitted = admitted[: len(admitted) // 2], admitted[len(admitted) // 2:]
            await asyncio.gather(*(ledgers[j % len(ledgers)].settle(
                ACCT, a.hold_id, key_id=KEY, model="m/a", cost_micro=rng.randint(0, hold),
                prompt_tokens=1, completion_tokens=1) for j, a in enumerate(half)))
        for a in admitted:
            await ledgers[0].release(ACCT, a.hold_id)

    run(url, body, clients=3)
    rec = h(sync, keyspace.key_record(ACCT, KEY))
    spent = sum(int(v) for k, v in rec.items() if k.startswith("spent:"))
    assert i(rec.get("held")) == 0
    assert 0 < spent <= limit


def check_parallel_streams(url: str, sync, attempts: int = 50) -> None:
    """Exactly 10 of 50 parallel stream admits (over two keys of one account) win."""
    seed_account(sync, balance=10_000 * TOMAN)
    seed_key(sync, key="k-a", rpm=600)
    seed_key(sync, key="k-b", rpm=600)

    async def body(*ledgers):
        return await asyncio.gather(*(outcome(ledgers[j % len(ledgers)].admit(
            account_id=ACCT, key_id=("k-a", "k-b")[j % 2], model="m/a", hold_micro=TOMAN, stream=True,
            free=False)) for j in range(attempts)))

    results = run(url, body, clients=4)
    assert results.count("ok") == 10
    assert results.count("too_many_concurrent_streams") == attempts - 10
    assert sync.zcard(keyspace.streams(ACCT)) == 10
    assert i(sync.hget(keyspace.wallet(ACCT), "held")) == 10 * TOMAN


def check_parallel_rpm(url: str, sync, rpm: int = 25, attempts: int = 120) -> None:
    """A burst of parallel admits against rpm: exactly rpm are counted and admitted."""
    seed_account(sync, balance=10_000 * TOMAN)
    seed_key(sync, rpm=rpm)

    async def body(*ledgers):
        return await asyncio.gather(*(outcome(ledgers[j % len(ledgers)].admit(
            account_id=ACCT, key_id=KEY, model="m/a", hold_micro=1, stream=False, free=False))
            for j in range(attempts)))

    results = run(url, body, clients=4)
    assert results.count("ok") == rpm
    assert results.count("rate_limit_exceeded") == attempts - rpm
    assert sync.zcard(keyspace.rpm(ACCT, KEY)) == rpm


def check_sliding_window(url: str, sync, rpm: int = 7, seed: int = 3) -> None:
    """Admits at random times over five minutes, several in flight at once: no 60 s window ever
    holds more than rpm admitted requests, and a request is refused only when the window is full."""
    seed_account(sync, balance=10_000 * TOMAN)
    seed_key(sync, rpm=rpm)
    rng = random.Random(seed)
    times = []
    t = T0
    while t < T0 + 300_000:
        t += rng.choice((0, 0, 5, 400, 2_000, 9_000, 21_000))
        times.append(t)

    async def body(*ledgers):
        accepted: list[int] = []
        j = 0
        while j < len(times):
            group = [x for x in times[j:j + 4] if x == times[j]]  # same instant: in parallel
            res = await asyncio.gather(*(outcome(ledgers[k % len(ledgers)].admit(
                account_id=ACCT, key_id=KEY, model="m/a", hold_micro=1, stream=False, free=False, now_ms=x))
                for k, x in enumerate(group)))
            in_window = sum(1 for a in accepted if a > group[0] - 60_000)
            expect_ok = min(len(group), max(0, rpm - in_window))
            assert res.count("ok") == expect_ok, (group[0], in_window, res)
            accepted.extend(x for x, o in zip(group, res) if o == "ok")
            j += len(group)
        return accepted

    accepted = run(url, body, clients=2)
    for a in accepted:
        assert sum(1 for b in accepted if a - 60_000 < b <= a) <= rpm
    assert len(accepted) > rpm  # the window slid


def check_retried_admit_is_idempotent(url: str, sync) -> None:
    """admit.lua run twice with one hold id (a client retry after a lost reply: the script ran,
    the client sends it again): the second run changes nothing and answers the first admission.
    Then one settle leaves nothing held and charges the wallet once."""
    seed_account(sync, balance=10 * TOMAN)
    seed_key(sync, rpm=600)

    async def body(L):
        real, replies = L._admit, []

        async def twice(client, keys, args):
            replies.append(await real(client, keys, args))
            replies.append(await real(client, keys, args))
            return replies[-1]

        L._admit = twice
        paid = await L.admit(account_id=ACCT, key_id=KEY, model="m/a", hold_micro=3 * TOMAN, stream=True,
                             free=False, now_ms=T0)
        free = await L.admit(account_id=ACCT, key_id=KEY, model="m/a", hold_micro=0, stream=False, free=True,
                             now_ms=T0 + 1_000)
        L._admit = real
        assert [int(x) for x in replies[0]] == [int(x) for x in replies[1]]
        assert [int(x) for x in replies[2]] == [int(x) for x in replies[3]]
        assert paid.hold_micro == 3 * TOMAN and paid.rate.remaining == 600 - 1
        assert free.rate.remaining == 600 - 2
        w = await L.client.hgetall(keyspace.wallet(ACCT))
        assert int(w[b"held"]) == 3 * TOMAN
        assert int(await L.client.hget(keyspace.key_record(ACCT, KEY), "held")) == 3 * TOMAN
        assert await L.client.zcard(keyspace.streams(ACCT)) == 1
        assert await L.client.zcard(keyspace.holds(ACCT)) == 2
        assert await L.client.zcard(keyspace.rpm(ACCT, KEY)) == 2
        day = (await L.client.hget(keyspace.hold(ACCT, free.hold_id), "day")).decode()
        assert int(await L.client.get(keyspace.free(ACCT, day))) == 1
        assert await L.settle(ACCT, paid.hold_id, key_id=KEY, model="m/a", cost_micro=2 * TOMAN,
                              prompt_tokens=1, completion_tokens=1)
        assert await L.release(ACCT, free.hold_id)

    run(url, body)
    assert i(sync.hget(keyspace.wallet(ACCT), "held")) == 0
    assert i(sync.hget(keyspace.wallet(ACCT), "balance")) == 8 * TOMAN
    rec = h(sync, keyspace.key_record(ACCT, KEY))
    assert i(rec.get("held")) == 0
    assert sum(int(v) for k, v in rec.items() if k.startswith("spent:")) == 2 * TOMAN
    assert sync.zcard(keyspace.holds(ACCT)) == 0 and sync.zcard(keyspace.streams(ACCT)) == 0

