"""upgate/i18n/numbers.py's reader of typed numbers, the one every face uses: ASCII, Persian
and Arabic-Indic digits and the three thousands separators are read; every other thing Unicode
calls a digit, and anything long, is a NumberError (never the ValueError of int())."""
import pytest
from hypothesis import given, strategies as st

from upgate.i18n import numbers


@pytest.mark.parametrize("typed, plain", [
    ("10000", "10000"), ("۱۰٬۰۰۰", "10000"), ("١٠،٠٠٠", "10000"), ("1,000,000", "1000000"),
    (" 12.5 ", "12.5"), ("١٢٫٥", "12.5"), ("\u200e۱۲۳\u200f", "123"), ("-3", "-3"), ("−۳", "-3"),
])
def test_read(typed, plain):
    assert numbers.plain_number(typed, negative=True) == plain


@pytest.mark.parametrize("typed", ["¹⁰⁰⁰⁰", "①⓪⓪⓪⓪", "１２", "१२", "𝟙𝟚", "9" * 5000, "1,00", "1,0000",
                                   "", " ", "1e3", "nan", "1 000", "1..2", ",100", "+5", "0x10", None, 7])
def test_refused(typed):
    with pytest.raises(numbers.NumberError):
        numbers.plain_number(typed, negative=True)


def test_whole_refuses_decimals_and_signs_unless_asked():
    assert numbers.whole("۵۰٬۰۰۰") == 50_000
    with pytest.raises(numbers.NumberError):
        numbers.whole("1.5")
    with pytest.raises(numbers.NumberError):
        numbers.whole("-1")
    assert numbers.whole("-1", negative=True) == -1


@given(st.text(max_size=60))
def test_anything_typed_is_read_or_refused_as_a_number_error(text):
    try:
        out = numbers.plain_number(text, negative=True)
    except numbers.NumberError:
        return
    assert out.lstrip("-").replace(".", "").isascii() and float(out) == float(out)
