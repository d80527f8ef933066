"""GET /admin/v1/webhooks/failed through a running node: the failed deliveries the CLI lists,
behind an admin token (read-only tokens may read them)."""
from __future__ import annotations

import orjson
import pytest

from tests.admin_kit import Admin, assert_error, make_token
from upgate import keyspace, store


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
