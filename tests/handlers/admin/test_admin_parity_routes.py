"""The management API's routes added for parity (OPERATORS.md): GET /admin/v1/audit, POST
/admin/v1/models/sync (422 price_change_too_large over the guard), GET /admin/v1/keys?prefix=,
POST /admin/v1/webhooks/test — against a running node and its private redis-server."""
from __future__ import annotations

import orjson
import pytest

from tests.admin_kit import Admin, assert_error, make_token
from tests.console.test_console_parity_browser import source_url  # noqa: F401  (the fixture)
from tests.gateway import seed
from upgate.services import admin_log
from upgate.store import connection as store, keyspace


@pytest.fixture
def api(node, redis_url):
    return Admin(node, make_token(redis_url))


def test_audit_answers_200_whatever_it_finds(api, redis_url):
    acct = api.account(balance="10")["id"]
    clean = api.get("/audit").json()
    assert clean["accounts"] == 1 and clean["mismatches"] == []
    store.connect_sync(redis_url).hincrby(keyspace.wallet(acct), "balance", 5)  # behind the scripts' back
    resp = api.get("/audit?deep=true")
    assert resp.status_code == 200
    assert resp.json()["mismatches"] == [
        {"account_id": acct, "balance_toman": "10.000005", "expected_toman": "10.000000"}]
    assert_error(api.get("/audit?deep=maybe"), 400, "invalid_request", "deep")


def test_price_sync_plans_applies_and_refuses_a_change_over_the_guard(api, redis_url, source_url):  # noqa: F811
    body = {"source": source_url, "provider": "mock", "usd_toman": "100000", "dry_run": True}
    plan = api.post("/models/sync", json=body)
    assert plan.status_code == 200, plan.text
    assert set(plan.json()) == {"version", "changed", "added", "removed", "unchanged"}
    version = api.get("/models").json()["version"]
    assert plan.json()["version"] == version  # a dry run wrote nothing
    over = api.post("/models/sync", json={**body, "dry_run": False, "usd_toman": "900000"})
    err = over.json()["error"]
    assert over.status_code == 422 and err["code"] == "price_change_too_large" and err["param"] == "max_change"
    assert set(err["svc"]) == {"version", "changed", "added", "removed", "unchanged"}
    assert api.get("/models").json()["version"] == version  # refused whole
    done = api.post("/models/sync", json={**body, "dry_run": False, "usd_toman": "900000", "yes": True})
    assert done.status_code == 200 and done.json()["version"] != version
    entry = admin_log.read(store.connect_sync(redis_url), 1)[0]
    assert entry["action"] == "models.sync" and entry["detail"]["yes"] is True
    assert entry["detail"]["source"] == source_url  # no query or credentials to drop here
    # a file on the node is never read for a remote caller
    assert_error(api.post("/models/sync", json={**body, "source": "/etc/passwd"}), 400, "invalid_request", "source")
    assert_error(api.post("/models/sync", json={"provider": "mock"}), 400, "invalid_request", "source")


def test_keys_found_by_prefix(api, redis_url):
    key, acct, kid = seed(redis_url)
    found = api.get("/keys", params={"prefix": key[:10]}).json()["data"]
    assert [k["key_id"] for k in found] == [kid] and found[0] == api.get(f"/keys/{kid}").json()
    assert api.get("/keys", params={"prefix": f"{key[:10]}…{key[-4:]}"}).json()["data"] == found
    other = "zzzz" if key[-4:] != "zzzz" else "yyyy"
    assert api.get("/keys", params={"prefix": f"{key[:10]}…{other}"}).json()["data"] == []
    assert_error(api.get("/keys", params={"prefix": key}), 400, "invalid_request", "prefix")  # a full key
    assert_error(api.get("/keys"), 400, "invalid_request", "prefix")
    assert key not in orjson.dumps(found).decode()


def test_webhook_test_when_off_and_on(api, make_node, redis_url, receiver):
    err = assert_error(api.post("/webhooks/test"), 400, "invalid_request")
    assert "UPGATE_WEBHOOK_URL" in err["message"]
    on = Admin(make_node(webhook_url=receiver.url, webhook_secret="s"), api.token)
    out = on.post("/webhooks/test").json()
    assert out["ok"] is True and out["status"] == 200 and out["event_id"].startswith("evt_")
