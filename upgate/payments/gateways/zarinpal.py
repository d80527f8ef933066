"""Zarinpal's v4 REST API (https://www.zarinpal.com/docs/paymentGateway/): request.json,
StartPay, verify.json (100 verified now, 101 verified before), unVerified.json. Amounts in rials
(no `currency` sent: Zarinpal's default). Its sandbox is the same API on sandbox.zarinpal.com."""
from __future__ import annotations

from upgate.payments import units
from upgate.payments.errors import (AmountMismatch, GatewayRefused, GatewayUnavailable, NotPaid,
                                    PaymentError)
from upgate.payments.gateways.base import AUTHORITY, Callback, Verified, local_mobile, mask_pan
from upgate.payments.http import post_json

UNIT = "IRR"

# Zarinpal's error codes → what they mean for us (one table). Anything unknown is treated as
# "no useful answer" (GatewayUnavailable): the order stays pending and is asked about again.
CODES: dict[int, type[PaymentError]] = {
    -9: GatewayRefused,  # validation error (amount, callback_url, merchant_id format)
    -10: GatewayRefused,  # terminal (merchant id or IP) not valid
    -11: GatewayRefused,  # terminal not active
    -12: GatewayUnavailable,  # too many attempts: try again later
    -15: GatewayRefused,  # terminal suspended
    -16: GatewayRefused,  # terminal's access level
    -17: GatewayRefused,  # terminal limited to blue level
    -30: GatewayRefused, -31: GatewayRefused, -32: GatewayRefused, -33: GatewayRefused,
    -34: GatewayRefused, -35: GatewayRefused, -40: GatewayRefused,  # wages (split payments)
    -50: AmountMismatch,  # session not valid: the amounts differ
    -51: NotPaid,  # session not valid: no successful payment on it (cancelled, failed)
    -52: GatewayUnavailable,  # unexpected error on their side
    -53: NotPaid,  # the session is not this merchant's
    -54: NotPaid,  # invalid authority
    -55: NotPaid,  # manual payment request not found
}


class Zarinpal:
    name = "zarinpal"

    def __init__(self, merchant_id: str, base_url: str, timeout_s: float):
        self.merchant_id = merchant_id
        self.base = base_url.rstrip("/")
        self.timeout_s = timeout_s

    def _call(self, path: str, body: dict) -> dict:
        _status, doc = post_json(self.base + path, {"merchant_id": self.merchant_id, **body}, self.timeout_s)
        data, errors = doc.get("data"), doc.get("errors")
        if isinstance(data, dict) and data.get("code") in (100, 101):
            return data
        err = errors if isinstance(errors, dict) and errors else (data if isinstance(data, dict) else {})
        code = err.get("code")
        cls = CODES.get(code, GatewayUnavailable) if isinstance(code, int) else GatewayUnavailable
        raise cls(f"zarinpal {path.rsplit('/', 1)[-1]}: code {code}", code)

    def request(self, *, amount_toman, callback_url, description, order_id, mobile=None) -> str:
        phone = local_mobile(mobile)
        metadata = {"order_id": order_id, **({"mobile": phone} if phone else {})}
        data = self._call("/pg/v4/payment/request.json", {
            "amount": units.to_gateway(amount_toman, UNIT), "callback_url": callback_url,
            "description": description, "metadata": metadata})
        authority = str(data.get("authority") or "")
        if not AUTHORITY.match(authority):
            raise GatewayUnavailable("zarinpal request: no authority in the answer")
        return authority

    def pay_url(self, authority: str) -> str:
        return f"{self.base}/pg/StartPay/{authority}"

    def verify(self, authority, amount_toman, order_id) -> Verified:
        data = self._call("/pg/v4/payment/verify.json", {
            "amount": units.to_gateway(amount_toman, UNIT), "authority": authority})
        return Verified(ref_id=str(data.get("ref_id") or ""), card_pan=mask_pan(data.get("card_pan")),
                        already=data.get("code") == 101)

    def callback(self, args) -> Callback | None:
        authority = args.get("Authority", "")
        if not AUTHORITY.match(authority):
            return None
        return Callback(authority, args.get("Status") == "OK")

    def unverified(self) -> list[str]:
        data = self._call("/pg/v4/payment/unVerified.json", {})
        return [str(a.get("authority")) for a in data.get("authorities") or [] if isinstance(a, dict)]
