"""Refused requests leave a record (CUSTOMERS.md): a 4xx/5xx answered with an X-Svc-Request-Id
once the key was known keeps {request_id, status, code, route, model, key_id, ts}, no content,
at most the newest 1,000 per account; the operator's lookup (records.find), the customer's
(records.find_own) and the account's list find it. A served request writes none."""
from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from tests.gateway import seed
from upgate.billing import request_record
from upgate.services import records
from upgate.store import connection as store, keyspace

HELLO = [{"role": "user", "content": "a private question"}]


def chat(node, key: str, **body) -> httpx.Response:
    return httpx.post(node.base + "/chat/completions", headers={"Authorization": f"Bearer {key}"},
                      json={"model": "mock/chat-1", "messages": HELLO, "max_tokens": 8, **body}, timeout=30)


def _found(client, rid: str, tries: int = 50) -> dict:
    """The record of `rid` (it is written just after the answer went out)."""
    for _ in range(tries):
        try:
            return records.find(client, rid)
        except records.UnknownRequest:
            time.sleep(0.05)
    raise AssertionError(f"no record of {rid}")


def test_a_402_is_found_by_its_id_by_the_operator_and_its_own_customer_only(node, redis_url, mock):
    key, account_id, key_id = seed(redis_url, balance="0")
    _other_key, other_account, _ = seed(redis_url)
    r = chat(node, key)
    assert r.status_code == 402
    rid = r.headers["x-svc-request-id"]
    client = store.connect_sync(redis_url)
    found = _found(client, rid)
    assert {k: found[k] for k in ("request_id", "account_id", "key_id", "status", "code", "model", "route", "refused")} \
        == {"request_id": rid, "account_id": account_id, "key_id": key_id, "status": 402,
            "code": "insufficient_balance", "model": "mock/chat-1", "route": "/v1/chat/completions", "refused": True}
    assert found["cost_toman"] == "0.000000" and "private" not in str(found)  # no content, nothing charged
    assert records.find_own(client, account_id, rid)["status"] == 402  # no longer "not yours"
    with pytest.raises(records.UnknownRequest):
        records.find_own(client, other_account, rid)
    assert records.list_requests(client, account_id)[0]["request_id"] == rid
    from tests.console_kit import admin_token

    api = httpx.get(f"{node.url}/admin/v1/requests/{rid}", timeout=30,
                    headers={"Authorization": f"Bearer {admin_token(redis_url)}"})  # the operator's lookup
    assert api.status_code == 200 and api.json()["code"] == "insufficient_balance" and api.json()["refused"] is True


def test_a_refusal_before_admit_names_the_model_asked_for(node, redis_url, mock):
    key, account_id, _ = seed(redis_url, allowed_models=["mock/chat-1"])
    r = chat(node, key, model="mock/chat-big")
    assert r.status_code == 403
    found = _found(store.connect_sync(redis_url), r.headers["x-svc-request-id"])
    assert (found["status"], found["code"], found["model"]) == (403, "model_not_allowed", "mock/chat-big")


def test_a_served_request_keeps_its_billed_record_and_no_refused_one(node, redis_url, mock):
    key, account_id, _ = seed(redis_url, balance="100000")
    r = chat(node, key)
    assert r.status_code == 200
    client = store.connect_sync(redis_url)
    found = _found(client, r.headers["x-svc-request-id"])
    assert found["refused"] is False and found["status"] == 200
    time.sleep(0.2)
    assert client.llen(keyspace.refused(account_id)) == 0


def test_refused_records_are_bounded_per_account_and_leave_the_index_with_them(redis_url):
    _key, account_id, key_id = seed(redis_url)
    client = store.connect_sync(redis_url)
    aclient = store.connect_async(redis_url)
    now = int(time.time() * 1000)

    async def flood():
        for i in range(request_record.REFUSED_MAX + 30):
            rec = request_record.refused(request_id=f"req_flood{i:05d}", account_id=account_id, key_id=key_id,
                                         key_prefix="sk-up-AbCd", route="/v1/chat/completions", model="mock/chat-1",
                                         status=429, code="rate_limit_exceeded")
            await request_record.keep_refused(aclient, rec, sharded=False, keep_days=7, now_ms=now + i)
        await aclient.aclose()

    asyncio.run(flood())
    assert client.llen(keyspace.refused(account_id)) == request_record.REFUSED_MAX
    with pytest.raises(records.UnknownRequest):  # the oldest went, and its index entry with it
        records.find(client, "req_flood00000")
    newest = f"req_flood{request_record.REFUSED_MAX + 29:05d}"
    assert records.find(client, newest)["code"] == "rate_limit_exceeded"
    assert [r["request_id"] for r in records.list_requests(client, account_id, limit=2)] == \
        [newest, f"req_flood{request_record.REFUSED_MAX + 28:05d}"]
