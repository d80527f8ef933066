"""Numbers as people read them, in either language: toman with thousands separators (whole
toman, or two decimals under 1,000: no six-decimal tails), counts, and Persian digits with the
Persian separators (٬ for thousands, ٫ for the decimal point). Pure functions.

And numbers as people type them: `plain_number` and `whole` are the one reader of typed digits
for every face (CLI, management API, console, dashboard). ASCII, Persian (۰–۹) and Arabic-Indic
(٠–٩) digits; `,` `٬` `،` between groups of three; `.` or `٫` before decimals. Everything else
that Unicode calls a digit (superscripts, circled, fullwidth, Devanagari …) is refused, and so
is anything longer than MAX_NUMBER_CHARS: `str.isdigit()` is not what `int()` reads."""
from __future__ import annotations

import re
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation

from upgate.billing import money

_FA_DIGITS = str.maketrans("0123456789,.-", "۰۱۲۳۴۵۶۷۸۹٬٫−")
_TO_ASCII = str.maketrans("۰۱۲۳۴۵۶۷۸۹٠١٢٣٤٥٦٧٨٩", "01234567890123456789")
_TYPED = str.maketrans("۰۱۲۳۴۵۶۷۸۹٠١٢٣٤٥٦٧٨٩٬،٫−", "01234567890123456789,,.-")
_SHAPE = re.compile(r"(-?)([0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.([0-9]+))?")
_EDGES = " \t\r\n\u00a0\u200c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
MAX_NUMBER_CHARS = 40  # "-9,007,199,254.000000" is 21; anything much longer is not typed by a person
DASH = "—"


class NumberError(ValueError):
    """Not a number as people type them (see the module's docstring)."""


def localize(text: str, lang: str) -> str:
    """ASCII digits, ',' and '.' of an already formatted number → Persian ones when lang is fa."""
    return text.translate(_FA_DIGITS) if lang == "fa" else text


def to_ascii_digits(text: str) -> str:
    """Persian (۰–۹) and Arabic-Indic (٠–٩) digits → ASCII; everything else unchanged."""
    return text.translate(_TO_ASCII)


def plain_number(text, *, decimals: bool = True, negative: bool = False) -> str:
    """A typed number → plain ASCII decimal text ("-1500.25", "10000"), or `NumberError`.
    Blanks and direction marks around it are ignored; separators must group by three."""
    if not isinstance(text, str):
        raise NumberError(f"not text: {type(text).__name__}")
    s = text.strip(_EDGES)
    if len(s) > MAX_NUMBER_CHARS:
        raise NumberError(f"longer than {MAX_NUMBER_CHARS} characters")
    m = _SHAPE.fullmatch(s.translate(_TYPED))
    if m is None:
        raise NumberError(f"not a number: {text!r}")
    sign, whole_part, fraction = m.groups()
    if sign and not negative:
        raise NumberError(f"must not be negative: {text!r}")
    if fraction is not None and not decimals:
        raise NumberError(f"not a whole number: {text!r}")
    return sign + whole_part.replace(",", "") + ("." + fraction if fraction is not None else "")


def whole(text, *, negative: bool = False) -> int:
    """A typed whole number → int (at most MAX_NUMBER_CHARS characters), or `NumberError`."""
    return int(plain_number(text, decimals=False, negative=negative))


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


_SHORT = {"en": ((1e9, "B"), (1e6, "M"), (1e3, "k")),
          "fa": ((1e9, "\u00a0میلیارد"), (1e6, "\u00a0میلیون"), (1e3, "\u00a0هزار"))}


def short(v: float, lang: str = "en") -> str:
    """A chart axis's number, short: 1200 → "1.2k" / "۱٫۲ هزار", 3500000 → "3.5M" / "۳٫۵ میلیون"
    (Persian words, not Latin letters, after Persian digits)."""
    for div, suffix in _SHORT.get(lang, _SHORT["en"]):
        if abs(v) >= div:
            return localize(f"{v / div:.1f}".rstrip("0").rstrip("."), lang) + suffix
    return localize(f"{v:.2f}".rstrip("0").rstrip(".") if v % 1 else f"{int(v)}", lang)


def plain_toman(micro: int | None) -> str:
    """Integer micro-toman → plain decimal text for a form field ("1500", "0.25"); None → ""."""
    if micro is None:
        return ""
    return format(money.to_decimal(micro).normalize(), "f")

