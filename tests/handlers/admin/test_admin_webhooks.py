"""GET /admin/v1/webhooks/failed through a running node: the failed deliveries the CLI lists,
behind an admin token (read-only tokens may read them)."""
from __future__ import annotations

import orjson
import pytest

from tests.admin_kit import Admin, assert_error, make_token
from upgate.store import connection as store, keyspace


@pytest.fixture
def api(node, redis_url):
    return Admin(node, make_token(redis_url, read_only=True))


def test_failed_deliveries_are_listed_newest_first(api, redis_url):
    client = store.connect_sync(redis_url)
    for i in range(3):  # as lua/webhook_finish.lua records them
        client.lpush(keyspace.WEBHOOK_FAILED, orjson.dumps({
            "event": {"id": f"evt_{i}", "type": "account.suspended", "created": 1, "data": {"account_id": "a"}},
            "attempts": 9, "first_attempt_at": "2026-11-22T10:00:00Z", "last_attempt_at": "2026-11-23T10:00:00Z",
            "last_status": 500, "last_error": None}))
    resp = api.get("/webhooks/failed")
    assert resp.status_code == 200, resp.text
    assert [f["event"]["id"] for f in resp.json()["data"]] == ["evt_2", "evt_1", "evt_0"]
    assert [f["event"]["id"] for f in api.get("/webhooks/failed", params={"limit": 1}).json()["data"]] == ["evt_2"]
    assert_error(api.get("/webhooks/failed", params={"limit": 0}), 400, "invalid_request", "limit")
    assert_error(api.get("/webhooks/failed", token=None), 401, "invalid_admin_token")
    assert "/admin/v1/webhooks/failed" in api.get("/openapi.json", token=None).json()["paths"]


def test_given_up_deliveries_are_sent_again_once(node, redis_url):
    client = store.connect_sync(redis_url)
    for i in range(3):
        client.lpush(keyspace.WEBHOOK_FAILED, orjson.dumps({
            "event": {"id": f"evt_{i}", "type": "account.suspended", "created": 1, "data": {"account_id": f"a{i}"}},
            "attempts": 9, "first_attempt_at": "2026-11-22T10:00:00Z", "last_attempt_at": "2026-11-23T10:00:00Z",
            "last_status": 500, "last_error": None}))
    rw, ro = Admin(node, make_token(redis_url, "rw")), Admin(node, make_token(redis_url, "ro", read_only=True))
    assert_error(ro.post("/webhooks/resend", json={"event_id": "evt_1"}), 403, "read_only_token")
    resp = rw.post("/webhooks/resend", json={"event_id": "evt_1"})
    assert resp.status_code == 200, resp.text
    assert resp.json() == {"resent": ["evt_1"]}
    entries = client.xrange(keyspace.WEBHOOK_STREAM)
    assert [(e[1][b"account"], e[1][b"event"], orjson.loads(e[1][b"body"])["data"]) for e in entries] == \
        [(b"a1", b"evt_1", {"account_id": "a1"})]
    assert_error(rw.post("/webhooks/resend", json={"event_id": "evt_1"}), 404, "not_found")
    assert_error(rw.post("/webhooks/resend", json={}), 400, "invalid_request", "event_id")
    assert_error(rw.post("/webhooks/resend", json={"event_id": "evt_0", "all": True}), 400, "invalid_request", "event_id")
    assert rw.post("/webhooks/resend", json={"all": True}).json() == {"resent": ["evt_2", "evt_0"]}
    assert client.llen(keyspace.WEBHOOK_FAILED) == 0 and client.xlen(keyspace.WEBHOOK_STREAM) == 3
    assert "/admin/v1/webhooks/resend" in rw.get("/openapi.json", token=None).json()["paths"]


def test_suspend_and_resume_over_the_api_record_their_events(node, redis_url):
    api = Admin(node, make_token(redis_url, name="ops-write"))
    acct = api.account()["id"]
    assert api.post(f"/accounts/{acct}/suspend").status_code == 200
    assert api.post(f"/accounts/{acct}/suspend").status_code == 200  # already so: no second event
    assert api.post(f"/accounts/{acct}/resume").status_code == 200
    client = store.connect_sync(redis_url)
    kinds = [orjson.loads(e.split(b" ", 1)[1])["type"] for e in client.lrange(keyspace.outbox(acct), 0, -1)]
    assert kinds == ["account.suspended", "account.resumed"]
