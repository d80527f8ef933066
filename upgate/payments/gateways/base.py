"""The one small interface every payment gateway driver has (shetabit/multipay's and payman's
shape): request a payment, the bank page's address, verify; plus reading its callback's query.
A new gateway is one file that implements `Gateway` and maps its codes to upgate/payments/errors.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Verified:
    """The gateway confirmed the payment (the money is the merchant's now)."""

    ref_id: str  # the bank's reference, shown on the receipt
    card_pan: str | None  # masked
    already: bool = False  # verified before (Zarinpal 101, Zibal 201)


@dataclass(frozen=True)
class Callback:
    """What the browser brought back: which payment, and what the gateway claimed (a claim
    only: the order is decided by verify)."""

    authority: str
    ok: bool


class Gateway(Protocol):
    name: str

    def request(self, *, amount_toman: int, callback_url: str, description: str, order_id: str,
                mobile: str | None) -> str:
        """Open a payment; returns the gateway's authority (Zibal: trackId)."""

    def pay_url(self, authority: str) -> str:
        """The bank page the browser is sent to."""

    def verify(self, authority: str, amount_toman: int, order_id: str) -> Verified:
        """Ask the gateway whether this payment of exactly this amount was made; raises NotPaid,
        AmountMismatch, GatewayUnavailable or GatewayRefused otherwise."""

    def callback(self, args: dict[str, str]) -> Callback | None:
        """The callback's query (first value of each argument) → its claim; None when it names
        no payment of this gateway."""

    def unverified(self) -> list[str]:
        """Authorities paid but not verified yet, when the gateway can list them (else [])."""


AUTHORITY = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # what a callback may name; anything else is ignored


def mask_pan(pan) -> str | None:
    """A card number as a receipt may show it: the first 6 and last 4 digits, the rest `*`
    (gateways already mask; a full number that slipped through is masked here)."""
    if pan is None or str(pan).strip() == "":
        return None
    text = re.sub(r"[^0-9*]", "", str(pan))
    if len(text) < 10:
        return "*" * len(text)
    return text[:6] + "*" * (len(text) - 10) + text[-4:]


def local_mobile(phone) -> str | None:
    """An account's phone as Iranian gateways take it (09121234567), None when it is not one."""
    digits = re.sub(r"[^0-9]", "", str(phone or ""))
    if digits.startswith("98") and len(digits) == 12:
        digits = "0" + digits[2:]
    return digits if re.fullmatch(r"09[0-9]{9}", digits) else None
