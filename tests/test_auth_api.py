"""Authentication and the account-state endpoint over real HTTP against a running node."""
import subprocess
import sys
import time
from decimal import Decimal

import httpx
import pytest
import redis

from tests.gateway import PEPPER, seed
from tests.procs import free_port, spawn, stop, wait_port
from tests.test_routes import assert_error
from upgate import accounts, keys, keyspace, store


def me(node, headers):
    return httpx.get(node.base + "/svc/me", headers=headers)


def test_me_fields_and_arithmetic(node, redis_url):
    key, account_id, key_id = seed(redis_url, balance="1234.5", name="ci", rpm=100,
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
