"""Cool-down (lua/cooldown.lua and the ledger's in-memory map fed by pub/sub), and the count
of Redis commands on the hot path (INFO commandstats), against a private real redis-server."""
from __future__ import annotations

import asyncio

import orjson

from tests.ledger_kit import ACCT, KEY, T0, TOMAN, h, run, seed_account, seed_key, settings
from upgate.store import keyspace
from upgate.billing.ledger import Ledger

M = "acme/chat-1"


def commands(r) -> dict[str, int]:
    """Calls per command since the last CONFIG RESETSTAT, leaving out the test's own INFO/CONFIG."""
    stats = r.info("commandstats")
    return {name[len("cmdstat_"):]: v["calls"] for name, v in stats.items()
            if not name.startswith(("cmdstat_info", "cmdstat_config"))}


def test_third_strike_in_a_row_makes_the_model_cold(redis_url, r):
    async def body(L):
        got = [await L.cooldown_strike(M, now_ms=T0 + n) for n in range(3)]
        left = L.cold_until(M)
        during = await L.cooldown_strike(M, now_ms=T0 + 10_000)  # ignored while cold
        state = h(r, keyspace.cooldown(M))
        after = [await L.cooldown_strike(M, now_ms=T0 + 40_000 + n) for n in range(3)]
        return got, left, during, state, after

    got, left, during, state, after = run(redis_url, body, settings(cooldown_s=30))
    assert got == [None, None, T0 + 2 + 30_000]
    assert 29 < left <= 30
    assert during is None
    assert state == {"strikes": "0", "until_ms": str(T0 + 30_002)}
    assert after == [None, None, T0 + 40_002 + 30_000]  # a new run after the cold spell
    assert r.pttl(keyspace.cooldown(M)) > 0


def test_a_success_resets_the_run_of_strikes(redis_url, r):
    seed_account(r)
    seed_key(r)

    async def body(L):
        await L.cooldown_strike(M)
        await L.cooldown_strike(M)
        a = await L.admit(account_id=ACCT, key_id=KEY, model=M, hold_micro=1, stream=False, free=False)
        await L.settle(ACCT, a.hold_id, key_id=KEY, model=M, cost_micro=1, prompt_tokens=1,
                       completion_tokens=1, cooldown_reset=M)
        after_reset = L.strikes(M)
        third = await L.cooldown_strike(M)
        return after_reset, third, L.cold_until(M)

    after_reset, third, cold = run(redis_url, body)
    assert (after_reset, third, cold) == (0, None, None)
    assert h(r, keyspace.cooldown(M))["strikes"] == "1"


def test_release_with_a_strike_counts_toward_cool_down(redis_url, r):
    seed_account(r)
    seed_key(r, rpm=600)

    async def body(L):
        for _ in range(3):
            a = await L.admit(account_id=ACCT, key_id=KEY, model=M, hold_micro=1, stream=False, free=False)
            assert await L.release(ACCT, a.hold_id, strike=M)
        return L.cold_until(M)

    assert 25 < run(redis_url, body) <= 30


def test_every_node_learns_cool_downs_from_pub_sub_and_reload(redis_url, r):
    async def body(A, B):
        pubsub = B.client.pubsub()
        await pubsub.subscribe(keyspace.CHANNEL)
        await pubsub.get_message(timeout=1)  # the subscribe confirmation
        for _ in range(3):
            await A.cooldown_strike(M)
        seen = []
        for _ in range(30):
            msg = await pubsub.get_message(ignore_subscribe_messages=True, timeout=0.2)
            if msg:
                event = orjson.loads(msg["data"])
                seen.append(event)
                B.on_event(event)
            if len(seen) == 3:
                break
        await pubsub.aclose()
        fresh = Ledger(A.client, settings())
        await fresh.reload_cooldowns()
        return seen, B.cold_until(M), fresh.cold_until(M)

    seen, b_cold, fresh_cold = run(redis_url, body, clients=2)
    assert [e["strikes"] for e in seen] == [1, 2, 0]
    assert all(e["t"] == "cooldown" and e["model"] == M for e in seen)
    assert seen[2]["until_ms"] - seen[2]["now_ms"] == 30_000
    assert 29 < b_cold <= 30 and 29 < fresh_cold <= 30


def test_on_event_ignores_other_messages_and_tracks_strikes():
    L = Ledger(None, settings())
    L.on_event({"t": "key", "hash": "x"})
    L.on_event({"t": "cooldown", "model": M, "strikes": "x"})
    assert (L.strikes(M), L.cold_until(M)) == (0, None)
    L.on_event({"t": "cooldown", "model": M, "strikes": 2, "until_ms": 0, "now_ms": 5})
    assert L.strikes(M) == 2
    L.on_event({"t": "cooldown", "model": M, "strikes": 0, "until_ms": 1_500, "now_ms": 1_000})
    assert L.strikes(M) == 0 and 0 < L.cold_until(M) <= 0.5
    L.on_event({"t": "cooldown", "model": M, "strikes": 0, "until_ms": 0, "now_ms": 2_000})
    assert L.cold_until(M) is None


def test_reload_forgets_what_the_store_no_longer_has(redis_url, r):
    async def body(L):
        await L.cooldown_strike(M)
        assert L.strikes(M) == 1
        r.delete(keyspace.cooldown(M))
        await L.reload_cooldowns()
        return L.strikes(M)

    assert run(redis_url, body) == 0


# ---- round trips on the hot path ----------------------------------------------------------------

async def _client_commands(L, redis_url, action) -> tuple[list[str], dict[str, int]]:
    """The commands the ledger's client sent while `action` ran (MONITOR, leaving out what the
    scripts ran inside Redis and a new connection's HELLO), and INFO commandstats' script calls."""
    import redis.asyncio as aioredis

    watcher = aioredis.Redis.from_url(redis_url)
    seen: list[str] = []
    async with watcher.monitor() as m:
        async def listen():
            while True:
                info = await m.next_command()
                if info["client_type"] != "lua" and not info["command"].upper().startswith(("INFO", "CONFIG", "PING", "HELLO")):
                    seen.append(info["command"].split()[0].upper())

        task = asyncio.create_task(listen())
        await asyncio.sleep(0.05)
        await L.client.config_resetstat()
        await action()
        await L.client.ping()  # a marker that everything before it was seen
        await asyncio.sleep(0.1)
        task.cancel()
    stats = await L.client.info("commandstats")
    await watcher.aclose()
    return seen, {k: v["calls"] for k, v in stats.items() if k.startswith(("cmdstat_eval", "cmdstat_fcall"))}


def test_admit_plus_settle_is_exactly_two_redis_commands(redis_url, r):
    seed_account(r, balance=10 * TOMAN)
    seed_key(r)

    async def body(L):
        async def warm():
            w = await L.admit(account_id=ACCT, key_id=KEY, model=M, hold_micro=TOMAN, stream=True, free=False)
            await L.settle(ACCT, w.hold_id, key_id=KEY, model=M, cost_micro=1, prompt_tokens=1,
                           completion_tokens=1)
        await warm()  # scripts loaded, connection open

        async def hot():
            a = await L.admit(account_id=ACCT, key_id=KEY, model=M, hold_micro=TOMAN, stream=True, free=False)
            await L.settle(ACCT, a.hold_id, key_id=KEY, model=M, cost_micro=7, prompt_tokens=1,
                           completion_tokens=1, cooldown_reset=M)  # no strikes known: no reset sent

        plain = await _client_commands(L, redis_url, hot)
        await L.cooldown_strike(M)
        with_reset = await _client_commands(L, redis_url, hot)  # the reset rides with settle
        return plain, with_reset

    plain, with_reset = run(redis_url, body)
    assert plain == (["FCALL", "FCALL"], {"cmdstat_fcall": 2})
    assert with_reset == (["FCALL", "FCALL", "FCALL"], {"cmdstat_fcall": 3})
    assert h(r, keyspace.cooldown(M))["strikes"] == "0"
