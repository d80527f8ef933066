"""Zibal through the service layer against a loopback fake of its REST API: request → trackId,
verify (100, then 201 answered from /v1/inquiry), 202 not paid, another amount, refusals."""
from __future__ import annotations

import pytest

from tests.payments.conftest import balance, new_account, pay_settings, payment_topups
from upgate.payments import service
from upgate.payments.errors import GatewayRefused


@pytest.fixture
def s(redis_url, zibal):
    return pay_settings(redis_url, "zibal", zibal=zibal)


def _back(order, ok=True):
    return {"trackId": order["authority"], "success": "1" if ok else "0", "status": "2" if ok else "3",
            "orderId": order["id"]}


def test_request_start_callback_verify_credits_once(client, s, zibal):
    acct = new_account(client)
    order, url = service.start(client, s, acct, "12000")
    assert url == f"{zibal.url}/start/{order['authority']}"
    [(path, body)] = zibal.calls
    assert path == "/v1/request" and body["amount"] == 120000 and body["orderId"] == order["id"]
    assert body["callbackUrl"] == "https://api.example.ir/dashboard/topup/callback"
    zibal.pay(order["authority"])
    done = service.callback(client, s, _back(order))
    assert done.outcome == "paid" and done.order["card_pan"] == "62741****44" and done.order["ref_id"]
    again = service.callback(client, s, _back(order))  # 201 at the bank, the inquiry says paid
    assert again.outcome == "already_paid"
    assert [p for p, _ in zibal.calls].count("/v1/inquiry") == 0  # a paid order is not asked again
    assert service.verify_id(client, s, order["id"])["outcome"] == "already_paid"
    assert balance(client, acct) == "12000.000000" and len(payment_topups(client, acct)) == 1


def test_verified_before_at_the_bank_is_credited_from_the_inquiry(client, s, zibal):
    acct = new_account(client)
    order, _ = service.start(client, s, acct, "12000")
    zibal.pay(order["authority"])
    zibal.payments[order["authority"]]["state"] = "verified"  # verified by a call whose answer was lost
    assert service.reconcile(client, s) == {"paid": 1}
    assert "/v1/inquiry" in [p for p, _ in zibal.calls] and balance(client, acct) == "12000.000000"


def test_not_paid_and_another_amount_never_credit(client, s, zibal):
    acct = new_account(client)
    unpaid, _ = service.start(client, s, acct, "12000")
    assert service.callback(client, s, _back(unpaid, ok=True)).order["status"] == "failed"  # 202
    short, _ = service.start(client, s, acct, "12000")
    zibal.pay(short["authority"], amount=10000)  # 1,000 toman paid for a 12,000 order
    done = service.callback(client, s, _back(short))
    assert (done.outcome, done.order["status"]) == ("amount_mismatch", "failed")
    assert balance(client, acct) == "0.000000" and payment_topups(client, acct) == []
    assert service.callback(client, s, {"trackId": "1" * 13, "success": "1"}) is None  # unknown
    assert service.callback(client, s, {"Authority": unpaid["authority"], "Status": "OK"}) is None  # Zarinpal's words


def test_refused_request_codes_are_named(redis_url, client, zibal):
    acct = new_account(client)
    wrong = pay_settings(redis_url, "zibal", zibal=zibal, zibal_merchant="nobody")
    with pytest.raises(GatewayRefused) as e:
        service.start(client, wrong, acct, "12000")
    assert e.value.code == 102
