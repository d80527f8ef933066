"""One customer cannot starve another's payment (issue 36): order creation is bounded per
account and per address, every gateway call a customer causes is counted against those bounds,
and a reconciliation pass takes each account's oldest open orders first, a few per account,
so a paid order is verified in the first pass whatever another account left open.

Before: one signed-in customer made 200 orders in 0.5 s (a request.json call each); 1,000 junk
orders made a pass spend its calls on them while another customer's paid order waited 71 s."""
from __future__ import annotations

import time

import httpx
import pytest

from tests.dashboard_kit import SmsLog, signed_in, xsrf
from tests.gateway import seed
from tests.payments.conftest import balance, new_account, pay_settings
from upgate.payments import bounds, orders, service
from upgate.store import connection as store

A, B = "+989121234567", "+989351234567"


@pytest.fixture
def sms():
    with SmsLog() as log:
        yield log


def test_a_flood_of_orders_is_bounded_per_account_and_per_address(make_node, redis_url, sms, zarinpal):
    node = make_node(payments="zarinpal", zarinpal_merchant_id=zarinpal.merchant, zarinpal_url=zarinpal.url)
    _key, acct, _ = seed(redis_url, phone=A, balance="0")
    c = signed_in(node, sms, A)
    codes = []
    for _ in range(20):
        page = c.get("/dashboard/topup")
        codes.append(c.post("/dashboard/topup", data={"amount_toman": "50000", "_xsrf": xsrf(page.text)}).status_code)
    assert codes[:bounds.PENDING_PER_ACCOUNT] == [303] * bounds.PENDING_PER_ACCOUNT
    assert set(codes[bounds.PENDING_PER_ACCOUNT:]) == {429}, codes
    assert len([p for p, _ in zarinpal.calls if "request" in p]) == bounds.PENDING_PER_ACCOUNT
    page = c.get("/dashboard/topup?lang=fa")
    refused = c.post("/dashboard/topup?lang=fa", data={"amount_toman": "50000", "_xsrf": xsrf(page.text)})
    assert refused.status_code == 429 and "منتظر پرداخت" in refused.text
    metrics = httpx.get(node.url + "/metrics").text
    assert 'upgate_payments_total{gateway="zarinpal",outcome="throttled"}' in metrics


def test_the_hourly_window_holds_past_the_pending_bound(redis_url, client, zarinpal):
    """Orders that end at once (failed) are not pending: the hour's window still holds, per
    account and per address."""
    s = pay_settings(redis_url, "zarinpal", zarinpal=zarinpal)
    acct = new_account(client)
    made = 0
    with pytest.raises(bounds.TooManyPayments):
        for _ in range(bounds.CALLS_PER_ACCOUNT_HOUR + 5):
            order, _ = service.start(client, s, acct, "40000", address="198.51.100.9")
            orders.end(client, orders.get(client, order["id"]), "failed", "test")
            orders.close(client, orders.get(client, order["id"]))
            made += 1
    assert made == bounds.CALLS_PER_ACCOUNT_HOUR
    other = new_account(client, phone="09351234567")
    for _ in range(bounds.CALLS_PER_ADDRESS_HOUR - bounds.CALLS_PER_ACCOUNT_HOUR):
        order, _ = service.start(client, s, other, "40000", address="198.51.100.9")
        orders.end(client, orders.get(client, order["id"]), "failed", "test")
        orders.close(client, orders.get(client, order["id"]))
    with pytest.raises(bounds.TooManyPayments):  # the address's window is full, whoever asks
        service.start(client, s, new_account(client, phone="09131234567"), "40000", address="198.51.100.9")


def test_a_paid_order_is_verified_in_the_first_pass_whatever_another_account_left_open(redis_url, client, zarinpal):
    s = pay_settings(redis_url, "zarinpal", zarinpal=zarinpal)
    flooder, payer = new_account(client), new_account(client, phone="09351234567")
    # 1,000 open orders of one account, all older than the payer's (as before the bounds)
    for i in range(1000):  # each with an authority the bank does not know: a call each to verify
        orders.set_authority(client, orders.create(client, flooder, 40_000 * 10**6, "zarinpal"), f"S{i:035d}")
    order, _ = service.start(client, s, payer, "40000")
    zarinpal.pay(order["authority"])
    before = zarinpal.verify_calls()
    counts = service.reconcile(client, s)
    assert orders.get(client, order["id"])["status"] == "paid" and balance(client, payer) == "40000.000000"
    assert counts.get("paid") == 1
    # the flooder's thousand cost the pass its share only
    assert zarinpal.verify_calls() - before == 1 + bounds.RECONCILE_PER_ACCOUNT


def test_the_pass_takes_every_account_s_oldest_first(redis_url, client):
    a, b = new_account(client), new_account(client, phone="09351234567")
    mine = []
    for _ in range(5):
        mine.append(orders.create(client, a, 10**9, "zarinpal")["id"])
        time.sleep(0.002)  # (one order a millisecond: ties sort by id)
    theirs = orders.create(client, b, 10**9, "zarinpal")["id"]
    picked = orders.open_fairly(client, bounds.RECONCILE_PER_ACCOUNT)
    assert picked == [(a, mine[0]), (b, theirs), (a, mine[1]), (a, mine[2])]
