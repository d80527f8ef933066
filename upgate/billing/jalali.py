"""Tehran-time calendar keys: the Jalali month (monthly limits, reports) and the day (free quota).

Keys are plain strings used inside Redis key and field names: month "1405-01", day "1405-01-31".
"""
from __future__ import annotations

import math
import time
from datetime import date, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import jdatetime

TEHRAN = ZoneInfo("Asia/Tehran")


def _tehran(ts: float | None) -> datetime:
    return datetime.fromtimestamp(time.time() if ts is None else ts, TEHRAN)


def month_key(ts: float | None = None) -> str:
    j = jdatetime.date.fromgregorian(date=_tehran(ts).date())
    return f"{j.year:04d}-{j.month:02d}"


def day_key(ts: float | None = None) -> str:
    j = jdatetime.date.fromgregorian(date=_tehran(ts).date())
    return f"{j.year:04d}-{j.month:02d}-{j.day:02d}"


def _day_start(d: date) -> float:
    """Unix seconds at which Tehran day `d` begins: its midnight, or where the clock skipped
    midnight (summer time, until 2022, began at 00:00), the instant of the jump."""
    return datetime.combine(d, datetime.min.time(), TEHRAN).timestamp()


def tehran_day_bounds(ts: float | None = None) -> tuple[float, float]:
    """[start, end) of the Tehran calendar day holding `ts`, as exact Unix seconds."""
    d = _tehran(ts).date()
    return _day_start(d), _day_start(d + timedelta(days=1))


def next_tehran_midnight(ts: float | None = None) -> float:
    """Unix seconds at which the next Tehran day begins (exact, not rounded)."""
    return tehran_day_bounds(ts)[1]


def next_month_start(ts: float | None = None) -> float:
    """Unix seconds at which the next Jalali month begins (its first day's Tehran midnight)."""
    j = jdatetime.date.fromgregorian(date=_tehran(ts).date())
    first = jdatetime.date(j.year + (j.month == 12), j.month % 12 + 1, 1)
    return _day_start(first.togregorian())


def _seconds_until(moment: float, ts: float | None) -> int:
    return max(1, math.ceil(moment - (time.time() if ts is None else ts)))


def seconds_to_tehran_midnight(ts: float | None = None) -> int:
    """Whole seconds until the next Tehran day, rounded up (at least 1)."""
    return _seconds_until(next_tehran_midnight(ts), ts)


def seconds_to_next_month(ts: float | None = None) -> int:
    """Whole seconds until the next Jalali month, rounded up (at least 1): the Retry-After of a
    spent monthly limit."""
    return _seconds_until(next_month_start(ts), ts)


def parse_day(text: str) -> jdatetime.date:
    """"1405-01-31" → jdatetime.date; ValueError with a clear message otherwise."""
    try:
        y, m, d = (int(p) for p in text.split("-"))
        return jdatetime.date(y, m, d)
    except (ValueError, TypeError):
        raise ValueError(f"not a Jalali date YYYY-MM-DD: {text!r}") from None


def parse_month(text: str) -> tuple[jdatetime.date, jdatetime.date]:
    """"1405-01" → (first day, last day) of that Jalali month."""
    try:
        y, m = (int(p) for p in text.split("-"))
        first = jdatetime.date(y, m, 1)
    except (ValueError, TypeError):
        raise ValueError(f"not a Jalali month YYYY-MM: {text!r}") from None
    nxt = jdatetime.date(y + (m == 12), m % 12 + 1, 1)
    return first, nxt - jdatetime.timedelta(days=1)


def days(first: jdatetime.date, last: jdatetime.date) -> list[str]:
    out, d = [], first
    while d <= last:
        out.append(f"{d.year:04d}-{d.month:02d}-{d.day:02d}")
        d += jdatetime.timedelta(days=1)
    return out


def this_month(ts: float | None = None) -> tuple[jdatetime.date, jdatetime.date]:
    return parse_month(month_key(ts))


def utc_iso(ts: float) -> str:
    """ISO 8601 UTC; a moment outside the years 1-9999 (a stored value no face accepts any
    more) is shown as the nearest end of that range, never an exception."""
    try:
        return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, OSError, ValueError):
        return "9999-12-31T23:59:59Z" if ts > 0 else "0001-01-01T00:00:00Z"


def day_start_ms(day: jdatetime.date, after: int = 0) -> int:
    """Unix ms at which the Tehran day `after` days past Jalali `day` begins (after=1: the end
    of `day`, which is what a date typed as an upper bound means)."""
    return int(_day_start(day.togregorian() + timedelta(days=after)) * 1000)
