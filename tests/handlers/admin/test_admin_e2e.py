"""The operator's flow end to end: `upgate-admin` (Click's CliRunner on the real command tree,
against the private Redis) changes accounts and keys, and gateway nodes — an in-process node,
then two `upgate serve` subprocesses — answer the very next request accordingly.

The multi-node checks use changes only the auth cache could miss (allowed_models, suspension):
/v1/svc/me and admit.lua re-read the key record, so a revocation alone would not prove that
pub/sub invalidation reached the node."""
from __future__ import annotations

import json

import httpx
import pytest
import redis
from click.testing import CliRunner

from admin_cli.main import cli
from tests.gateway import PEPPER, load_catalog
from tests.load_kit import Gateway, wait_for
from upgate.store import keyspace

HELLO = [{"role": "user", "content": "Hello there, gateway!"}]

MESSAGES = {
    "invalid_api_key": "The API key is invalid, revoked or expired.",
    "account_suspended": "This account is suspended.",
    "model_not_allowed": "This key is not allowed to use the model {model}.",
}


@pytest.fixture
def admin(redis_url):
    """`upgate-admin ARGS --json` → the parsed JSON object (exit code 0 asserted)."""
    def run(*args: str) -> dict:
        res = CliRunner().invoke(cli, [*args, "--json"], catch_exceptions=False,
                                 env={"UPGATE_REDIS_URL": redis_url, "UPGATE_KEY_PEPPER": PEPPER,
                                      "UPGATE_INSECURE_DEV": None, "COLUMNS": "200"})
        assert res.exit_code == 0, (args, res.stdout, res.stderr)
        return json.loads(res.stdout)
    return run


def chat(base: str, key: str, model: str = "mock/chat-1") -> httpx.Response:
    return httpx.post(base + "/chat/completions", headers={"Authorization": f"Bearer {key}"},
                      json={"model": model, "messages": HELLO, "max_tokens": 8}, timeout=30)


def me(base: str, key: str) -> httpx.Response:
    return httpx.get(base + "/svc/me", headers={"X-API-Key": key}, timeout=30)


def assert_ok(resp: httpx.Response) -> None:
    assert resp.status_code == 200, resp.text
    assert resp.json()["object"] == "chat.completion"
    assert resp.headers["X-Svc-Request-Id"].startswith("req_")


def assert_final_error(resp: httpx.Response, status: int, code: str, **fmt) -> None:
    """The exact error shape of a final (not retryable) error."""
    assert resp.status_code == status, resp.text
    assert resp.json() == {"error": {"message": MESSAGES[code].format(**fmt), "type": code,
                                     "code": code, "param": None}}
    assert resp.headers["x-should-retry"] == "false"
    assert "Retry-After" not in resp.headers
    assert resp.headers["Content-Type"].startswith("application/json")
    assert resp.headers["X-Svc-Request-Id"].startswith("req_")


def new_account_and_key(admin, phone: str = "09121234567") -> tuple[str, str, str]:
    account_id = admin("account", "create", "--phone", phone, "--balance", "1000")["account_id"]
    created = admin("key", "create", account_id, "--name", "e2e")
    assert created["key"].startswith("sk-up-") and created["prefix"] == created["key"][:len(created["prefix"])]
    return account_id, created["key_id"], created["key"]


def test_operator_flow_against_a_gateway_node(node, admin):
    account_id, key_id, key = new_account_and_key(admin)
    assert_ok(chat(node.base, key))

    admin("key", "update", key_id, "--allowed-models", "mock/chat-big")
    assert_final_error(chat(node.base, key), 403, "model_not_allowed", model="mock/chat-1")
    assert_ok(chat(node.base, key, "mock/chat-big"))

    admin("account", "suspend", account_id)
    assert_final_error(me(node.base, key), 403, "account_suspended")
    assert_final_error(chat(node.base, key, "mock/chat-big"), 403, "account_suspended")
    admin("account", "resume", account_id)
    assert me(node.base, key).status_code == 200
    assert_ok(chat(node.base, key, "mock/chat-big"))

    admin("key", "update", key_id, "--all-models")
    assert_ok(chat(node.base, key))

    admin("key", "revoke", key_id)
    assert_final_error(chat(node.base, key), 401, "invalid_api_key")
    assert_final_error(me(node.base, key), 401, "invalid_api_key")
    listed = admin("key", "list", account_id)
    assert [k["state"] for k in listed["keys"]] == ["revoked"]


@pytest.fixture
def two_gateways(redis_url, mock, tmp_path):
    """Two `upgate serve` processes on the private Redis, both subscribed to the event channel."""
    load_catalog(redis_url)
    gws = []
    try:
        for name in ("gw0", "gw1"):
            gws.append(Gateway(redis_url, mock.base_url, tmp_path, name))
        for gw in gws:
            gw.wait_ready()
        r = redis.Redis.from_url(redis_url)
        wait_for(lambda: dict(r.pubsub_numsub(keyspace.CHANNEL)).get(keyspace.CHANNEL.encode(), 0) >= 2,
                 10, "both gateways to subscribe to the event channel")
        yield gws
    finally:
        for gw in gws:
            gw.stop()


def test_changes_reach_two_gateway_processes_on_the_next_request(two_gateways, admin):
    gw0, gw1 = two_gateways
    account_id, key_id, key = new_account_and_key(admin)
    for _ in range(2):  # both nodes now hold the key and the account in their auth cache
        for gw in (gw0, gw1):
            assert_ok(chat(gw.base, key))

    # allowed_models is read only from the cache: a stale entry would still let mock/chat-1 in
    admin("key", "update", key_id, "--allowed-models", "mock/chat-big")
    assert_final_error(chat(gw1.base, key), 403, "model_not_allowed", model="mock/chat-1")
    assert_final_error(chat(gw0.base, key), 403, "model_not_allowed", model="mock/chat-1")
    for gw in (gw1, gw0):  # re-cached with the new setting
        assert_ok(chat(gw.base, key, "mock/chat-big"))

    # suspension: /v1/svc/me re-reads the key record but takes `suspended` from the cached
    # account (admit.lua would catch it on a chat request anyway), so ask /v1/svc/me first
    for gw in (gw0, gw1):
        assert me(gw.base, key).status_code == 200
    admin("account", "suspend", account_id)
    assert_final_error(me(gw1.base, key), 403, "account_suspended")
    assert_final_error(me(gw0.base, key), 403, "account_suspended")
    assert_final_error(chat(gw1.base, key, "mock/chat-big"), 403, "account_suspended")
    admin("account", "resume", account_id)
    assert me(gw1.base, key).status_code == 200
    assert_ok(chat(gw1.base, key, "mock/chat-big"))
    assert_ok(chat(gw0.base, key, "mock/chat-big"))

    admin("key", "revoke", key_id)
    assert_final_error(chat(gw1.base, key, "mock/chat-big"), 401, "invalid_api_key")
    assert_final_error(chat(gw0.base, key, "mock/chat-big"), 401, "invalid_api_key")

    for gw in two_gateways:  # the access logs never carry the full key
        assert key.encode() not in gw.logs()
