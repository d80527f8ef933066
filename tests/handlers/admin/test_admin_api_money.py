"""Money of record over the management API, through a running node on a private redis-server:
top-ups and adjustments idempotent by ref or Idempotency-Key (40 racing POSTs credit once),
transactions, the statement (JSON and CSV), request records."""
from __future__ import annotations

import csv
import io
import threading

import httpx
import pytest

from tests.admin_kit import Admin, assert_error, make_token


HELLO = [{"role": "user", "content": "Hello there, gateway!"}]


@pytest.fixture
def api(node, redis_url):
    return Admin(node, make_token(redis_url, "payments"))


def test_topup_by_idempotency_key_first_201_replays_200_conflict_409(api):
    acct = api.account(balance="0")["id"]
    first = api.post(f"/accounts/{acct}/topups", json={"amount_toman": "1500", "note": "bank"},
                     headers={"Idempotency-Key": "pay-1"})
    assert first.status_code == 201, first.text
    body = first.json()
    assert body["replayed"] is False and body["balance_toman"] == "1500.000000"
    t = body["transaction"]
    assert (t["kind"], t["amount_toman"], t["ref"], t["note"], t["actor"], t["account_id"]) == (
        "topup", "1500.000000", "pay-1", "bank", "payments", acct)
    again = api.post(f"/accounts/{acct}/topups", json={"amount_toman": "1500", "ref": "pay-1"})
    assert again.status_code == 200 and again.json() == dict(body, replayed=True)
    assert_error(api.post(f"/accounts/{acct}/topups", json={"amount_toman": "1600"},
                          headers={"Idempotency-Key": "pay-1"}), 409, "idempotency_conflict", "ref")
    assert_error(api.post(f"/accounts/{acct}/adjustments", json={"amount_toman": "1500", "note": "x"},
                          headers={"Idempotency-Key": "pay-1"}), 409, "idempotency_conflict", "ref")
    assert_error(api.post(f"/accounts/{acct}/topups", json={"amount_toman": "1500", "ref": "a"},
                          headers={"Idempotency-Key": "b"}), 400, "invalid_request", "ref")
    assert api.get(f"/accounts/{acct}").json()["balance_toman"] == "1500.000000"


def test_forty_racing_posts_with_one_key_credit_once(api, make_node):
    """Split over two nodes, so the race is between processes' pools, not one pool's threads."""
    acct = api.account(balance="0")["id"]
    bases = [api.base, Admin(make_node(), api.token).base]
    gate, results = threading.Barrier(40), []

    def post(base):
        with httpx.Client(timeout=30) as c:
            gate.wait()
            results.append(c.post(f"{base}/accounts/{acct}/topups", json={"amount_toman": "250.5"},
                                  headers={"Authorization": f"Bearer {api.token}", "Idempotency-Key": "race"}))

    threads = [threading.Thread(target=post, args=(bases[i % 2],)) for i in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    codes = sorted(r.status_code for r in results)
    assert codes == [200] * 39 + [201], codes
    bodies = {r.json()["transaction"]["id"] for r in results}
    assert len(bodies) == 1
    assert api.get(f"/accounts/{acct}").json()["balance_toman"] == "250.500000"
    txns = api.get(f"/accounts/{acct}/transactions").json()["data"]
    assert [(t["kind"], t["actor"]) for t in txns] == [("topup", "payments"), ("opening", "payments")]


def test_adjustments_need_a_note_and_refusals_name_the_field(api):
    acct = api.account(balance="100")["id"]
    resp = api.post(f"/accounts/{acct}/adjustments", json={"amount_toman": "-40.5", "note": "refund fee"})
    assert resp.status_code == 201 and resp.json()["balance_toman"] == "59.500000"
    assert resp.json()["transaction"]["kind"] == "adjustment"
    for path, body, param in [("adjustments", {"amount_toman": "5"}, "note"),
                              ("topups", {"amount_toman": 5}, "amount_toman"),
                              ("topups", {"amount_toman": "0"}, "amount_toman"),
                              ("topups", {"amount_toman": "abc"}, "amount_toman"),
                              ("topups", {"amount_toman": "1.0000001"}, "amount_toman"),
                              ("topups", {"amount_toman": "5", "ref": "x" * 129}, "ref"),
                              ("topups", {}, "amount_toman"),
                              ("topups", {"amount_toman": "5", "extra": 1}, "extra")]:
        assert_error(api.post(f"/accounts/{acct}/{path}", json=body), 400, "invalid_request", param)
    assert_error(api.post("/accounts/00000000-0000-4000-8000-000000000000/topups",
                          json={"amount_toman": "5"}), 404, "not_found")
    assert api.get(f"/accounts/{acct}").json()["balance_toman"] == "59.500000"


def test_transactions_and_statement_json_and_csv(api):
    acct = api.account(balance="100")["id"]
    api.post(f"/accounts/{acct}/topups", json={"amount_toman": "50", "ref": "r1"})
    data = api.get(f"/accounts/{acct}/transactions").json()["data"]
    assert [t["kind"] for t in data] == ["topup", "opening"]
    month = api.get(f"/accounts/{acct}/statement").json()["month"]
    st = api.get(f"/accounts/{acct}/statement", params={"month": month}).json()
    assert st["account_id"] == acct and st["topups_toman"] == "150.000000"
    assert st["closing_balance_toman"] == "150.000000"
    resp = api.get(f"/accounts/{acct}/statement", params={"format": "csv"})
    assert resp.status_code == 200 and resp.headers["Content-Type"].startswith("text/csv")
    assert list(csv.reader(io.StringIO(resp.text)))[0]
    assert_error(api.get(f"/accounts/{acct}/statement", params={"format": "xml"}), 400, "invalid_request", "format")
    assert_error(api.get(f"/accounts/{acct}/statement", params={"month": "1405-13"}), 400, "invalid_request", "month")
    assert_error(api.get(f"/accounts/{acct}/transactions", params={"month": "nope"}), 400, "invalid_request", "month")


def test_request_records(api, node):
    acct = api.account()["id"]
    key = api.post(f"/accounts/{acct}/keys", json={}).json()
    resp = httpx.post(node.base + "/chat/completions", headers={"Authorization": f"Bearer {key['key']}"},
                      json={"model": "mock/chat-1", "messages": HELLO, "max_tokens": 8}, timeout=30)
    rid = resp.headers["X-Svc-Request-Id"]
    records = api.get(f"/accounts/{acct}/requests", params={"limit": 5}).json()["data"]
    assert [r["request_id"] for r in records] == [rid]
    assert records[0]["key_id"] == key["key_id"] and records[0]["model"] == "mock/chat-1"
    assert api.get(f"/requests/{rid}").json() == records[0]
    assert_error(api.get("/requests/req_000000000000000000000000"), 404, "not_found")
    assert_error(api.get(f"/accounts/{acct}/requests", params={"limit": "0"}), 400, "invalid_request", "limit")


def test_overview_counts_topups(api):
    acct = api.account(balance="10")["id"]
    api.post(f"/accounts/{acct}/topups", json={"amount_toman": "5"})
    api.post(f"/accounts/{acct}/adjustments", json={"amount_toman": "7", "note": "not a payment"})
    assert api.get("/overview").json()["totals"]["topups_toman"] == "15.000000"


def test_overview_does_not_count_a_migrated_balance_as_a_topup(api, redis_url):
    """An account from before transactions gets an opening equal to its balance when the
    migration brings it to this release's form: money paid long before, not a top-up received that day."""
    import redis

    from upgate.services import audit
    from upgate.store import connection as store, keyspace

    acct = api.account(balance="0")["id"]
    r = redis.Redis.from_url(redis_url)
    r.delete(keyspace.transactions(acct))  # as the store held it before money of record
    r.hdel(keyspace.wallet(acct), "credited", "charged")
    r.hset(keyspace.wallet(acct), "balance", 4000 * 1_000_000)
    from upgate import migrations

    migrations.run(store.connect_sync(redis_url))  # gives it its opening transaction
    assert audit.run(store.connect_sync(redis_url))["mismatches"] == []
    api.post(f"/accounts/{acct}/topups", json={"amount_toman": "5"})
    assert api.get("/overview").json()["totals"]["topups_toman"] == "5.000000"


def test_a_ref_is_normalized_once_body_and_idempotency_key_alike(api):
    """"r ", " r" and the NFD spelling of a ref are that ref, in the body and in the
    Idempotency-Key header (sent as UTF-8 bytes): replays, one credit."""
    nfc, nfd = "pay-\u00e9t\u00e9", "pay-e\u0301te\u0301"
    acct = api.account(balance="0")["id"]
    first = api.post(f"/accounts/{acct}/topups", json={"amount_toman": "700", "ref": nfc + " "})
    assert first.status_code == 201, first.text
    assert first.json()["transaction"]["ref"] == nfc
    for kwargs in ({"json": {"amount_toman": "700", "ref": " " + nfd}},
                   {"json": {"amount_toman": "700"}, "headers": {"Idempotency-Key": nfd.encode()}},
                   {"json": {"amount_toman": "700", "ref": nfc + " "},
                    "headers": {"Idempotency-Key": nfd.encode()}}):
        again = api.post(f"/accounts/{acct}/topups", **kwargs)
        assert again.status_code == 200 and again.json()["replayed"] is True, (kwargs, again.text)
        assert again.json()["transaction"] == first.json()["transaction"]
    assert api.get(f"/accounts/{acct}").json()["balance_toman"] == "700.000000"
    assert [t["kind"] for t in api.get(f"/accounts/{acct}/transactions").json()["data"]] == ["topup", "opening"]


def test_statement_csv_neutralises_cells_a_spreadsheet_would_run(api):
    acct = api.account(balance="100")["id"]
    assert api.post(f"/accounts/{acct}/topups", json={"amount_toman": "50", "ref": "=1+2",
                                                      "note": "@SUM(A1)"}).status_code == 201
    assert api.post(f"/accounts/{acct}/adjustments", json={"amount_toman": "-7", "ref": "-3",
                                                           "note": "+calc"}).status_code == 201
    resp = api.get(f"/accounts/{acct}/statement", params={"format": "csv"})
    rows = {r["kind"]: r for r in csv.DictReader(io.StringIO(resp.text))}
    assert (rows["topup"]["ref"], rows["topup"]["note"]) == ("'=1+2", "'@SUM(A1)")
    assert (rows["adjustment"]["ref"], rows["adjustment"]["note"]) == ("'-3", "'+calc")
    assert rows["adjustment"]["amount_toman"] == "-7.000000"
