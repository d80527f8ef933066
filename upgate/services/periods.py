"""A period an operator asks for in Jalali days (`from`, `to`: "1405-09-02", any digits, "/" or
"-"), as the [start, end) Unix ms between Tehran midnights: the audit log's and the request
search's filters. Refused with the field at fault; nothing is listed day by day, so any span
costs the same."""
from __future__ import annotations

from upgate.billing import jalali
from upgate.services import phones
from upgate.services.account_rules import AccountError


class InvalidPeriod(AccountError):
    reason = "date_malformed"

    def __init__(self, message: str, field: str, **kw):
        super().__init__(message, **kw)
        self.field = field


def _day(text: str, field: str):
    try:
        day = jalali.parse_day(phones.ascii_digits(text.strip()).replace("/", "-"))
    except ValueError:
        raise InvalidPeriod(f"{field} must be a Jalali day like 1405-09-02, got {text[:40]!r}", field) from None
    if not 1300 <= day.year <= 1600:
        raise InvalidPeriod(f"{field} must be a Jalali day between the years 1300 and 1600", field,
                            reason="date_out_of_range")
    return day


def bounds_ms(start: str | None, end: str | None) -> tuple[int | None, int | None]:
    """(start ms or None, end ms or None): `start`'s Tehran midnight, the midnight after `end`."""
    lo = hi = None
    if start:
        d = _day(start, "from")
        lo = int(jalali.tehran_day_bounds(_noon(d))[0] * 1000)
    if end:
        d = _day(end, "to")
        hi = int(jalali.tehran_day_bounds(_noon(d))[1] * 1000)
    if lo is not None and hi is not None and hi <= lo:
        raise InvalidPeriod("to is before from", "to", reason="range_backwards")
    return lo, hi


def _noon(jday) -> float:
    from datetime import datetime, time as dtime

    return datetime.combine(jday.togregorian(), dtime(12), jalali.TEHRAN).timestamp()
