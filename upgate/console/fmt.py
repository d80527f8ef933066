"""How the console shows numbers and times to people: toman with thousands separators, Jalali
dates in Tehran time. Pure functions, used by the templates (``fmt.toman(x)``)."""
from __future__ import annotations

from datetime import datetime, timezone
from decimal import Decimal, InvalidOperation

import jdatetime

from upgate.billing import jalali, money


def toman(value, places: int | None = None) -> str:
    """A toman amount (a six-fractional-digit string, micro-toman int via `micro`, or Decimal)
    → "1,234,567.5": thousands separators, trailing zeros of the fraction dropped. None → "—"."""
    if value is None or value == "":
        return "—"
    try:
        d = Decimal(str(value))
    except InvalidOperation:
        return str(value)
    if places is not None:
        d = d.quantize(Decimal(1).scaleb(-places))
    text = f"{d:,f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def micro(value: int | None) -> str:
    """Integer micro-toman → toman as `toman` shows it."""
    return "—" if value is None else toman(money.to_decimal(value))


def count(n) -> str:
    return "—" if n is None else f"{int(n):,}"


def _parse_time(value) -> datetime | None:
    """Unix seconds (int/float) or ISO 8601 UTC text → an aware datetime, else None."""
    if value is None or value == "":
        return None
    if isinstance(value, (int, float)):
        return datetime.fromtimestamp(value, timezone.utc) if value else None
    try:
        moment = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def when(value, seconds: bool = False) -> str:
    """A moment (unix s or ISO UTC) as a Jalali date and time in Tehran: "1405-09-02 22:34"."""
    moment = _parse_time(value)
    if moment is None:
        return "—"
    local = moment.astimezone(jalali.TEHRAN)
    j = jdatetime.datetime.fromgregorian(datetime=local)
    return j.strftime("%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M")


def iso(value) -> str:
    """The same moment as ISO 8601 UTC (a tooltip next to the Jalali one)."""
    moment = _parse_time(value)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ") if moment else ""


def short_day(day: str) -> str:
    """ "1405-09-02" → "09-02" (chart axis labels)."""
    return day[5:] if len(day) == 10 else day


def plain(value: int | None) -> str:
    """Integer micro-toman → plain decimal text for a form field ("1500", "0.25"); None → ""."""
    if value is None:
        return ""
    return format(money.to_decimal(value).normalize(), "f")
