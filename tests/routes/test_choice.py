"""The route choice without I/O: priority order, weights, cold routes left out."""
import random
from collections import Counter

import pytest

from upgate.catalog.route_rules import Route
from upgate.routes.choice import order

A = Route("a", "m", priority=0, weight=3)
B = Route("b", "m", priority=0, weight=1)
C = Route("c", "m", priority=1, weight=1)


def never(_):
    return False


def test_lowest_priority_first_and_every_healthy_route_once():
    rng = random.Random(1)
    for _ in range(200):
        got = order([C, A, B], never, rng)
        assert sorted(got[:2], key=lambda r: r.provider) == [A, B] and got[2] == C


def test_weights_within_five_percent_over_2000_draws():
    rng = random.Random(7)
    first = Counter(order([A, B, C], never, rng)[0].provider for _ in range(2000))
    assert abs(first["a"] / 2000 - 0.75) < 0.05 and abs(first["b"] / 2000 - 0.25) < 0.05
    assert first["c"] == 0  # a lower priority is never first while a higher one is healthy


def test_three_weights_and_the_second_place():
    d = Route("d", "m", weight=6)
    rng = random.Random(3)
    runs = [order([A, B, d], never, rng) for _ in range(2000)]
    first = Counter(r[0].provider for r in runs)
    for name, share in (("d", 0.6), ("a", 0.3), ("b", 0.1)):
        assert abs(first[name] / 2000 - share) < 0.05, first
    # after d, a comes before b three times in four (a draw without replacement)
    after_d = Counter(r[1].provider for r in runs if r[0].provider == "d")
    assert abs(after_d["a"] / sum(after_d.values()) - 0.75) < 0.05


@pytest.mark.parametrize("cold, expected", [
    ({"a"}, ["b", "c"]), ({"a", "b"}, ["c"]), ({"c"}, None), ({"a", "b", "c"}, [])])
def test_cold_routes_are_left_out(cold, expected):
    got = [r.provider for r in order([A, B, C], lambda r: r.provider in cold, random.Random(0))]
    if expected is None:
        assert sorted(got) == ["a", "b"]
    else:
        assert got == expected
