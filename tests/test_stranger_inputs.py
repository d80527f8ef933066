"""The 500s a stranger could reach (issue 36), each now a 4xx in its route's own error shape:
a GET on a dashboard write route, an amount of odd digits or thousands of them on every face
that takes one, and Messages bodies the translation tripped on."""
from __future__ import annotations

import httpx
import pytest

from tests.admin_kit import Admin, make_token
from tests.dashboard_kit import SmsLog, signed_in, xsrf
from tests.gateway import seed
from tests.payments.conftest import balance
from upgate.services import accounts, transactions
from upgate.store import connection as store

A = "+989121234567"
ODD_AMOUNTS = ["¹⁰⁰⁰⁰", "①⓪⓪⓪⓪", "１０٬０００", "9" * 5000, "१०००", "1e4", "NaN"]


@pytest.fixture
def sms():
    with SmsLog() as log:
        yield log


def test_a_get_on_a_key_write_route_is_405(node, redis_url, sms):
    _key, _acct, key_id = seed(redis_url, phone=A, balance="1000")
    c = signed_in(node, sms, A)
    for action in ("update", "revoke"):
        for lang in ("fa", "en"):
            r = c.get(f"/dashboard/keys/{key_id}/{action}?lang={lang}")
            assert r.status_code == 405 and r.headers["allow"] == "POST", (action, r.status_code)
            assert "<html" in r.text and ("فرم" in r.text if lang == "fa" else "only takes a form" in r.text)


@pytest.mark.parametrize("amount", ODD_AMOUNTS, ids=lambda a: f"{a[:6]}…{len(a)}")
def test_odd_digits_on_the_top_up_form_are_400(make_node, redis_url, sms, amount):
    _key, acct, _ = seed(redis_url, phone=A, balance="0")
    c = signed_in(make_node(payments="fake"), sms, A)
    page = c.get("/dashboard/topup")
    r = c.post("/dashboard/topup", data={"amount_toman": amount, "_xsrf": xsrf(page.text)})
    assert r.status_code == 400 and 'name="amount_toman"' in r.text, r.status_code
    assert balance(store.connect_sync(redis_url), acct) == "0.000000"


def test_persian_and_latin_separators_are_read_alike_on_the_top_up_form(make_node, redis_url, sms):
    seed(redis_url, phone=A, balance="0")
    c = signed_in(make_node(payments="fake"), sms, A)
    for amount in ("۲۵٬۰۰۰", "25,000", "٢٥،٠٠٠"):
        page = c.get("/dashboard/topup")
        r = c.post("/dashboard/topup", data={"amount_toman": amount, "_xsrf": xsrf(page.text)})
        assert r.status_code == 303, (amount, r.status_code)


@pytest.mark.parametrize("amount", ODD_AMOUNTS, ids=lambda a: f"{a[:6]}…{len(a)}")
def test_odd_digits_on_the_management_api_are_400_naming_the_field(node, redis_url, amount):
    _key, acct, _ = seed(redis_url, phone=A, balance="0")
    api = Admin(node, make_token(redis_url))
    r = api.post(f"/accounts/{acct}/topups", json={"amount_toman": amount, "ref": "t1"})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "amount_toman"


def test_the_services_read_every_face_s_amount_alike(redis_url):
    client = store.connect_sync(redis_url)
    acct = accounts.create_account(client, A)
    for typed in ("۱٬۰۰۰", "1,000", "١٠٠٠", "1000"):
        transactions.topup(client, acct, typed, ref=f"r-{typed}")
    assert balance(client, acct) == "4000.000000"
    for typed in ODD_AMOUNTS:
        with pytest.raises(accounts.InvalidAmount):
            transactions.topup(client, acct, typed, ref="odd")


# ---- Messages bodies that raised in the translation -----------------------------------------

ODD_MESSAGES = [
    [{"role": "user"}],  # no content
    [{"role": "user", "content": None}],
    [{"role": "assistant"}],
    [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                   "content": [{"type": "text", "text": 42}]}]}],
    [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                   "content": [{"type": "text", "text": {"a": 1}}]}]}],
    [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": 7}]}],
]


@pytest.mark.parametrize("path", ["/messages", "/messages/count_tokens"])
@pytest.mark.parametrize("messages", ODD_MESSAGES)
def test_odd_messages_are_anthropic_shaped_400s(node, redis_url, path, messages):
    key, _acct, _ = seed(redis_url, balance="100000")
    r = httpx.post(node.base + path, timeout=30, headers={"x-api-key": key, "anthropic-version": "2023-06-01"},
                   json={"model": "mock/chat-1", "max_tokens": 16, "messages": messages})
    assert r.status_code == 400, (r.status_code, r.text)
    body = r.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error", body
