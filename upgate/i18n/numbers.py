"""Numbers as people read them, in either language: toman with thousands separators (whole
toman, or two decimals under 1,000: no six-decimal tails), counts, and Persian digits with the
Persian separators (٬ for thousands, ٫ for the decimal point). Pure functions."""
from __future__ import annotations

import re
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation

from upgate.billing import money

_FA_DIGITS = str.maketrans("0123456789,.-", "۰۱۲۳۴۵۶۷۸۹٬٫−")
_TO_ASCII = str.maketrans("۰۱۲۳۴۵۶۷۸۹٠١٢٣٤٥٦٧٨٩", "01234567890123456789")
DASH = "—"


def localize(text: str, lang: str) -> str:
    """ASCII digits, ',' and '.' of an already formatted number → Persian ones when lang is fa."""
    return text.translate(_FA_DIGITS) if lang == "fa" else text


def to_ascii_digits(text: str) -> str:
    """Persian (۰–۹) and Arabic-Indic (٠–٩) digits → ASCII; everything else unchanged."""
    return text.translate(_TO_ASCII)


def _decimal(value) -> Decimal | None:
    if value is None or value == "":
        return None
    try:
        return Decimal(str(value))
    except InvalidOperation:
        return None


def exact_toman(value) -> str:
    """A toman amount with separators and every significant fraction digit ("1,234,567.5"):
    the operator's console, where the last micro-toman matters. None → "—"."""
    d = _decimal(value)
    if d is None:
        return DASH if value in (None, "") else str(value)
    text = f"{d:,f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def toman(value, lang: str = "en") -> str:
    """What an account holder reads: whole toman from 1,000 up, two decimals below ("12.50",
    "0.03"; whole amounts without ".00"), thousands separators, Persian digits in fa."""
    d = _decimal(value)
    if d is None:
        return DASH
    if abs(d) >= 1000:
        d = d.quantize(Decimal(1), ROUND_HALF_UP)
    else:
        d = d.quantize(Decimal("0.01"), ROUND_HALF_UP)
        if d == d.to_integral_value():
            d = d.quantize(Decimal(1))
    text = f"{d:,f}"
    return localize("0" if text in ("-0", "-0.00") else text, lang)


def micro_toman(value: int | None, lang: str = "en") -> str:
    """Integer micro-toman → `toman`."""
    return DASH if value is None else toman(money.to_decimal(value), lang)


def count(n, lang: str = "en") -> str:
    """A whole count with separators ("12,345"; "۱۲٬۳۴۵" in fa)."""
    return DASH if n is None else localize(f"{int(n):,}", lang)


def plain_toman(micro: int | None) -> str:
    """Integer micro-toman → plain decimal text for a form field ("1500", "0.25"); None → ""."""
    if micro is None:
        return ""
    return format(money.to_decimal(micro).normalize(), "f")


_SEPARATORS = "٬,،"  # Persian, Latin and Arabic thousands separators
_GROUPED = re.compile(r"[+-]?[0-9]{1,3}(?:,[0-9]{3})+(?:\.[0-9]+)?")


def plain_amount(text: str) -> str:
    """An amount as a person types it → plain decimal text for the one amount parser:
    Persian, Arabic-Indic or Latin digits, thousands separators (٬ , ،) between groups of three,
    ٫ or . as the decimal point ("۵۰٬۰۰۰" → "50000", "1,500.25" → "1500.25"). Anything else is
    returned with its digits made ASCII, for the parser to refuse ("1,00" stays "1,00")."""
    s = to_ascii_digits(str(text)).strip().replace("٫", ".").replace("−", "-")
    for sep in _SEPARATORS:
        s = s.replace(sep, ",")
    return s.replace(",", "") if _GROUPED.fullmatch(s) else s
