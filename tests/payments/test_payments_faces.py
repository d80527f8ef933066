"""Orders on the operator's faces: the CLI (Click's runner) and the management API (HTTP on a
running node), the same objects; audit both ways; the webhooks' payment events."""
from __future__ import annotations

import orjson
import pytest
from click.testing import CliRunner

from admin_cli.main import cli
from tests.admin_kit import Admin, assert_error, make_token
from tests.payments.conftest import new_account, pay_settings
from upgate.payments import bounds, orders, service
from upgate.services import audit, transactions
from upgate.webhooks import events


@pytest.fixture
def paid_order(redis_url, client, zarinpal):
    s = pay_settings(redis_url, "zarinpal", zarinpal=zarinpal)
    acct = new_account(client)
    order, _ = service.start(client, s, acct, "30000")
    zarinpal.pay(order["authority"])
    return s, acct, order


def _env(redis_url, zarinpal):
    return {"UPGATE_REDIS_URL": redis_url, "UPGATE_ALLOW_EVICTION": "1", "UPGATE_PAYMENTS": "zarinpal",
            "UPGATE_ZARINPAL_MERCHANT_ID": zarinpal.merchant, "UPGATE_ZARINPAL_URL": zarinpal.url}


def test_cli_verify_credits_once_then_show_and_list(redis_url, client, zarinpal, paid_order):
    _s, acct, order = paid_order
    run = CliRunner().invoke
    env = _env(redis_url, zarinpal)
    first = run(cli, ["payments", "verify", order["id"], "--json"], env=env)
    assert first.exit_code == 0, first.output
    assert orjson.loads(first.stdout)["outcome"] == "paid"
    again = orjson.loads(run(cli, ["payments", "verify", order["id"], "--json"], env=env).stdout)
    assert again["outcome"] == "already_paid" and again["order"]["status"] == "paid"
    shown = orjson.loads(run(cli, ["payments", "show", order["id"], "--json"], env=env).stdout)
    assert shown == again["order"] and set(shown) == set(orders.FIELDS)
    listed = orjson.loads(run(cli, ["payments", "list", "--account", acct, "--status", "paid", "--json"],
                              env=env).stdout)
    assert listed["data"] == [shown] and listed["next_cursor"] is None
    missing = run(cli, ["payments", "show", "ord_000000000000000000000000"], env=env)
    assert missing.exit_code == 1 and "unknown order" in missing.stderr
    assert len([t for t in transactions.list_transactions(client, acct) if t["actor"] == "payment"]) == 1


def test_cli_verify_with_the_gateway_down_exits_1_and_leaves_it_pending(redis_url, zarinpal, paid_order):
    _s, _acct, order = paid_order
    zarinpal.down = True
    out = CliRunner().invoke(cli, ["payments", "verify", order["id"]], env=_env(redis_url, zarinpal))
    assert out.exit_code == 1 and "did not answer" in out.stderr and "pending" in out.stderr


def test_api_lists_shows_and_verifies(redis_url, make_node, zarinpal, paid_order):
    s, acct, order = paid_order
    node = make_node(payments="zarinpal", zarinpal_merchant_id=zarinpal.merchant, zarinpal_url=zarinpal.url)
    api = Admin(node, make_token(redis_url))
    done = api.post(f"/payments/{order['id']}/verify")
    assert done.status_code == 200 and done.json()["outcome"] == "paid", done.text
    assert api.post(f"/payments/{order['id']}/verify").json()["outcome"] == "already_paid"
    one = api.get(f"/payments/{order['id']}").json()
    assert one == done.json()["order"] and one["status"] == "paid"
    assert api.get(f"/payments?account={acct}").json() == {"data": [one], "next_cursor": None}
    assert api.get("/payments?status=pending").json()["data"] == []
    assert_error(api.get("/payments/ord_nope"), 404, "not_found")
    assert_error(api.get("/payments?status=lost"), 400, "invalid_request", "status")
    reader = Admin(node, make_token(redis_url, "reader", read_only=True))
    assert_error(reader.post(f"/payments/{order['id']}/verify"), 403, "read_only_token")
    spec = api.get("/openapi.json", token=None).json()
    assert {"/admin/v1/payments", "/admin/v1/payments/{id}", "/admin/v1/payments/{id}/verify"} <= set(spec["paths"])
    assert set(spec["components"]["schemas"]["Order"]["properties"]) == set(orders.FIELDS)


def test_api_pages_with_a_cursor(redis_url, make_node, client, zarinpal, monkeypatch):
    monkeypatch.setattr(bounds, "PENDING_PER_ACCOUNT", 10)  # many pending of one account (the bound: test_order_flood.py)
    s = pay_settings(redis_url, "zarinpal", zarinpal=zarinpal)
    acct = new_account(client)
    made = [service.start(client, s, acct, str(10000 + i))[0]["id"] for i in range(5)]
    node = make_node()
    api = Admin(node, make_token(redis_url))
    seen, cursor = [], None
    while True:
        page = api.get("/payments?limit=2" + (f"&cursor={cursor}" if cursor else "")).json()
        seen += [o["id"] for o in page["data"]]
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert sorted(seen) == sorted(made) and len(seen) == 5


def test_audit_checks_orders_and_payment_transactions_both_ways(client, paid_order):
    s, acct, order = paid_order
    service.verify_id(client, s, order["id"])
    assert audit.run(client)["payment_mismatches"] == []
    # a paid order whose transaction is not there (a log restored from an old backup)
    key = f"{{a:{acct}}}:order:{order['id']}"
    client.hset(key, "transaction_id", "txn_other")
    [p] = audit.run(client)["payment_mismatches"]
    assert p["order_id"] == order["id"] and p["problem"] == "paid order without its payment transaction"
    # a payment transaction without a paid order
    client.hset(key, "status", "pending")
    [p] = audit.run(client)["payment_mismatches"]
    assert p["order_id"] is None and p["ref"] == f"zarinpal:{order['authority']}"


def test_payment_events_carry_the_order(client, paid_order, redis_url, zarinpal):
    s, acct, order = paid_order
    service.verify_id(client, s, order["id"])
    other, _ = service.start(client, s, acct, "10000")
    service.callback(client, s, {"Authority": other["authority"], "Status": "NOK"})
    bodies = [orjson.loads(events.body(events.split_entry(e)[1])) for e in client.lrange(f"{{a:{acct}}}:outbox", 0, -1)]
    by_type = {b["type"]: b["data"] for b in bodies}
    assert set(by_type["payment.succeeded"]) == {"account_id", "order"}
    assert by_type["payment.succeeded"]["order"]["status"] == "paid"
    assert by_type["payment.succeeded"]["order"] == orders.public(orders.get(client, order["id"]))
    assert by_type["payment.failed"]["order"]["id"] == other["id"]
    assert by_type["payment.failed"]["order"]["status"] == "failed"


def test_console_payments_page_and_verify_form(redis_url, make_node, client, zarinpal, paid_order):
    import re

    import httpx

    _s, acct, order = paid_order
    node = make_node(payments="zarinpal", zarinpal_merchant_id=zarinpal.merchant, zarinpal_url=zarinpal.url)
    token = make_token(redis_url)
    with httpx.Client(base_url=node.url, timeout=30) as x:
        x.get("/admin/login")
        assert x.post("/admin/login", data={"token": token, "next": "/admin/", "_xsrf": x.cookies["_xsrf"]}).status_code == 303
        persian = x.get("/admin/payments?status=pending&lang=fa")
        assert 'lang="fa"' in persian.text and "بررسی همین حالا" in persian.text
        page = x.get("/admin/payments?status=pending&lang=en")  # remembered from here on
        assert page.status_code == 200 and order["id"] in page.text and "Verify now" in page.text
        done = x.post(f"/admin/payments/{order['id']}/verify", data={"_xsrf": x.cookies["_xsrf"], "next": "/admin/payments"})
        assert done.status_code == 303
        paid = x.get("/admin/payments?status=paid").text
        assert order["id"] in paid and "paid and credited (now paid)" in paid
        account_page = x.get(f"/admin/accounts/{acct}", follow_redirects=True).text
        assert re.search(r'id="payments-h"', account_page) and order["id"] in account_page
        assert x.post(f"/admin/payments/{order['id']}/verify", data={}).status_code == 403  # no XSRF
    assert len([t for t in transactions.list_transactions(client, acct) if t["actor"] == "payment"]) == 1
