"""The ledger on a local 3-master Redis Cluster: conservation, the reaper's per-slot index
shards, cross-slot pipelines (settle + cool-down) and the usage fetch. The concurrency suite
runs here too, from tests/billing/test_ledger_concurrency.py."""
from __future__ import annotations

import asyncio
import uuid

import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from tests.ledger_kit import KEY, T0, TOMAN, h, run, seed_account, seed_key, settings
from tests.billing.test_ledger_conservation import check as conservation, free_quota, rpm, step
from upgate.services import usage
from upgate.store import connection as store, keyspace

pytestmark = pytest.mark.cluster


@pytest.fixture
def sync(cluster_url):
    client = store.connect_sync(cluster_url)
    yield client
    client.close()


def test_cluster_client_is_sharded(cluster_url):
    async def body(L):
        return L.sharded

    assert run(cluster_url, body) is True


@hsettings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(step, min_size=3, max_size=60), initial=st.integers(0, 30 * TOMAN), quota=free_quota,
       rpms=st.tuples(rpm, rpm))
def test_conservation_under_any_mix(cluster_url, sync, ops, initial, quota, rpms):
    conservation(cluster_url, sync, ops, initial, sharded=True, quota=quota, rpms=rpms)


def test_reaper_finds_expired_holds_in_every_slot(cluster_url, sync):
    accounts: list[str] = []
    while len(accounts) < 12:  # twelve accounts in twelve different slots (random ids could share one)
        a = str(uuid.uuid4())
        if keyspace.slot(a) not in {keyspace.slot(x) for x in accounts}:
            accounts.append(a)
    for a in accounts:
        seed_account(sync, a, balance=100 * TOMAN)
        seed_key(sync, a, KEY, rpm=600)
    slots = {keyspace.slot(a) for a in accounts}
    assert len(slots) == len(accounts)

    async def body(*ledgers):
        for n, a in enumerate(accounts):
            for j in range(3):
                await ledgers[n % 2].admit(account_id=a, key_id=KEY, model="m/a", hold_micro=TOMAN,
                                           stream=j == 0, free=False, now_ms=T0 + n)
        early = await ledgers[0].reap(now_ms=T0 + 29_999)
        counts = await asyncio.gather(*(ledgers[j % 3].reap(now_ms=T0 + 31_000) for j in range(4)))
        return early, sum(counts)

    assert run(cluster_url, body, clients=3) == (0, 36)
    for a in accounts:
        assert h(sync, keyspace.wallet(a))["held"] == "0"
        assert sync.zcard(keyspace.streams(a)) == 0
        assert sync.zcard(keyspace.reap_index(a, True)) == 0


def test_run_reaper_on_a_cluster_sweeps_with_one_node_a_tick(cluster_url, sync):
    acct = str(uuid.uuid4())
    seed_account(sync, acct, balance=10 * TOMAN)
    seed_key(sync, acct, KEY)

    async def body(A, B):
        await A.admit(account_id=acct, key_id=KEY, model="m/a", hold_micro=TOMAN, stream=True, free=False)
        tasks = [asyncio.create_task(L.run_reaper(0.1)) for L in (A, B)]
        for _ in range(100):
            await asyncio.sleep(0.05)
            if sync.zcard(keyspace.holds(acct)) == 0:
                break
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    run(cluster_url, body, settings(lease_s=0.3), clients=2)
    assert h(sync, keyspace.wallet(acct))["held"] == "0"
    assert sync.zcard(keyspace.streams(acct)) == 0


def test_settle_and_cooldown_pipeline_across_slots(cluster_url, sync):
    acct = str(uuid.uuid4())
    model = "acme/chat-1"
    seed_account(sync, acct, balance=10 * TOMAN)
    seed_key(sync, acct, KEY, rpm=600)
    assert keyspace.slot(acct) != sync.keyslot(keyspace.cooldown(model))

    async def body(L):
        a = await L.admit(account_id=acct, key_id=KEY, model=model, hold_micro=TOMAN, stream=False, free=False)
        b = await L.admit(account_id=acct, key_id=KEY, model=model, hold_micro=TOMAN, stream=False, free=False)
        assert await L.release(acct, a.hold_id, strike=model)
        struck = L.strikes(model)
        assert await L.settle(acct, b.hold_id, key_id=KEY, model=model, cost_micro=5, prompt_tokens=1,
                              completion_tokens=1, cooldown_reset=model)
        await L.cooldown_strike(model)
        fresh = type(L)(L.client, L.settings)
        await fresh.reload_cooldowns()
        peek = await L.rate_peek(acct, KEY)
        return struck, L.strikes(model), fresh.strikes(model), peek

    struck, after, reloaded, peek = run(cluster_url, body)
    assert (struck, after, reloaded) == (1, 1, 1)
    assert peek.limit == 600 and peek.remaining == 598
    assert h(sync, keyspace.wallet(acct))["balance"] == str(10 * TOMAN - 5)


def test_usage_fetch_on_a_cluster(cluster_url, sync):
    acct = str(uuid.uuid4())
    seed_account(sync, acct)
    seed_key(sync, acct, KEY)

    async def body(L):
        a = await L.admit(account_id=acct, key_id=KEY, model="m/a", hold_micro=TOMAN, stream=False, free=False,
                          now_ms=T0)
        await L.settle(acct, a.hold_id, key_id=KEY, model="m/a", cost_micro=2_500_000, prompt_tokens=3,
                       completion_tokens=4)
        from upgate.billing import jalali
        return await usage.afetch(L.client, acct, [jalali.day_key(T0 / 1000), "1400-01-01"])

    days = run(cluster_url, body)
    report = usage.report(days, "model")
    assert report["rows"] == [{"model": "m/a", "requests": 1, "prompt_tokens": 3, "cached_tokens": 0,
                               "completion_tokens": 4, "cost_toman": "2.500000"}]
    assert usage.report(usage.fetch(sync, acct, list(days)), "key")["totals"]["cost_toman"] == "2.500000"


def test_shard_scan_matches_reading_every_shard(cluster_url, sync):
    accounts = [str(uuid.uuid4()) for _ in range(20)]
    for n, a in enumerate(accounts):
        sync.zadd(keyspace.reap_index(a, True), {a: T0 + n * 1000})
    for node in sync.get_primaries():  # no functions anywhere: the per-node scan loads them
        sync.execute_command("FUNCTION", "FLUSH", target_nodes=node)

    async def body(L):
        fast = await L._scan_shards(T0 + 9_500)
        slow = await L._read_shards(T0 + 9_500)
        return fast, slow

    fast, slow = run(cluster_url, body)
    assert sorted(fast) == sorted(slow)
    assert sorted(a for a, _ in fast) == sorted(accounts[:10])
    assert all(index == keyspace.reap_index(a, True) for a, index in fast)
