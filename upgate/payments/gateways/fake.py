"""`fake`: a built-in stand-in for a payment gateway, so `upgate demo` (and tests) show the whole
flow without a merchant account. Its "bank page" is served by the gateway itself
(/dashboard/topup/fake-bank/{authority}, Pay and Cancel); its state is in Redis, so every node
sees the same payments. It behaves like Zarinpal: verify answers paid once, then "verified
before"; an unpaid or cancelled payment is NotPaid; another amount is AmountMismatch.
Never for real money: it confirms whatever its own page was told."""
from __future__ import annotations

import secrets

from upgate.payments.errors import AmountMismatch, NotPaid
from upgate.payments.gateways.base import AUTHORITY, Callback, Verified
from upgate.store import connection as store, keyspace

KEEP_S = 86400  # a fake payment is forgotten after a day
PAGE = "/dashboard/topup/fake-bank/"


class Fake:
    name = "fake"

    def __init__(self, client, public_url: str = ""):
        self.client = client
        self.public_url = public_url.rstrip("/")

    def request(self, *, amount_toman, callback_url, description, order_id, mobile=None) -> str:
        authority = "FAKE" + secrets.token_hex(16)
        key = keyspace.fake_bank(authority)
        self.client.hset(key, mapping={"amount": amount_toman, "state": "pending",
                                       "callback": callback_url, "order_id": order_id})
        self.client.expire(key, KEEP_S)
        return authority

    def pay_url(self, authority: str) -> str:
        return f"{self.public_url}{PAGE}{authority}"  # relative without UPGATE_PUBLIC_URL

    def payment(self, authority: str) -> dict | None:
        """The bank page's view of one payment: amount (toman), state, callback; None if unknown."""
        if not AUTHORITY.match(authority or ""):
            return None
        raw = self.client.hgetall(keyspace.fake_bank(authority))
        return store.text_map(raw) if raw else None

    def decide(self, authority: str, pay: bool) -> str | None:
        """The bank page's Pay or Cancel: the address the browser goes back to (the callback
        with Authority and Status), None for an unknown payment. Only a pending payment changes."""
        found = self.payment(authority)
        if found is None:
            return None
        key = keyspace.fake_bank(authority)
        if found["state"] == "pending":
            state = "paid" if pay else "cancelled"
            self.client.hset(key, mapping={"state": state, "ref_id": str(secrets.randbelow(10**10))})
            found["state"] = state
        status = "OK" if found["state"] in ("paid", "verified") else "NOK"
        sep = "&" if "?" in found["callback"] else "?"
        return f"{found['callback']}{sep}Authority={authority}&Status={status}"

    def verify(self, authority, amount_toman, order_id) -> Verified:
        found = self.payment(authority)
        if found is None:
            raise NotPaid("fake: unknown authority", -54)
        if int(found["amount"]) != amount_toman:
            raise AmountMismatch("fake: the amounts differ", -50)
        if found["state"] not in ("paid", "verified"):
            raise NotPaid(f"fake: payment {found['state']}", -51)
        first = self.client.hincrby(keyspace.fake_bank(authority), "verified", 1) == 1
        if first:
            self.client.hset(keyspace.fake_bank(authority), "state", "verified")
        return Verified(ref_id=found.get("ref_id", ""), card_pan="603799******0000", already=not first)

    def callback(self, args) -> Callback | None:
        authority = args.get("Authority", "")
        if not AUTHORITY.match(authority) or not authority.startswith("FAKE"):
            return None
        return Callback(authority, args.get("Status") == "OK")

    def unverified(self) -> list[str]:
        return []
