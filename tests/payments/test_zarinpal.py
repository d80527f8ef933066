"""Zarinpal end to end through the service layer, against a loopback fake of its v4 API and a
real redis-server: verify, then credit exactly once; nothing else ever credits."""
from __future__ import annotations

import threading

import pytest

from tests.payments.conftest import balance, new_account, pay_settings, payment_topups
from upgate.payments import bounds, orders, service
from upgate.payments.errors import GatewayRefused
from upgate.store import connection as store


@pytest.fixture
def s(redis_url, zarinpal):
    return pay_settings(redis_url, "zarinpal", zarinpal=zarinpal)


def _start(client, s, acct, amount="20000"):
    order, url = service.start(client, s, acct, amount)
    return order, url


def test_request_startpay_callback_verify_credits_once(client, s, zarinpal):
    acct = new_account(client)
    order, url = _start(client, s, acct, "25000")
    assert url == f"{zarinpal.url}/pg/StartPay/{order['authority']}"
    request = next(body for path, body in zarinpal.calls if path.endswith("request.json"))
    assert request["amount"] == 250000  # rials: toman × 10, converted in one place
    assert request["callback_url"] == "https://api.example.ir/dashboard/topup/callback"
    assert request["metadata"] == {"order_id": order["id"], "mobile": "09121234567"}
    zarinpal.pay(order["authority"])
    done = service.callback(client, s, {"Authority": order["authority"], "Status": "OK"})
    assert done.outcome == "paid" and done.balance_toman == "25000.000000"
    o = done.order
    assert (o["status"], o["card_pan"], o["amount_toman"]) == ("paid", "502229******5995", "25000.000000")
    assert o["ref_id"] and o["transaction_id"] and o["paid_at"]
    [txn] = payment_topups(client, acct)
    assert (txn["kind"], txn["ref"], txn["actor"], txn["id"]) == ("topup", f"zarinpal:{order['authority']}",
                                                                  "payment", o["transaction_id"])
    assert o["ref_id"] in txn["note"]
    again = service.callback(client, s, {"Authority": order["authority"], "Status": "OK"})  # a reload
    assert again.outcome == "already_paid" and balance(client, acct) == "25000.000000"


def test_twenty_callbacks_on_two_nodes_and_reconciliation_credit_once(redis_url, s, zarinpal):
    nodes = [store.connect_sync(redis_url) for _ in range(2)]  # each node's own connections
    acct = new_account(nodes[0])
    order, _ = _start(nodes[0], s, acct)
    zarinpal.pay(order["authority"])
    outcomes, barrier = [], threading.Barrier(22)

    def callback(i):
        barrier.wait()
        outcomes.append(service.callback(nodes[i % 2], s, {"Authority": order["authority"], "Status": "OK"}).outcome)

    def reconcile(i):
        barrier.wait()
        service.reconcile(nodes[i % 2], s)
        outcomes.append("reconciled")

    threads = [threading.Thread(target=callback, args=(i,)) for i in range(20)]
    threads += [threading.Thread(target=reconcile, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert outcomes.count("paid") <= 1 and len(outcomes) == 22
    assert len(payment_topups(nodes[0], acct)) == 1
    assert balance(nodes[0], acct) == "20000.000000"
    assert orders.get(nodes[0], order["id"])["status"] == "paid"
    assert zarinpal.verify_calls() >= 2  # every racer asked the bank; the ledger made it one credit


def test_nok_callback_unpaid_fails_and_credits_nothing(client, s, zarinpal):
    acct = new_account(client)
    order, _ = _start(client, s, acct)
    zarinpal.cancel(order["authority"])
    done = service.callback(client, s, {"Authority": order["authority"], "Status": "NOK"})
    assert (done.outcome, done.order["status"]) == ("not_paid", "failed")
    assert balance(client, acct) == "0.000000" and payment_topups(client, acct) == []


def test_nok_callback_of_a_paid_payment_still_credits(client, s, zarinpal):
    """The callback proves nothing either way: the bank says paid, so it is credited."""
    acct = new_account(client)
    order, _ = _start(client, s, acct)
    zarinpal.pay(order["authority"])
    done = service.callback(client, s, {"Authority": order["authority"], "Status": "NOK"})
    assert done.outcome == "paid" and balance(client, acct) == "20000.000000"


def test_forged_ok_callback_of_an_unpaid_order_never_credits(client, s, zarinpal):
    acct = new_account(client)
    order, _ = _start(client, s, acct)
    done = service.callback(client, s, {"Authority": order["authority"], "Status": "OK"})
    assert (done.outcome, done.order["status"]) == ("not_paid", "failed")
    assert balance(client, acct) == "0.000000"


def test_failed_order_found_paid_later_is_credited(client, s, zarinpal):
    acct = new_account(client)
    order, _ = _start(client, s, acct)
    assert service.callback(client, s, {"Authority": order["authority"], "Status": "NOK"}).order["status"] == "failed"
    zarinpal.pay(order["authority"])  # the bank settled after all
    assert service.reconcile(client, s) == {"paid": 1}
    assert orders.get(client, order["id"])["status"] == "paid" and balance(client, acct) == "20000.000000"


def test_amount_mismatch_never_credits(client, s, zarinpal):
    acct = new_account(client)
    order, _ = _start(client, s, acct, "50000")
    zarinpal.pay(order["authority"], amount=100000)  # 10,000 toman paid for a 50,000 order
    done = service.callback(client, s, {"Authority": order["authority"], "Status": "OK"})
    assert (done.outcome, done.order["status"]) == ("amount_mismatch", "failed")
    assert service.verify_id(client, s, order["id"])["outcome"] == "amount_mismatch"
    assert balance(client, acct) == "0.000000"


def test_unknown_authority_and_another_accounts_order_credit_nothing(client, s, zarinpal):
    mine, theirs = new_account(client), new_account(client, "09129999999")
    order, _ = _start(client, s, theirs)
    zarinpal.pay(order["authority"])
    assert service.callback(client, s, {"Authority": "A" + "0" * 35, "Status": "OK"}) is None
    assert service.callback(client, s, {"Authority": "../../etc", "Status": "OK"}) is None
    assert service.callback(client, s, {"Authority": order["authority"], "Status": "OK"}, account_id=mine) is None
    assert balance(client, mine) == "0.000000" and balance(client, theirs) == "0.000000"
    assert zarinpal.verify_calls() == 0  # nothing was even asked for them


def test_an_order_of_another_gateway_is_not_found_by_this_one(redis_url, client, zarinpal, zibal):
    acct = new_account(client)
    zibal_s = pay_settings(redis_url, "zibal", zibal=zibal)
    order, _ = service.start(client, zibal_s, acct, "20000")
    zibal.pay(order["authority"])
    zarinpal_s = pay_settings(redis_url, "zarinpal", zarinpal=zarinpal)
    assert service.callback(client, zarinpal_s, {"Authority": order["authority"], "Status": "OK"}) is None
    assert balance(client, acct) == "0.000000"


def test_timeout_during_verify_leaves_pending_then_reconciliation_credits(redis_url, client, zarinpal):
    s = pay_settings(redis_url, "zarinpal", zarinpal=zarinpal, payments_timeout_s=0.5)
    acct = new_account(client)
    order, _ = _start(client, s, acct)
    zarinpal.pay(order["authority"])
    zarinpal.delay_s = 1.5
    done = service.callback(client, s, {"Authority": order["authority"], "Status": "OK"})
    assert (done.outcome, done.order["status"]) == ("unavailable", "pending")
    zarinpal.delay_s = 0.0
    assert service.reconcile(client, s)["paid"] == 1  # (the bank may have verified the slow call: 101)
    assert balance(client, acct) == "20000.000000" and len(payment_topups(client, acct)) == 1


def test_never_called_back_is_credited_by_reconciliation(client, s, zarinpal):
    acct = new_account(client)
    order, _ = _start(client, s, acct)
    zarinpal.pay(order["authority"])  # the customer paid and closed the tab
    assert service.reconcile(client, s) == {"paid": 1}
    assert service.reconcile(client, s) == {}  # closed: nothing left to do
    assert orders.get(client, order["id"])["status"] == "paid"


def test_expiry_after_thirty_minutes_and_a_down_gateway_keeps_orders_pending(client, s, zarinpal):
    acct = new_account(client)
    unpaid, _ = _start(client, s, acct)
    later = orders.get(client, unpaid["id"])["_created_ms"] + 30 * 60 * 1000
    assert service.reconcile(client, s, now_ms=later - 1000) == {"not_paid": 1}
    zarinpal.down = True
    assert service.reconcile(client, s, now_ms=later) == {"unavailable": 1}
    assert orders.get(client, unpaid["id"])["status"] == "pending"
    zarinpal.down = False
    assert service.reconcile(client, s, now_ms=later) == {"not_paid": 1, "expired": 1}
    assert orders.get(client, unpaid["id"])["status"] == "expired"
    assert service.reconcile(client, s, now_ms=later) == {}
    events = [e for e in client.lrange(f"{{a:{acct}}}:outbox", 0, -1) if b"payment.failed" in e]
    assert len(events) == 1


def test_a_refused_request_fails_the_order(redis_url, client, zarinpal):
    s = pay_settings(redis_url, "zarinpal", zarinpal=zarinpal, zarinpal_merchant_id="wrong")
    acct = new_account(client)
    with pytest.raises(GatewayRefused):
        service.start(client, s, acct, "20000")
    [o] = orders.list_orders(client, account_id=acct)["data"]
    assert o["status"] == "failed" and o["authority"] is None


def test_a_down_gateway_ends_the_pass_early(client, s, zarinpal, monkeypatch):
    monkeypatch.setattr(bounds, "PENDING_PER_ACCOUNT", 10)  # many pending of one account (the bound: test_order_flood.py)
    acct = new_account(client)
    for _ in range(5):
        _start(client, s, acct)
    zarinpal.down = True
    assert service.reconcile(client, s) == {"unavailable": service.SILENT_STOP}
    assert all(o["status"] == "pending" for o in orders.list_orders(client, account_id=acct)["data"])


def test_filtered_listing_pages_through_a_rare_status(client, s, zarinpal, monkeypatch):
    monkeypatch.setattr(bounds, "PENDING_PER_ACCOUNT", 10)  # many pending of one account (the bound: test_order_flood.py)
    acct = new_account(client)
    made = [_start(client, s, acct)[0] for _ in range(7)]
    zarinpal.pay(made[1]["authority"])
    service.verify_id(client, s, made[1]["id"])
    monkeypatch.setattr(orders, "SCAN_MAX", 2)  # a small window: the paid one is found page by page
    found, cursor, pages = [], None, 0
    while True:
        page = orders.list_orders(client, status="paid", cursor=cursor, limit=5)
        found += [o["id"] for o in page["data"]]
        cursor, pages = page["next_cursor"], pages + 1
        if not cursor:
            break
    assert found == [made[1]["id"]] and pages > 1
