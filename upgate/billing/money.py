"""Money: Decimal toman at the edges, integer micro-toman everywhere inside.

Redis and Lua only ever see integers. Lua numbers are doubles, so every stored amount must
stay within 2**53 micro-toman (about 9 billion toman) to remain exact.
"""
from __future__ import annotations

from decimal import ROUND_CEILING, Decimal, InvalidOperation

MICRO = 1_000_000
MAX_MICRO = 2**53
_Q = Decimal("0.000001")


class AmountError(ValueError):
    """An amount is malformed, has more than six fractional digits, or is out of range."""


def parse_toman(text: str | int | Decimal, *, allow_negative: bool = False) -> int:
    """Decimal toman (string) → micro-toman int. Refuses floats, NaN, >6 decimals, > 2**53."""
    if isinstance(text, float) or isinstance(text, bool):
        raise AmountError("amounts must be decimal strings, not floats")
    try:
        value = Decimal(str(text).strip())
    except InvalidOperation:
        raise AmountError(f"not a decimal amount: {text!r}") from None
    if not value.is_finite():
        raise AmountError(f"not a finite amount: {text!r}")
    micro = value * MICRO
    if micro != micro.to_integral_value():
        raise AmountError(f"at most six fractional digits: {text!r}")
    micro = int(micro)
    if micro < 0 and not allow_negative:
        raise AmountError(f"amount must not be negative: {text!r}")
    check_range(micro)
    return micro


def check_range(micro: int) -> int:
    if abs(micro) > MAX_MICRO:
        raise AmountError("amount beyond 2^53 micro-toman (about 9,007,199,254 toman) is refused")
    return micro


def fmt(micro: int) -> str:
    """micro-toman int → "123.450000" (the spec's six-fractional-digit string). (Twice per
    request, for the access log: %-formatting of divmod's pair is the cheapest way.)"""
    micro = int(micro)
    if micro < 0:
        return "-%d.%06d" % divmod(-micro, MICRO)
    return "%d.%06d" % divmod(micro, MICRO)


def to_decimal(micro: int) -> Decimal:
    return (Decimal(int(micro)) / MICRO).quantize(_Q)


def cost_micro(tokens: int, toman_per_million: Decimal) -> int:
    """Price `tokens` at a per-million-token toman rate, rounded up to the next micro-toman.

    toman/1e6 tokens × 1e6 micro/toman = micro-toman per token, so the product is exact.
    """
    if tokens <= 0 or not toman_per_million:
        return 0
    return int((Decimal(tokens) * toman_per_million).to_integral_value(rounding=ROUND_CEILING))
