"""How the console shows numbers and times to people: toman with thousands separators (every
significant digit: the operator's last micro-toman matters), Jalali dates in Tehran time. Pure
functions used by the templates (``fmt.toman(x)``); the formatting itself lives in
upgate/i18n/ (shared with the dashboard), English digits here."""
from __future__ import annotations

from upgate.billing import money
from upgate.i18n import dates, numbers


def toman(value, places: int | None = None) -> str:
    """A toman amount (a six-fractional-digit string, micro-toman int via `micro`, or Decimal)
    → "1,234,567.5": thousands separators, trailing zeros of the fraction dropped. None → "—"."""
    if places is not None and value not in (None, ""):
        from decimal import Decimal, InvalidOperation
        try:
            value = Decimal(str(value)).quantize(Decimal(1).scaleb(-places))
        except InvalidOperation:
            return str(value)
    return numbers.exact_toman(value)


def micro(value: int | None) -> str:
    """Integer micro-toman → toman as `toman` shows it."""
    return "—" if value is None else toman(money.to_decimal(value))


def count(n) -> str:
    return numbers.count(n)


_parse_time = dates.parse_time


def when(value, seconds: bool = False) -> str:
    """A moment (unix s or ISO UTC) as a Jalali date and time in Tehran: "1405-09-02 22:34"."""
    return dates.jalali_text(value, seconds)


def iso(value) -> str:
    """The same moment as ISO 8601 UTC (a tooltip next to the Jalali one)."""
    return dates.iso(value)


def short_day(day: str) -> str:
    """ "1405-09-02" → "09-02" (chart axis labels)."""
    return day[5:] if len(day) == 10 else day


def plain(value: int | None) -> str:
    """Integer micro-toman → plain decimal text for a form field ("1500", "0.25"); None → ""."""
    if value is None:
        return ""
    return format(money.to_decimal(value).normalize(), "f")
