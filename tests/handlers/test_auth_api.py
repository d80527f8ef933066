"""Authentication and the account-state endpoint over real HTTP against a running node,
and the auth cache's behaviour when an invalidation event races a load."""
import asyncio
import subprocess
import sys
import time
from decimal import Decimal

import httpx
import pytest
import redis

from tests.gateway import PEPPER, seed
from tests.procs import free_port, spawn, stop, wait_port
from tests.handlers.test_routes import assert_error
from upgate.services import accounts, keys
from upgate.store import connection as store, keyspace
from upgate.services.auth import Auth
from upgate.errors import GatewayError


def me(node, headers):
    return httpx.get(node.base + "/svc/me", headers=headers)


def test_me_fields_and_arithmetic(node, redis_url):
    key, account_id, key_id = seed(redis_url, balance="1234.5", phone="09121234567", name="ci", rpm=100,
                                   monthly_limit_micro=50_000_000, allowed_models=["mock/chat-1"])
    r = redis.Redis.from_url(redis_url)
    r.hset(keyspace.wallet(account_id), "held", 1_500_000)  # an open hold of 1.5 toman
    resp = me(node, {"Authorization": f"Bearer {key}"})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["user"]["id"] == account_id
    assert body["user"]["phone_masked"] != "09121234567" and body["user"]["phone_masked"].endswith("4567")
    assert body["key"] == {"name": "ci", "prefix": key[:10], "monthly_limit_toman": "50.000000",
                           "spent_this_month_toman": "0.000000", "rate_limit_rpm": 100,
                           "allowed_models": ["mock/chat-1"]}
    w = body["wallet"]
    assert w == {"balance_toman": "1234.500000", "held_toman": "1.500000", "available_toman": "1233.000000"}
    assert Decimal(w["available_toman"]) == Decimal(w["balance_toman"]) - Decimal(w["held_toman"])
    assert body["prices_updated_at"].endswith("Z")
    assert resp.headers["X-RateLimit-Limit"] == "100"
    assert resp.headers["X-RateLimit-Remaining"] == "100"  # /v1/svc/ is not counted
    assert int(resp.headers["X-RateLimit-Reset"]) >= int(time.time())


def test_x_api_key_header_and_authorization_wins(node, redis_url):
    key, _, _ = seed(redis_url)
    assert me(node, {"X-API-Key": key}).status_code == 200
    assert me(node, {"authorization": f"bearer {key}"}).status_code == 200
    bad = "sk-up-" + "A" * 40
    assert_error(me(node, {"Authorization": f"Bearer {bad}", "X-API-Key": key}), 401, "invalid_api_key")
    assert me(node, {"Authorization": f"Bearer {key}", "X-API-Key": bad}).status_code == 200


@pytest.mark.parametrize("headers", [
    {}, {"Authorization": "Bearer"}, {"Authorization": "Basic abc"}, {"Authorization": "Bearer sk-up-short"},
    {"Authorization": "Bearer sk-or-" + "a" * 40}, {"Authorization": "Bearer sk-up-" + "a" * 40},
    {"X-API-Key": ("sk-up-" + "é" * 40).encode()}, {"Authorization": "Bearer " + "sk-up-" + "a" * 4000},
    {"Authorization": "Bearer  sk-up-" + "a" * 39}, {"X-API-Key": "sk-up-" + "a" * 39 + "!"},
])
def test_every_401_looks_the_same(node, redis_url, headers):
    err = assert_error(me(node, headers), 401, "invalid_api_key")
    assert err["message"] == "The API key is invalid, revoked or expired."


def test_expired_revoked_and_suspended(node, redis_url):
    client = store.connect_sync(redis_url)
    key, account_id, key_id = seed(redis_url, expires_at_ms=int(time.time() * 1000) + 1500)
    assert me(node, {"X-API-Key": key}).status_code == 200
    time.sleep(1.6)
    assert_error(me(node, {"X-API-Key": key}), 401, "invalid_api_key")

    key2, account2, key_id2 = seed(redis_url, phone="09120000002")
    assert me(node, {"X-API-Key": key2}).status_code == 200
    accounts.suspend(client, account2)
    assert_error(me(node, {"X-API-Key": key2}), 403, "account_suspended")
    accounts.resume(client, account2)
    assert me(node, {"X-API-Key": key2}).status_code == 200
    keys.revoke_key(client, key_id2)
    assert_error(me(node, {"X-API-Key": key2}), 401, "invalid_api_key")


def test_revocation_reaches_a_second_gateway_process_on_its_next_request(redis_url, make_node, tmp_path):
    """Two nodes: an in-process one and a real `upgate serve` subprocess. Both have the key
    cached; a revoke is seen by both on the very next request."""
    node = make_node()
    key, account_id, key_id = seed(redis_url)
    providers = tmp_path / "providers.toml"
    providers.write_text('[providers.mock]\nbase_url = "http://127.0.0.1:9/v1"\n'
                         'api_key_env = "MOCK_KEY"\ndialect = "openai"\n')
    port = free_port()
    proc = spawn([sys.executable, "-m", "upgate.cli", "serve", "--port", str(port)],
                 env={"UPGATE_REDIS_URL": redis_url, "UPGATE_KEY_PEPPER": PEPPER,
                      "UPGATE_PROVIDERS": str(providers), "MOCK_KEY": "x"},
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port, proc=proc)
        other = f"http://127.0.0.1:{port}/v1/svc/me"
        for _ in range(3):  # warm both caches
            assert httpx.get(other, headers={"X-API-Key": key}).status_code == 200
            assert me(node, {"X-API-Key": key}).status_code == 200
        keys.revoke_key(store.connect_sync(redis_url), key_id)
        assert httpx.get(other, headers={"X-API-Key": key}).status_code == 401
        assert me(node, {"X-API-Key": key}).status_code == 401
    finally:
        assert stop(proc) == 0


# ---- the auth cache against an event handled while a load is waiting for Redis ---------------------

class GatedRedis:
    """A real redis.asyncio client whose HGETALL of one chosen hash reads the record, then
    waits at a gate before answering: the load has its (soon stale) record in hand while the
    test changes the record and delivers the event, exactly the race's interleaving."""

    def __init__(self, real):
        self.real = real
        self.hold_name: str | None = None
        self.reached = asyncio.Event()
        self.gate = asyncio.Event()
        self.hgetalls: list[str] = []

    def __getattr__(self, name):
        return getattr(self.real, name)

    async def hgetall(self, name):
        self.hgetalls.append(name)
        raw = await self.real.hgetall(name)
        if name == self.hold_name:
            self.hold_name = None  # once
            self.reached.set()
            await self.gate.wait()
        return raw


def run_race(redis_url, key, hold_name, change, event, check):
    """authenticate(key) with the HGETALL of `hold_name` held at the gate; meanwhile `change()`
    (the admin write) runs and `event(auth)` is delivered; then the gate opens. `check(auth,
    first, client)` sees the first request's result."""
    async def scenario():
        real = store.connect_async(redis_url)
        client = GatedRedis(real)
        auth = Auth(client, PEPPER)
        try:
            client.hold_name = hold_name
            task = asyncio.ensure_future(auth.authenticate({"X-API-Key": key}))
            await asyncio.wait_for(client.reached.wait(), 5)
            change()
            event(auth)
            client.gate.set()
            first = await asyncio.wait_for(task, 5)
            await check(auth, first, client)
        finally:
            await real.aclose()
    asyncio.run(scenario())


def test_a_key_loaded_across_an_event_is_returned_but_not_cached(redis_url):
    db = store.connect_sync(redis_url)
    key, account_id, key_id = seed(redis_url, allowed_models=["mock/chat-1"])
    digest = keys.digest(key, PEPPER)

    async def check(auth, first, client):
        info, _ = first
        assert info.allowed_models == {"mock/chat-1"}  # read before the change: served once
        assert digest not in auth._keys  # ... but not cached
        again, _ = await auth.authenticate({"X-API-Key": key})
        assert again.allowed_models == {"mock/chat-big"}  # the next request loads afresh
        n = len(client.hgetalls)
        third, _ = await auth.authenticate({"X-API-Key": key})  # now it is cached
        assert third.allowed_models == {"mock/chat-big"} and len(client.hgetalls) == n

    run_race(redis_url, key, keyspace.key_record(account_id, key_id),
             lambda: keys.update_key(db, key_id, allowed_models=["mock/chat-big"]),
             lambda auth: auth.on_event({"t": "key", "hash": digest}), check)


def test_an_account_loaded_across_an_event_is_returned_but_not_cached(redis_url):
    db = store.connect_sync(redis_url)
    key, account_id, _ = seed(redis_url)

    async def check(auth, first, client):
        _, account = first
        assert account.suspended is False  # read before the suspension
        assert account_id not in auth._accounts
        with pytest.raises(GatewayError) as exc:
            await auth.authenticate({"X-API-Key": key})
        assert exc.value.code == "account_suspended"

    run_race(redis_url, key, keyspace.wallet(account_id), lambda: accounts.suspend(db, account_id),
             lambda auth: auth.on_event({"t": "account", "id": account_id}), check)


def test_a_flush_during_a_load_also_keeps_it_out_of_the_cache(redis_url):
    db = store.connect_sync(redis_url)
    key, account_id, key_id = seed(redis_url, rpm=10)

    async def check(auth, first, client):
        assert first[0].rpm == 10 and not auth._keys  # the account loads after the flush: cached
        assert (await auth.authenticate({"X-API-Key": key}))[0].rpm == 20

    run_race(redis_url, key, keyspace.key_record(account_id, key_id),
             lambda: keys.update_key(db, key_id, rpm=20), lambda auth: auth.flush(), check)


def test_without_an_event_a_load_is_cached(redis_url):
    key, account_id, key_id = seed(redis_url)

    async def check(auth, first, client):
        assert keys.digest(key, PEPPER) in auth._keys and account_id in auth._accounts
        n = len(client.hgetalls)
        await auth.authenticate({"X-API-Key": key})
        assert len(client.hgetalls) == n  # served from the cache

    run_race(redis_url, key, keyspace.key_record(account_id, key_id), lambda: None, lambda auth: None, check)


def test_an_unrelated_event_type_does_not_block_caching(redis_url):
    key, account_id, key_id = seed(redis_url)

    async def check(auth, first, client):
        assert keys.digest(key, PEPPER) in auth._keys

    run_race(redis_url, key, keyspace.key_record(account_id, key_id), lambda: None,
             lambda auth: auth.on_event({"t": "catalog", "version": "9"}), check)


def test_failed_key_checks_are_throttled_per_address(node, redis_url):
    """Past 30 failed key checks in a minute an address gets 429 with Retry-After, without a
    lookup; a key the node already knows still passes (clients behind one proxy share it)."""
    from upgate.services.auth import FAILS_PER_WINDOW

    key, _, _ = seed(redis_url, balance="1000")
    good = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=node.base, timeout=30) as x:
        assert x.get("/svc/me", headers=good).status_code == 200  # now in the node's cache
        for i in range(FAILS_PER_WINDOW):
            bad = {"Authorization": "Bearer sk-up-" + f"{i:040d}"}
            assert x.get("/svc/me", headers=bad).status_code == 401
        throttled = x.get("/svc/me", headers={"Authorization": "Bearer sk-up-" + "Z" * 40})
        assert throttled.status_code == 429
        assert 1 <= int(throttled.headers["Retry-After"]) <= 60
        assert throttled.json()["error"]["code"] == "rate_limit_exceeded"
        assert x.get("/svc/me", headers=good).status_code == 200


def test_failed_key_checks_count_the_client_a_trusted_proxy_names(make_node, redis_url):
    """Behind a proxy in UPGATE_TRUSTED_PROXIES the throttle counts the X-Forwarded-For client,
    so one client's failures do not lock out the others behind the same proxy; a node that
    trusts no proxy ignores the header (anyone could write it)."""
    from upgate.services.auth import FAILS_PER_WINDOW

    def fail_from(x, client: str, n: int) -> None:
        for i in range(n):
            bad = {"Authorization": "Bearer sk-up-" + f"{i:040d}", "X-Forwarded-For": client}
            assert x.get("/svc/me", headers=bad).status_code == 401

    unknown = {"Authorization": "Bearer sk-up-" + "Z" * 40}
    trusting = make_node(trusted_proxies="127.0.0.1")
    with httpx.Client(base_url=trusting.base, timeout=30) as x:
        fail_from(x, "198.51.100.7", FAILS_PER_WINDOW)
        assert x.get("/svc/me", headers={**unknown, "X-Forwarded-For": "198.51.100.7"}).status_code == 429
        assert x.get("/svc/me", headers={**unknown, "X-Forwarded-For": "198.51.100.8"}).status_code == 401
    plain = make_node()
    with httpx.Client(base_url=plain.base, timeout=30) as x:
        fail_from(x, "198.51.100.7", FAILS_PER_WINDOW)
        assert x.get("/svc/me", headers={**unknown, "X-Forwarded-For": "198.51.100.8"}).status_code == 429
