"""Which routes a request tries, in which order: a pure function of the model's routes, the
health snapshot and a random source, so it is tested without I/O (tests/routes/test_choice.py).

Lowest `priority` first; inside one priority a weighted random order (a weighted draw without
replacement: the first attempt of a priority lands on a route in proportion to its weight, and
each failover draws again among those left). Cold routes are left out: a route that failed
`UPGATE_ROUTE_FAILURES` times in a row is not retried on every request (LiteLLM #40405) nor
during fallbacks (#32574). When every route is cold the list is empty: the model is cold.
Nothing here knows a provider's dialect, so a new dialect changes nothing in the choice.
"""
from __future__ import annotations

import random
from itertools import groupby
from typing import Callable, Iterable, Sequence, TypeVar

R = TypeVar("R")  # a route: anything with .priority and .weight


def weighted_order(routes: Sequence[R], rng: random.Random | None = None) -> list[R]:
    """`routes` in a random order where earlier places go to heavier routes in proportion."""
    rng = rng or random
    left = list(routes)
    out: list[R] = []
    while len(left) > 1:
        total = sum(r.weight for r in left)
        x = rng.random() * total
        for i, r in enumerate(left):
            x -= r.weight
            if x < 0:
                break
        out.append(left.pop(i))
    return out + left


def order(routes: Iterable[R], cold: Callable[[R], bool], rng: random.Random | None = None) -> list[R]:
    """The healthy routes, in the order a request tries them."""
    healthy = sorted((r for r in routes if not cold(r)), key=lambda r: r.priority)
    out: list[R] = []
    for _, group in groupby(healthy, key=lambda r: r.priority):
        out += weighted_order(list(group), rng)
    return out
