"""Conservation with cached prompt tokens (hypothesis), against a private real redis-server.

Any model prices (cached and cache-write prices below or above the prompt price) and any mix of
requests whose provider reports cached / cache-write tokens (more than the prompt included):
each charge is the exact sum of its parts rounded up once, a hold sized at the full prompt
price covers the charge whenever the cache prices are not above the prompt price, and after
settling them all through lua/settle.lua the balance = initial − Σ charges, nothing stays held,
and the day's usage aggregates hold Σ charges, Σ prompt tokens and Σ cached tokens (each capped
to its prompt), to the micro-toman and the token."""
from __future__ import annotations

import time
import uuid
from decimal import Decimal
from fractions import Fraction
from math import ceil

from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from tests.ledger_kit import TOMAN, h, i, run, seed_account, seed_key
from upgate.billing import jalali, sizing
from upgate.services import usage
from upgate.store import keyspace
from upgate.catalog.rules import Model

# prices in micro-toman per million tokens (the catalog's resolution: six fractional digits)
price = st.one_of(st.sampled_from((0, 1, 999_999, 150_000_000_000)), st.integers(0, 10**12))
request = st.tuples(st.integers(0, 200_000), st.integers(0, 250_000), st.integers(0, 250_000),
                    st.integers(0, 50_000))  # prompt, cached, cache write, completion


def model(prompt: int, cached: int, write: int, completion: int) -> Model:
    toman = lambda micro: Decimal(micro) / 10**6  # noqa: E731
    return Model(id="m/a", provider="p", upstream_model="a", name="a",
                 prompt_toman_per_million=toman(prompt), completion_toman_per_million=toman(completion),
                 request_toman=Decimal(0), web_search_toman=Decimal(0), capabilities=frozenset({"chat"}),
                 cached_prompt_toman_per_million=toman(cached), cache_write_toman_per_million=toman(write))


def exact(prices, p, c, w, q) -> int:
    """The charge from first principles: Fractions, tokens capped as the provider's counts are."""
    c = min(c, p)
    w = min(w, p - c)
    per = [Fraction(x, 10**6) for x in prices]  # micro-toman per token
    total = (p - c - w) * per[0] + c * per[1] + w * per[2] + q * per[3]
    return ceil(total)


@hsettings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(prices=st.tuples(price, price, price, price), requests=st.lists(request, min_size=1, max_size=12))
def test_cached_tokens_conserve_money(redis_url, r, prices, requests):
    m = model(*prices)
    acct, initial = str(uuid.uuid4()), 10**15
    seed_account(r, acct, balance=initial)
    seed_key(r, acct, "k1")
    charges = []

    async def body(L):
        for p, c, w, q in requests:
            hold = sizing.cost_micro(m, p, q, False)  # what a hold prices: every prompt token in full
            cost = sizing.cost_micro(m, p, q, False, c, w)
            assert cost == exact(prices, p, c, w, q)
            if prices[1] <= prices[0] and prices[2] <= prices[0]:
                assert cost <= hold
            a = await L.admit(account_id=acct, key_id="k1", model="m/a", hold_micro=hold, stream=False,
                              free=False)
            assert await L.settle(acct, a.hold_id, key_id="k1", model="m/a", cost_micro=cost,
                                  prompt_tokens=p, completion_tokens=q, cached_tokens=c)
            charges.append(cost)

    run(redis_url, body)
    w = h(r, keyspace.wallet(acct))
    assert i(w["balance"]) == initial - sum(charges) and i(w["held"]) == 0
    day = h(r, keyspace.usage(acct, jalali.day_key(time.time())))
    for dim in ("key|k1", "model|m/a"):
        assert i(day.get(f"{dim}|cost")) == sum(charges)
        assert i(day.get(f"{dim}|prompt_tokens")) == sum(p for p, _, _, _ in requests)
        assert i(day.get(f"{dim}|cached_tokens")) == sum(min(c, p) for p, c, _, _ in requests)


def test_provider_cost_is_exact():
    for usd, rate, markup in (("0.0001234", "65000", "1.2"), ("0.000000001", "1234567.89", "1.15"),
                              ("3.999999999", "99999.999999", "1.000001"), ("0", "61500", "1")):
        got = sizing.provider_cost_micro(Decimal(usd), Decimal(rate), Decimal(markup))
        assert got == ceil(Fraction(usd) * Fraction(rate) * Fraction(markup) * TOMAN)


def test_a_journaled_settlement_keeps_its_cached_tokens(redis_url, r, tmp_path):
    """A settlement journaled while the store was away counts its cached tokens when replayed."""
    import orjson

    from tests.ledger_kit import settings

    acct = str(uuid.uuid4())
    seed_account(r, acct, balance=100 * TOMAN)
    seed_key(r, acct, "k1")
    sets = settings(tmp_path)

    async def body(L):
        a = await L.admit(account_id=acct, key_id="k1", model="m/a", hold_micro=TOMAN, stream=False, free=False)
        line = {"a": acct, "h": a.hold_id, "k": "k1", "m": "m/a", "c": 700_000, "p": 90, "q": 3, "x": 64,
                "t": int(time.time())}
        with open(sets.journal_path, "ab") as f:
            f.write(orjson.dumps(line) + b"\n")
        return await L.replay_journal()

    assert run(redis_url, body, sets) == 1
    day = usage.totals(h(r, keyspace.usage(acct, jalali.day_key(time.time()))))
    assert day["cached_tokens"] == 64 and day["cost"] == 700_000
    assert i(h(r, keyspace.wallet(acct))["balance"]) == 100 * TOMAN - 700_000
