"""Languages for every page a person reads (the dashboard now, the console next), built on
``tornado.locale``: message ids are the English sentence in the source, catalogs are CSV files
beside this module (``locale/fa.csv``: "English","Persian"), one ``_()`` per string. English
needs no catalog: an id is its own English text.

``Formatter(lang)`` is what a template calls for numbers and dates (``fmt.toman(x)``,
``fmt.when(ts)``), so Persian digits, separators and Jalali dates are decided here only.

Persian first: FA is the default; ``choose`` picks the page's language from ``?lang=``, then a
remembered cookie, else Persian.
"""
from __future__ import annotations

import functools
from pathlib import Path

import tornado.locale

from upgate.i18n import dates, numbers

FA, EN = "fa", "en"
LANGS = (FA, EN)
DEFAULT = FA
CATALOG = Path(__file__).parent / "locale"
_TORNADO_CODE = {FA: "fa", EN: "en_US"}


@functools.lru_cache(maxsize=1)
def _load() -> None:
    # tornado.locale keeps its catalogs in module globals: loaded once per process, and the
    # default stays en_US so an id with no entry falls back to its English text.
    tornado.locale.load_translations(str(CATALOG))
    tornado.locale.set_default_locale("en_US")


def N_(text: str) -> str:
    """Marks a sentence translated later (a class attribute, a table of labels): returns it as
    it is, and lets the catalog test find it."""
    return text


def locale(lang: str) -> tornado.locale.Locale:
    """The tornado Locale for "fa" or "en" (anything else: the default language)."""
    _load()
    return tornado.locale.get(_TORNADO_CODE.get(lang, _TORNADO_CODE[DEFAULT]))


def choose(query: str | None, cookie: str | None, default: str = DEFAULT) -> str:
    """The page's language: an explicit ?lang= wins, then the remembered choice, else `default`
    (Persian for account holders; the console passes English)."""
    for candidate in (query, cookie):
        if candidate in LANGS:
            return candidate
    return default


class Formatter:
    """Numbers and dates in one language, for templates."""

    def __init__(self, lang: str):
        self.lang = lang if lang in LANGS else DEFAULT
        self.rtl = self.lang == FA

    def toman(self, value) -> str:
        return numbers.toman(value, self.lang)

    def micro(self, value: int | None) -> str:
        return numbers.micro_toman(value, self.lang)

    def exact(self, value) -> str:
        """Every significant digit of a toman amount (a tooltip beside the rounded one)."""
        return numbers.localize(numbers.exact_toman(value), self.lang)

    def exact_micro(self, value: int | None) -> str:
        return numbers.DASH if value is None else self.exact(numbers.money.to_decimal(value))

    def count(self, n) -> str:
        return numbers.count(n, self.lang)

    def axis(self, v: float) -> str:
        """A chart axis's number, short, with the language's digits and words ("۲۰۰ هزار")."""
        return numbers.short(v, self.lang)

    def digits(self, text) -> str:
        return numbers.localize(str(text), self.lang)

    def when(self, value, seconds: bool = False) -> str:
        return dates.when(value, self.lang, seconds)

    def iso(self, value) -> str:
        return dates.iso(value)

    def iso_date(self, value) -> str:
        """The UTC date of a moment, "2027-03-20" (a date field's value)."""
        return dates.iso(value)[:10]

    def until(self, value) -> str:
        """An expiry as people read it: the Jalali day it works through ("1405/12/29") when it
        ends a Tehran day, else its date and time."""
        day = dates.last_day(value)
        return self.when(value) if day is None else numbers.localize(day.replace("-", "/"), self.lang)

    def until_field(self, value) -> str:
        """An expiry as a date field's value, what the customer would type to keep it: the day
        it works through, in the page's digits ("" when none)."""
        day = dates.last_day(value)
        text = day.replace("-", "/") if day else self.jalali_date(value)
        return numbers.localize(text, self.lang)

    def amount_field(self, micro: int | None) -> str:
        """Micro-toman as a form field's value in the page's digits, with the separators the page
        prints ("۵۰٬۰۰۰", "1,500.25"): the amount parser takes it back as it is."""
        return "" if micro is None else numbers.localize(numbers.exact_toman(numbers.money.to_decimal(micro)), self.lang)

    def jalali_date(self, value) -> str:
        """The Tehran day of a moment as a Jalali date with ASCII digits, "1405/12/29" (a form
        field's value: what the customer would type)."""
        text = dates.jalali_text(value)
        return "" if text == numbers.DASH else text[:10].replace("-", "/")

    def plain(self, micro: int | None) -> str:
        """Micro-toman as a form field's plain value ("1500", "0.25"): ASCII digits, no separators."""
        return numbers.plain_toman(micro)

    def month(self, month: str) -> str:
        return dates.month_name(month, self.lang)

    def day(self, day: str) -> str:
        """A day key "1405-09-02" → "09/02" (a chart's axis)."""
        return dates.day_label(day, self.lang)

    def when_day(self, day: str) -> str:
        """A day key "1405-09-02" → "1405/09/02"."""
        return numbers.localize(day.replace("-", "/"), self.lang)


__all__ = ["FA", "EN", "LANGS", "DEFAULT", "N_", "locale", "choose", "Formatter", "numbers", "dates"]
