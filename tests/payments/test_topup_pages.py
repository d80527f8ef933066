"""The dashboard's top-up pages over HTTP against real gateway nodes: the fake gateway's whole
flow, Zarinpal's callback racing on two nodes, and what a customer may not reach or do."""
from __future__ import annotations

import threading

import httpx
import pytest

from tests.dashboard_kit import SmsLog, signed_in, xsrf
from tests.gateway import seed
from tests.payments.conftest import balance, payment_topups
from upgate.payments import orders
from upgate.services import accounts
from upgate.store import connection as store

A, B = "+989121234567", "+989351234567"


@pytest.fixture
def sms():
    with SmsLog() as log:
        yield log


def _pay_form(c: httpx.Client, amount: str) -> httpx.Response:
    page = c.get("/dashboard/topup")
    assert page.status_code == 200 and 'name="amount_toman"' in page.text
    return c.post("/dashboard/topup", data={"amount_toman": amount, "_xsrf": xsrf(page.text)})


def test_fake_gateway_form_bank_page_pay_callback_receipt(make_node, redis_url, sms):
    _key, acct, _ = seed(redis_url, phone=A, balance="0")
    node = make_node(payments="fake")
    c = signed_in(node, sms, A)
    sent = _pay_form(c, "۲۵٬۰۰۰")  # Persian digits and separators, as a phone keyboard types them
    assert sent.status_code == 303 and sent.headers["location"].startswith("/dashboard/topup/fake-bank/FAKE")
    bank = c.get(sent.headers["location"])
    assert bank.status_code == 200 and "۲۵٬۰۰۰" in bank.text and 'value="pay"' in bank.text
    back = c.post(sent.headers["location"], data={"action": "pay", "_xsrf": xsrf(bank.text)})
    assert back.status_code == 303 and back.headers["location"].startswith("/dashboard/topup/callback?Authority=FAKE")
    done = c.get(back.headers["location"])
    assert done.status_code == 303 and done.headers["location"].startswith("/dashboard/topup/ord_")
    receipt = c.get(done.headers["location"])
    order = orders.list_orders(store.connect_sync(redis_url), account_id=acct)["data"][0]
    assert order["status"] == "paid" and receipt.status_code == 200
    for shown in ("۲۵٬۰۰۰", order["id"], "".join("۰۱۲۳۴۵۶۷۸۹"[int(d)] for d in order["ref_id"])):
        assert shown in receipt.text
    assert "Payment received" in c.get(done.headers["location"] + "?lang=en").text
    assert c.get(back.headers["location"]).status_code == 303  # a reload of the callback: still one credit
    client = store.connect_sync(redis_url)
    assert balance(client, acct) == "25000.000000" and len(payment_topups(client, acct)) == 1
    listed = c.get("/dashboard/topup?lang=en").text
    assert order["id"] in listed and "Paid" in listed


def test_cancel_on_the_bank_page_credits_nothing(make_node, redis_url, sms):
    _key, acct, _ = seed(redis_url, phone=A, balance="0")
    node = make_node(payments="fake")
    c = signed_in(node, sms, A)
    sent = _pay_form(c, "20000")
    bank = c.get(sent.headers["location"])
    back = c.post(sent.headers["location"], data={"action": "cancel", "_xsrf": xsrf(bank.text)})
    assert "Status=NOK" in back.headers["location"]
    page = c.get(c.get(back.headers["location"]).headers["location"] + "?lang=en")
    assert "Payment not completed" in page.text
    assert balance(store.connect_sync(redis_url), acct) == "0.000000"


def test_zarinpal_callbacks_racing_on_two_nodes_credit_once(make_node, redis_url, sms, zarinpal):
    """20 callbacks on two nodes while both nodes' reconciliation loops run every 0.2 s."""
    _key, acct, _ = seed(redis_url, phone=A, balance="0")
    opts = dict(payments="zarinpal", zarinpal_merchant_id=zarinpal.merchant, zarinpal_url=zarinpal.url,
                payments_reconcile_s=0.2)
    nodes = [make_node(**opts), make_node(**opts)]
    c = signed_in(nodes[0], sms, A)
    sent = _pay_form(c, "30000")
    assert sent.headers["location"].startswith(zarinpal.url + "/pg/StartPay/A")
    authority = sent.headers["location"].rsplit("/", 1)[1]
    zarinpal.pay(authority)
    cookies = dict(c.cookies)
    statuses, barrier = [], threading.Barrier(20)

    def back(i):
        url = nodes[i % 2].url + f"/dashboard/topup/callback?Authority={authority}&Status=OK"
        barrier.wait()
        statuses.append(httpx.get(url, cookies=cookies, timeout=30).status_code)

    threads = [threading.Thread(target=back, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert statuses == [303] * 20
    client = store.connect_sync(redis_url)
    assert balance(client, acct) == "30000.000000" and len(payment_topups(client, acct)) == 1


def test_another_accounts_order_is_a_404_and_is_never_verified(make_node, redis_url, sms, zarinpal):
    seed(redis_url, phone=A, balance="0")
    _key, acct_b, _ = seed(redis_url, phone=B, balance="0")
    node = make_node(payments="zarinpal", zarinpal_merchant_id=zarinpal.merchant, zarinpal_url=zarinpal.url)
    b = signed_in(node, sms, B)
    authority = _pay_form(b, "20000").headers["location"].rsplit("/", 1)[1]
    order = orders.list_orders(store.connect_sync(redis_url), account_id=acct_b)["data"][0]
    zarinpal.pay(authority)
    a = signed_in(node, sms, A)
    assert a.get(f"/dashboard/topup/callback?Authority={authority}&Status=OK").status_code == 404
    assert a.get(f"/dashboard/topup/{order['id']}").status_code == 404
    assert a.get("/dashboard/topup/ord_0123456789abcdef01234567").status_code == 404
    assert a.get("/dashboard/topup/callback?Authority=A00000000000000000000000000000000001&Status=OK").status_code == 404
    assert zarinpal.verify_calls() == 0
    assert b.get(f"/dashboard/topup/{order['id']}").status_code == 200


def test_callback_without_a_session_goes_to_sign_in_and_back(make_node, redis_url):
    node = make_node(payments="fake")
    r = httpx.get(node.url + "/dashboard/topup/callback?Authority=FAKE00&Status=OK", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"].startswith("/dashboard/login?next=%2Fdashboard%2Ftopup%2Fcallback")


def test_refusals_amount_xsrf_suspended_and_payments_off(make_node, redis_url, sms):
    _key, acct, _ = seed(redis_url, phone=A, balance="0")
    node = make_node(payments="fake")
    c = signed_in(node, sms, A)
    for amount in ("9999", "50000001", "12.5", "abc", ""):
        r = _pay_form(c, amount)
        assert r.status_code == 400 and 'role="alert"' in r.text, amount
    assert c.post("/dashboard/topup", data={"amount_toman": "20000"}).status_code == 403  # no XSRF field
    accounts.suspend(store.connect_sync(redis_url), acct)
    assert _pay_form(c, "20000").status_code == 403
    assert orders.list_orders(store.connect_sync(redis_url), account_id=acct)["data"] == []
    off = make_node()
    c2 = httpx.Client(base_url=off.url, cookies=dict(c.cookies), timeout=30)  # sessions live in Redis
    page = c2.get("/dashboard/topup?lang=en")
    assert page.status_code == 200 and "not available" in page.text and 'name="amount_toman"' not in page.text
    assert c2.get("/dashboard/topup/fake-bank/FAKE0123").status_code == 404
