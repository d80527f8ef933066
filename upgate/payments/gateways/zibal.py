"""Zibal's REST API (https://help.zibal.ir/IPG/API/): /v1/request → trackId, /start/{trackId},
/v1/verify (result 100; 201 = verified before), /v1/inquiry. Amounts in rials. Its test
merchant is `zibal` (docs/payments.md)."""
from __future__ import annotations

from upgate.payments import units
from upgate.payments.errors import (AmountMismatch, GatewayRefused, GatewayUnavailable, NotPaid,
                                    PaymentError)
from upgate.payments.gateways.base import AUTHORITY, Callback, Verified, local_mobile, mask_pan
from upgate.payments.http import post_json

UNIT = "IRR"
ALREADY = 201

# Zibal's result codes → what they mean for us (one table); unknown ones: no useful answer.
CODES: dict[int, type[PaymentError]] = {
    102: GatewayRefused,  # merchant not found
    103: GatewayRefused,  # merchant inactive
    104: GatewayRefused,  # merchant invalid
    105: GatewayRefused,  # amount must be at least 1,000 rials
    106: GatewayRefused,  # callbackUrl invalid
    113: GatewayRefused,  # amount above the transaction limit
    202: NotPaid,  # the order was not paid, or the payment failed
    203: NotPaid,  # invalid trackId
}


class Zibal:
    name = "zibal"

    def __init__(self, merchant: str, base_url: str, timeout_s: float):
        self.merchant = merchant
        self.base = base_url.rstrip("/")
        self.timeout_s = timeout_s

    def _call(self, path: str, body: dict, ok=(100,)) -> dict:
        _status, doc = post_json(self.base + path, {"merchant": self.merchant, **body}, self.timeout_s)
        result = doc.get("result")
        if result in ok:
            return doc
        cls = CODES.get(result, GatewayUnavailable) if isinstance(result, int) else GatewayUnavailable
        raise cls(f"zibal {path.rsplit('/', 1)[-1]}: result {result}", result)

    def request(self, *, amount_toman, callback_url, description, order_id, mobile=None) -> str:
        body = {"amount": units.to_gateway(amount_toman, UNIT), "callbackUrl": callback_url,
                "description": description, "orderId": order_id}
        if local_mobile(mobile):
            body["mobile"] = local_mobile(mobile)
        track = str(self._call("/v1/request", body).get("trackId") or "")
        if not AUTHORITY.match(track):
            raise GatewayUnavailable("zibal request: no trackId in the answer")
        return track

    def pay_url(self, authority: str) -> str:
        return f"{self.base}/start/{authority}"

    def verify(self, authority, amount_toman, order_id) -> Verified:
        track = int(authority) if authority.isdigit() else authority
        doc = self._call("/v1/verify", {"trackId": track}, ok=(100, ALREADY))
        already = doc.get("result") == ALREADY
        if already or doc.get("amount") is None:  # 201 says little: ask what was paid
            doc = self._call("/v1/inquiry", {"trackId": track})
            if doc.get("status") not in (1, 2):  # 1 paid and verified, 2 paid not verified
                raise NotPaid(f"zibal inquiry: status {doc.get('status')}", doc.get("status"))
        paid = units.from_gateway(int(doc.get("amount") or 0), UNIT)
        if paid != amount_toman:
            raise AmountMismatch(f"zibal: paid {doc.get('amount')} rials for an order of {amount_toman} toman")
        if doc.get("orderId") not in (None, "", order_id):
            raise NotPaid("zibal: the payment belongs to another order")
        return Verified(ref_id=str(doc.get("refNumber") or ""), card_pan=mask_pan(doc.get("cardNumber")),
                        already=already)

    def callback(self, args) -> Callback | None:
        track = args.get("trackId", "")
        if not AUTHORITY.match(track):
            return None
        return Callback(track, args.get("success") == "1")

    def unverified(self) -> list[str]:
        return []
