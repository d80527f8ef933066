from datetime import datetime, timezone

from upgate import jalali


def ts(*a):
    return datetime(*a, tzinfo=timezone.utc).timestamp()


def test_month_rolls_at_tehran_midnight_not_utc():
    # Nowruz 1405: 2026-03-21 00:00 Tehran = 2026-03-20 20:30 UTC
    assert jalali.month_key(ts(2026, 3, 20, 20, 29)) == "1404-12"
    assert jalali.month_key(ts(2026, 3, 20, 20, 31)) == "1405-01"
    assert jalali.day_key(ts(2026, 3, 20, 20, 31)) == "1405-01-01"


def test_month_bounds_and_days():
    first, last = jalali.parse_month("1405-01")
    assert len(jalali.days(first, last)) == 31
    first, last = jalali.parse_month("1405-07")
    assert len(jalali.days(first, last)) == 30


def test_bad_dates():
    import pytest

    for bad in ("1405-13", "x", "1405"):
        with pytest.raises(ValueError):
            jalali.parse_month(bad)
    with pytest.raises(ValueError):
        jalali.parse_day("1405-02-32")
