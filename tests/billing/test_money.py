from decimal import Decimal

import pytest
from hypothesis import given, strategies as st

from upgate.billing import money


@pytest.mark.parametrize("text,micro", [("0", 0), ("1", 1_000_000), ("123.45", 123_450_000),
                                       ("0.000001", 1), ("-5", -5_000_000)])
def test_parse_and_format(text, micro):
    assert money.parse_toman(text, allow_negative=True) == micro


@pytest.mark.parametrize("bad", ["abc", "1.1234567", "NaN", "Infinity", "", "1e400", "9007199255"])
def test_refuses_malformed_or_out_of_range(bad):
    with pytest.raises(money.AmountError):
        money.parse_toman(bad)


def test_refuses_negative_unless_allowed_and_floats_always():
    with pytest.raises(money.AmountError):
        money.parse_toman("-1")
    with pytest.raises(money.AmountError):
        money.parse_toman(1.5)


def test_fmt_six_digits():
    assert money.fmt(123_450_000) == "123.450000"
    assert money.fmt(-1) == "-0.000001"
    assert money.fmt(0) == "0.000000"


@given(st.integers(min_value=-(2**53), max_value=2**53))
def test_fmt_parse_round_trip(micro):
    assert money.parse_toman(money.fmt(micro), allow_negative=True) == micro


def test_cost_rounds_up_to_the_next_micro():
    # 3 tokens at 0.3333333 toman/M would be 0.9999999 micro: charged 1
    assert money.cost_micro(3, Decimal("0.3333333")) == 1
    assert money.cost_micro(1000, Decimal("15000")) == 15_000_000  # 0.015 toman... ×1e6
    assert money.cost_micro(0, Decimal("15000")) == 0
