"""What a customer looks for in the first five minutes (issue 39), over plain HTTP against real
gateway nodes: the public price list against the catalog (and after a price sync), the receipt
of a paid top-up with and without VAT, signed-in devices and "sign out everywhere" seen on a
second node, the low-balance threshold form, and the rules every form keeps (XSRF, own account
only, suspended accounts see and do not change). The browser suite is
test_first_minutes_browser.py; the SMS alert against the provider fakes is tests/alerts/."""
from __future__ import annotations

import json
import re
import time

import httpx
import pytest

from tests.dashboard_kit import SmsLog, signed_in, xsrf
from tests.gateway import seed
from upgate.catalog import store as catalog_store
from upgate.payments import orders, receipts
from upgate.services import accounts, phone_index
from upgate.store import keyspace
from upgate.store import connection as store

A, B = "+989121234567", "+989351234567"
FA_DIGITS = str.maketrans("0123456789", "۰۱۲۳۴۵۶۷۸۹")


@pytest.fixture
def sms():
    with SmsLog() as log:
        yield log


def _row(html: str, model_id: str) -> str:
    return re.search(r'<tr data-model="' + re.escape(model_id) + r'">(.*?)</tr>', html, re.S).group(1)


# ---- prices ----------------------------------------------------------------------------------

def test_pricing_is_public_lists_every_listed_model_and_no_hidden_one(node):
    page = httpx.get(node.url + "/pricing", follow_redirects=False)
    assert page.status_code == 200 and 'lang="fa" dir="rtl"' in page.text
    assert "upgate_dash" not in page.headers.get("set-cookie", "")
    for model in node.ctx.catalog.visible():
        assert model.id in page.text, model.id
    assert "mock/hidden" not in page.text
    row = _row(page.text, "mock/chat-1")
    assert "۱۵۰٬۰۰۰" in row and "۶۰۰٬۰۰۰" in row and "mock/chat-1:free" in row  # input, output, its free variant
    assert 'data-model="mock/chat-1:free"' not in page.text  # shown on its base model's row
    en = httpx.get(node.url + "/pricing?lang=en").text
    assert 'lang="en" dir="ltr"' in en and "150,000" in _row(en, "mock/chat-1")
    big = _row(en, "mock/chat-big")
    assert "1,000,000" in big and "4,000,000" in big and ">10<" in big.replace(" ", "")  # per request


def test_pricing_is_exact_after_a_price_sync(node, redis_url, tmp_path):
    source = tmp_path / "src.json"
    source.write_text(json.dumps({"data": [{"id": "mock-chat-1", "pricing": {
        "prompt": "0.0000025", "completion": "0.00001", "input_cache_read": "0.00000025"}}]}))
    outcome = catalog_store.sync(store.connect_sync(redis_url), str(source), provider="mock", usd_toman="65432",
                                 markup="1.1", confirmed=True, provider_names={"mock", "dead"})
    assert outcome.applied
    deadline = time.monotonic() + 10
    while node.ctx.catalog.resolve("mock/chat-1").prompt_toman_per_million != 179938 and time.monotonic() < deadline:
        time.sleep(0.05)
    en = httpx.get(node.url + "/pricing?lang=en").text
    row = _row(en, "mock/chat-1")
    # 2.5 USD × 65,432 × 1.1 = 179,938 toman per million; 10 USD → 719,752; cache 0.25 USD → 17,993.8
    assert "179,938" in row and "719,752" in row and "17,993.8" in row, row
    assert "Prices last updated" in en


def test_models_page_inside_the_dashboard(node, sms):
    seed(node.settings.redis_url, phone=A)
    c = signed_in(node, sms, A)
    page = c.get("/dashboard/models")
    assert page.status_code == 200 and 'aria-current="page">قیمت' in page.text
    assert "mock/chat-big" in page.text and "mock/hidden" not in page.text
    assert httpx.get(node.url + "/dashboard/models", follow_redirects=False).status_code == 303


# ---- receipts --------------------------------------------------------------------------------

def test_vat_arithmetic():
    M = 1_000_000
    assert receipts.vat_split(110_000 * M, "10") == (100_000 * M, 10_000 * M)
    # 100,000 × 100 / 109 = 91,743.119… → 91,743 (down to the toman); VAT the rest
    assert receipts.vat_split(100_000 * M, "9") == (91_743 * M, 8_257 * M)
    assert receipts.vat_split(25_000 * M, "9.5") == (22_831 * M, 2_169 * M)
    for paid in (10_000, 12_345, 49_999_999):
        net, vat = receipts.vat_split(paid * M, "10")
        assert net + vat == paid * M and net % M == 0 and vat >= 0


def _pay(c: httpx.Client, amount: str) -> str:
    """A paid top-up through the fake gateway's bank page; its order id."""
    page = c.get("/dashboard/topup")
    sent = c.post("/dashboard/topup", data={"amount_toman": amount, "_xsrf": xsrf(page.text)})
    bank = c.get(sent.headers["location"])
    back = c.post(sent.headers["location"], data={"action": "pay", "_xsrf": xsrf(bank.text)})
    done = c.get(back.headers["location"])
    return done.headers["location"].rsplit("/", 1)[1]


def test_receipt_without_vat(make_node, sms):
    node = make_node(payments="fake", business_name="شرکت نمونه", business_address="تهران، خیابان آزادی")
    seed(node.settings.redis_url, phone=A, balance="0")
    c = signed_in(node, sms, A)
    order_id = _pay(c, "25000")
    r = c.get(f"/dashboard/billing/receipts/{order_id}")
    assert r.status_code == 200
    order = orders.get(store.connect_sync(node.settings.redis_url), order_id)
    assert "شرکت نمونه" in r.text and "تهران، خیابان آزادی" in r.text and order_id in r.text
    assert order["ref_id"].translate(FA_DIGITS) in r.text and "۲۵٬۰۰۰" in r.text
    assert 'data-sum="vat"' not in r.text and "مالیات" not in r.text
    assert re.search(r"۱۴\d\d/\d\d/\d\d".translate(FA_DIGITS), r.text)  # a Jalali date, Persian digits
    assert f"/dashboard/billing/receipts/{order_id}" in c.get("/dashboard/topup").text


def test_receipt_with_vat_and_only_for_its_own_paid_order(make_node, sms):
    node = make_node(payments="fake", business_name="Example Co", business_address="Tehran",
                     vat_percent="10", tax_id="14001234567")
    seed(node.settings.redis_url, phone=A, balance="0")
    seed(node.settings.redis_url, phone=B, balance="0")
    a = signed_in(node, sms, A)
    order_id = _pay(a, "110000")
    en = a.get(f"/dashboard/billing/receipts/{order_id}?lang=en").text
    sums = dict(re.findall(r'data-sum="(\w+)">([^<]*)<', en))
    assert sums == {"net": "100,000 toman", "vat": "10,000 toman", "paid": "110,000 toman"}, sums
    assert "14001234567" in en and "VAT (10%)" in en
    fa = a.get(f"/dashboard/billing/receipts/{order_id}?lang=fa").text
    assert "۱۰۰٬۰۰۰" in fa and "۱۴۰۰۱۲۳۴۵۶۷" in fa
    b = signed_in(node, sms, B)
    theirs = b.get(f"/dashboard/billing/receipts/{order_id}")
    missing = b.get("/dashboard/billing/receipts/ord_" + "0" * 24)
    assert theirs.status_code == missing.status_code == 404
    assert theirs.text.replace(order_id, "X").split("<main")[1] == missing.text.replace("ord_" + "0" * 24, "X").split("<main")[1]
    page = b.get("/dashboard/topup")  # an order that is not paid has no receipt either
    sent = b.post("/dashboard/topup", data={"amount_toman": "20000", "_xsrf": xsrf(page.text)})
    client = store.connect_sync(node.settings.redis_url)
    pending = orders.list_orders(client, account_id=phone_index.owner(client, B))["data"][0]
    assert sent.status_code == 303 and pending["status"] == "pending"
    assert b.get(f"/dashboard/billing/receipts/{pending['id']}").status_code == 404


# ---- sessions --------------------------------------------------------------------------------

ANDROID = "Mozilla/5.0 (Linux; Android 14; SM-A546E) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0 Mobile Safari/537.36"
WINDOWS = "Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:128.0) Gecko/20100101 Firefox/128.0"


def test_signed_in_devices_and_sign_out_everywhere_on_a_second_node(make_node, sms):
    a_node, b_node = make_node(), make_node()
    seed(a_node.settings.redis_url, phone=A)
    seed(a_node.settings.redis_url, phone=B)
    phone = signed_in(a_node, sms, A, headers={"User-Agent": ANDROID})
    store.connect_sync(a_node.settings.redis_url).delete(keyspace.signin_sent(A))  # not a minute's wait
    desk = signed_in(b_node, sms, A, headers={"User-Agent": WINDOWS})
    other = signed_in(a_node, sms, B)  # another account's session: untouched
    page = phone.get("/dashboard/sessions?lang=en")
    assert page.status_code == 200
    assert "Chrome on Android" in page.text and "Firefox on Windows" in page.text and "127.0.0.1" in page.text
    assert page.text.count("this device") == 1
    on_b = httpx.Client(base_url=b_node.url, follow_redirects=False, cookies={"upgate_dash": phone.cookies.get("upgate_dash")})
    assert on_b.get("/dashboard/keys").status_code == 200
    r = phone.post("/dashboard/sessions/revoke-all", data={"_xsrf": xsrf(page.text)})
    assert r.status_code == 303 and r.headers["location"].startswith("/dashboard/login")
    for c in (on_b, desk):  # both sessions, seen on the other node
        r = c.get("/dashboard/keys")
        assert r.status_code == 303 and r.headers["location"].startswith("/dashboard/login"), c.base_url
    assert other.get("/dashboard/keys").status_code == 200


# ---- the low-balance threshold ---------------------------------------------------------------

def test_low_balance_threshold_form(node, sms):
    _k, acct, _ = seed(node.settings.redis_url, phone=A)
    client = store.connect_sync(node.settings.redis_url)
    c = signed_in(node, sms, A)
    page = c.get("/dashboard/alerts")
    assert page.status_code == 200 and 'name="low_balance_toman"' in page.text
    r = c.post("/dashboard/alerts", data={"low_balance_toman": "۵۰٬۰۰۰", "_xsrf": xsrf(page.text)})
    assert r.status_code == 303
    assert accounts.show(client, acct)["low_balance_micro"] == 50_000_000_000
    assert "۵۰٬۰۰۰" in c.get("/dashboard/alerts").text
    bad = c.post("/dashboard/alerts", data={"low_balance_toman": "پنجاه", "_xsrf": xsrf(page.text)})
    assert bad.status_code == 400 and "مبلغ" in bad.text and "low_balance_toman must" not in bad.text
    assert accounts.show(client, acct)["low_balance_micro"] == 50_000_000_000  # nothing written
    c.post("/dashboard/alerts", data={"low_balance_toman": "", "_xsrf": xsrf(page.text)})
    assert accounts.show(client, acct)["low_balance_micro"] is None


# ---- the rules of every form ----------------------------------------------------------------

def test_new_pages_need_a_session_and_new_forms_xsrf(node, sms):
    for path in ("/dashboard/models", "/dashboard/sessions", "/dashboard/alerts",
                 "/dashboard/billing/receipts/ord_0123abcd"):
        r = httpx.get(node.url + path, follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"].startswith("/dashboard/login"), path
    seed(node.settings.redis_url, phone=A)
    c = signed_in(node, sms, A)
    for path in ("/dashboard/alerts", "/dashboard/sessions/revoke-all"):
        assert c.post(path, data={"low_balance_toman": "1"}).status_code == 403, path
    assert c.get("/dashboard/sessions").status_code == 200  # not signed out by a forged form


def test_suspended_accounts_see_and_do_not_change(node, sms):
    _k, acct, _ = seed(node.settings.redis_url, phone=A)
    client = store.connect_sync(node.settings.redis_url)
    accounts.suspend(client, acct)
    c = signed_in(node, sms, A)
    for path in ("/dashboard/models", "/dashboard/sessions", "/dashboard/alerts"):
        assert c.get(path).status_code == 200, path
    page = c.get("/dashboard/alerts")
    assert 'name="low_balance_toman"' not in page.text
    r = c.post("/dashboard/alerts", data={"low_balance_toman": "5000", "_xsrf": xsrf(page.text)})
    assert r.status_code == 403 and accounts.show(client, acct)["low_balance_micro"] is None
