"""upgate/i18n/: Persian digits and separators, toman as a person reads it, Jalali dates in
Tehran time, the language choice, and a catalog that has every sentence the dashboard says."""
from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest

from upgate import i18n
from upgate.i18n import dates, numbers

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("value,en,fa", [
    ("1234567.891", "1,234,568", "۱٬۲۳۴٬۵۶۸"),  # whole toman from 1,000 up
    ("999.994", "999.99", "۹۹۹٫۹۹"),  # two decimals below
    ("12.5", "12.50", "۱۲٫۵۰"),
    ("12", "12", "۱۲"),  # a whole amount without ".00"
    ("0.000001", "0", "۰"),
    ("-2500.4", "-2,500", "−۲٬۵۰۰"),
    (None, "—", "—"),
])
def test_toman(value, en, fa):
    assert numbers.toman(value, "en") == en and numbers.toman(value, "fa") == fa


def test_micro_toman_and_counts():
    assert numbers.micro_toman(1_500_250_000, "fa") == "۱٬۵۰۰"
    assert numbers.count(12345, "fa") == "۱۲٬۳۴۵" and numbers.count(12345) == "12,345"


def test_jalali_dates_in_tehran_time():
    # 2026-11-25 20:30 UTC is 1405-09-05 00:00 in Tehran (UTC+3:30): the next Jalali day
    ts = 1795638600
    assert dates.jalali_text(ts) == "1405-09-05 00:00"
    assert dates.when(ts, "fa") == "۱۴۰۵/۰۹/۰۵ ۰۰:۰۰"
    assert dates.when(ts * 1000, "en") == "1405/09/05 00:00"  # unix ms too
    assert dates.month_name("1405-09", "fa") == "آذر ۱۴۰۵" and dates.month_name("1405-01", "en") == "Farvardin 1405"


def test_language_choice_persian_first():
    assert i18n.choose(None, None) == "fa"
    assert i18n.choose("en", "fa") == "en" and i18n.choose(None, "en") == "en"
    assert i18n.choose("de", None) == "fa"  # not offered: the default
    assert i18n.locale("fa").translate("Keys") == "کلیدها" and i18n.locale("fa").rtl
    assert i18n.locale("en").translate("Keys") == "Keys"


def test_every_sentence_of_the_dashboard_and_the_console_has_its_persian():
    said = set()
    # and the admin log's verbs and words, which the console shows in the reader's language
    for path in [*(p for face in ("dashboard", "console", "payments", "i18n", "alerts") for p in (ROOT / "upgate" / face).rglob("*")),
                 ROOT / "upgate" / "services" / "admin_log.py"]:
        if path.suffix in (".html", ".py"):
            text = path.read_text(encoding="utf-8")
            for pattern in (r'''\b_\((["'])((?:(?!\1).)+)\1''', r'''translate\((["'])((?:(?!\1).)+)\1''',
                            r'''\bN_\((["'])((?:(?!\1).)+)\1'''):
                said |= {m.group(2) for m in re.finditer(pattern, text)}
    with open(ROOT / "upgate" / "i18n" / "locale" / "fa.csv", encoding="utf-8") as f:
        catalog = {row[0]: row[1] for row in csv.reader(f)}
    assert len(said) > 100
    assert sorted(said - set(catalog)) == []
    assert sorted(set(catalog) - said) == []  # nothing stale either
    for english, persian in catalog.items():  # placeholders survive translation
        assert set(re.findall(r"\{\w+\}", english)) == set(re.findall(r"\{\w+\}", persian)), english
        assert sorted(re.findall(r"%\(\w+\)s", english)) == sorted(re.findall(r"%\(\w+\)s", persian)), english


def test_the_catalogue_says_each_sentence_once():
    """fa.csv merges by union (.gitattributes), so two branches translating one sentence leave it
    twice, and tornado.locale silently keeps the last: each English id must stand once."""
    with open(ROOT / "upgate" / "i18n" / "locale" / "fa.csv", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    assert all(len(row) == 2 and row[0] and row[1] for row in rows)
    ids = [row[0] for row in rows]
    assert sorted(i for i in set(ids) if ids.count(i) > 1) == []
