"""Toman ⇄ a gateway's unit, in one place. Orders count whole toman; Zarinpal and Zibal count
rials unless told otherwise (1 toman = 10 rials)."""
from __future__ import annotations

RIALS_PER_TOMAN = 10
MICRO = 1_000_000  # micro-toman per toman (upgate/billing/money.py)


def to_gateway(toman: int, unit: str) -> int:
    """Whole toman → the gateway's integer amount in `unit` ("IRR" rials, "IRT" toman)."""
    if unit == "IRR":
        return toman * RIALS_PER_TOMAN
    if unit == "IRT":
        return toman
    raise ValueError(f"unknown currency unit {unit!r}")


def from_gateway(amount: int, unit: str) -> int | None:
    """A gateway's integer amount in `unit` → whole toman (None when it is not a whole toman)."""
    if unit == "IRT":
        return int(amount)
    if unit == "IRR":
        return int(amount) // RIALS_PER_TOMAN if int(amount) % RIALS_PER_TOMAN == 0 else None
    raise ValueError(f"unknown currency unit {unit!r}")


def micro(toman: int) -> int:
    return toman * MICRO


def whole_toman(amount_micro: int) -> int:
    """An order's stored amount (micro-toman, always whole toman) → toman."""
    return amount_micro // MICRO
