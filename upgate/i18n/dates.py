"""Moments as people read them: Jalali dates in Tehran time, in either language's digits."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import jdatetime

from upgate.billing import jalali
from upgate.i18n.numbers import DASH, localize

MONTHS_FA = ("فروردین", "اردیبهشت", "خرداد", "تیر", "مرداد", "شهریور", "مهر", "آبان", "آذر",
             "دی", "بهمن", "اسفند")
MONTHS_EN = ("Farvardin", "Ordibehesht", "Khordad", "Tir", "Mordad", "Shahrivar", "Mehr", "Aban",
             "Azar", "Dey", "Bahman", "Esfand")


# What every function here can turn into Tehran time and a Jalali date (Jalali year 1 is 622;
# Tehran is ahead of UTC): a stored moment outside it (9999-12-31, from before the expiry bound)
# is shown as no date at all, never a 500.
_EARLIEST = datetime(623, 1, 1, tzinfo=timezone.utc)
_LATEST = datetime(9999, 12, 29, tzinfo=timezone.utc)


def parse_time(value) -> datetime | None:
    """Unix seconds (int/float), unix ms (int > 1e11) or ISO 8601 UTC text → an aware
    datetime, else None (also for a moment outside the years 623-9999)."""
    if value is None or value == "":
        return None
    if isinstance(value, (int, float)):
        if not value:
            return None
        try:
            moment = datetime.fromtimestamp(value / 1000 if value > 1e11 else value, timezone.utc)
        except (OverflowError, OSError, ValueError):  # beyond year 9999
            return None
    else:
        try:
            moment = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        except ValueError:
            return None
        moment = moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)
    return moment if _EARLIEST <= moment <= _LATEST else None


def jalali_text(value, seconds: bool = False) -> str:
    """A moment as a Jalali date and time in Tehran, ASCII digits: "1405-09-02 22:34"."""
    moment = parse_time(value)
    if moment is None:
        return DASH
    try:  # a stored 9999-12-31 is past Jalali's (and Tehran's) last year: never a 500
        j = jdatetime.datetime.fromgregorian(datetime=moment.astimezone(jalali.TEHRAN))
    except (OverflowError, ValueError):
        return DASH
    return j.strftime("%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M")


def when(value, lang: str = "en", seconds: bool = False) -> str:
    """`jalali_text` with "/" between the date's parts, in the language's digits."""
    text = jalali_text(value, seconds)
    return text if text == DASH else localize(text.replace("-", "/"), lang)


def last_day(value) -> str | None:
    """The Jalali day ("1405-12-29", Tehran) a key expiring at `value` works through, when the
    expiry is a Tehran midnight (the end of the day before, as every face's date field means
    it); None for an expiry at another time of day (one set through the API)."""
    moment = parse_time(value)
    if moment is None:
        return None
    local = moment.astimezone(jalali.TEHRAN)
    if (local.hour, local.minute, local.second, local.microsecond) != (0, 0, 0, 0):
        return None
    return jdatetime.date.fromgregorian(date=(local - timedelta(days=1)).date()).strftime("%Y-%m-%d")


def iso(value) -> str:
    """The same moment as ISO 8601 UTC (a tooltip beside the Jalali one)."""
    moment = parse_time(value)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ") if moment else ""


def month_name(month: str, lang: str = "en") -> str:
    """ "1405-09" → "Azar 1405" / "آذر ۱۴۰۵"."""
    try:
        year, m = (int(x) for x in month.split("-"))
        name = (MONTHS_FA if lang == "fa" else MONTHS_EN)[m - 1]
    except (ValueError, IndexError):
        return month
    return f"{name} {localize(str(year), lang)}"


def day_label(day: str, lang: str = "en") -> str:
    """ "1405-09-02" → "09/02" (a chart's axis), in the language's digits."""
    return localize(day[5:].replace("-", "/") if len(day) == 10 else day, lang)
