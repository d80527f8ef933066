from datetime import datetime, timezone

from upgate.billing import jalali


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


def test_day_bounds_are_exact_tehran_midnights():
    nowruz = ts(2026, 3, 20, 20, 30)  # 1405-01-01 00:00 Tehran
    assert jalali.tehran_day_bounds(nowruz - 0.2) == (nowruz - 86_400, nowruz)
    assert jalali.tehran_day_bounds(nowruz) == (nowruz, nowruz + 86_400)
    assert jalali.next_tehran_midnight(nowruz - 0.2) == nowruz
    assert jalali.seconds_to_tehran_midnight(nowruz - 0.2) == 1  # rounded up, never 0
    # 2020, when Iran still had summer time: 1399-01-02 (2020-03-21) had no midnight, it began
    # when the clock jumped to 01:00 +04:30, and lasted 23 hours; 1399-06-30 lasted 25
    start = ts(2020, 3, 20, 20, 30)
    assert jalali.day_key(start) == "1399-01-02"
    assert jalali.tehran_day_bounds(start + 3600) == (start, start + 23 * 3600)
    assert jalali.day_key(start + 23 * 3600) == "1399-01-03"
    autumn = jalali.tehran_day_bounds(ts(2020, 9, 20, 12, 0))
    assert jalali.day_key(autumn[0]) == "1399-06-30" and autumn[1] - autumn[0] == 25 * 3600
    assert jalali.day_key(autumn[1]) == "1399-06-31" and jalali.day_key(autumn[1] - 0.001) == "1399-06-30"


def test_next_month_start():
    nowruz = ts(2026, 3, 20, 20, 30)  # 1405-01-01 00:00 Tehran
    assert jalali.next_month_start(nowruz - 0.2) == nowruz
    assert jalali.next_month_start(nowruz) == nowruz + 31 * 86_400  # Farvardin has 31 days
    assert jalali.month_key(jalali.next_month_start(nowruz)) == "1405-02"
    assert jalali.seconds_to_next_month(nowruz - 0.2) == 1
    assert jalali.seconds_to_next_month(nowruz) == 31 * 86_400
