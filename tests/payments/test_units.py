"""The pure pieces: toman ⇄ rials in one place, masked card numbers, the callbacks' claims, the
top-up amount rule, the drivers' code tables."""
from __future__ import annotations

import pytest

from upgate.payments import service, units
from upgate.payments.errors import AmountMismatch, GatewayRefused, GatewayUnavailable, NotPaid
from upgate.payments.gateways import base, zarinpal, zibal
from upgate.settings import Settings


def test_toman_and_rials():
    assert units.to_gateway(25_000, "IRR") == 250_000 and units.to_gateway(25_000, "IRT") == 25_000
    assert units.from_gateway(250_000, "IRR") == 25_000 and units.from_gateway(250_005, "IRR") is None
    assert units.whole_toman(units.micro(10_000)) == 10_000
    with pytest.raises(ValueError):
        units.to_gateway(1, "USD")


def test_card_numbers_are_masked():
    assert base.mask_pan("6037991234565995") == "603799******5995"
    assert base.mask_pan("502229******5995") == "502229******5995"
    assert base.mask_pan(None) is None and base.mask_pan("") is None and base.mask_pan("1234") == "****"


def test_local_mobile():
    assert base.local_mobile("+989121234567") == "09121234567" == base.local_mobile("09121234567")
    assert base.local_mobile("+441234567890") is None and base.local_mobile(None) is None


def test_callback_claims():
    z = zarinpal.Zarinpal("m", "http://x", 1)
    assert z.callback({"Authority": "A000123", "Status": "OK"}) == base.Callback("A000123", True)
    assert z.callback({"Authority": "A000123", "Status": "NOK"}).ok is False
    for bad in ({}, {"Authority": ""}, {"Authority": "../x"}, {"Authority": "A" * 65}, {"Authority": "a b"}):
        assert z.callback(bad) is None
    zb = zibal.Zibal("m", "http://x", 1)
    assert zb.callback({"trackId": "15966442233311", "success": "1"}) == base.Callback("15966442233311", True)
    assert zb.callback({"Authority": "A000123"}) is None


def test_code_tables():
    assert zarinpal.CODES[-50] is AmountMismatch and zarinpal.CODES[-51] is NotPaid
    assert zarinpal.CODES[-9] is GatewayRefused and zarinpal.CODES[-52] is GatewayUnavailable
    assert zibal.CODES[202] is NotPaid and zibal.CODES[102] is GatewayRefused


@pytest.mark.parametrize("typed,toman", [("10000", 10_000), ("۲۵٬۰۰۰", 25_000), ("50,000", 50_000),
                                         (" 12345 ", 12_345), ("٥٠٠٠٠", 50_000)])
def test_amounts_accepted(typed, toman):
    assert service.check_amount(Settings(), typed) == toman


@pytest.mark.parametrize("typed", ["9999", "50000001", "12.5", "-20000", "1e5", "", "abc", None])
def test_amounts_refused(typed):
    with pytest.raises(service.InvalidTopup):
        service.check_amount(Settings(), typed)
