"""upgate/services/usage.py: the report (pure) and the fetch of the daily aggregates settle.lua writes."""
from __future__ import annotations

import pytest

from tests.ledger_kit import ACCT, KEY, T0, TOMAN, run, seed_account, seed_key
from upgate.billing import jalali
from upgate.services import usage


def raw(entries: dict) -> dict:
    """{(dimension, name): (requests, prompt, completion, cost)} → a raw hash (bytes, as Redis gives)."""
    out = {}
    for (dim, name), (req, p, c, cost) in entries.items():
        for metric, v in (("requests", req), ("prompt_tokens", p), ("completion_tokens", c), ("cost", cost)):
            out[f"{dim}|{name}|{metric}".encode()] = str(v).encode()
    return out


# a day as written before totals became the sum over models (with `total|*` fields, ignored),
# an empty one, and one as settle.lua writes it now
DAYS = {
    "1405-02-01": raw({("key", "k1"): (2, 10, 20, 1_500_000), ("key", "k2"): (1, 1, 1, 250_000),
                       ("model", "acme/chat-1"): (3, 11, 21, 1_750_000), ("total", "*"): (3, 11, 21, 1_750_000)}),
    "1405-02-02": {},
    "1405-02-03": raw({("key", "k2"): (4, 4, 4, 3_000_001), ("model", "acme/embed|x"): (4, 4, 4, 3_000_001)}),
}
TOTALS = {"requests": 7, "prompt_tokens": 15, "cached_tokens": 0, "completion_tokens": 25, "cost_toman": "4.750001"}


def test_report_by_key():
    rep = usage.report(DAYS, "key")
    assert rep["rows"] == [
        {"key_id": "k2", "requests": 5, "prompt_tokens": 5, "cached_tokens": 0, "completion_tokens": 5, "cost_toman": "3.250001"},
        {"key_id": "k1", "requests": 2, "prompt_tokens": 10, "cached_tokens": 0, "completion_tokens": 20, "cost_toman": "1.500000"},
    ]
    assert rep["totals"] == TOTALS


def test_report_by_model_keeps_names_with_separators():
    rep = usage.report(DAYS, "model")
    assert [r["model"] for r in rep["rows"]] == ["acme/embed|x", "acme/chat-1"]
    assert rep["totals"] == TOTALS


def test_report_by_day_leaves_out_empty_days():
    rep = usage.report(DAYS, "day")
    assert rep["rows"] == [
        {"day": "1405-02-01", "requests": 3, "prompt_tokens": 11, "cached_tokens": 0, "completion_tokens": 21, "cost_toman": "1.750000"},
        {"day": "1405-02-03", "requests": 4, "prompt_tokens": 4, "cached_tokens": 0, "completion_tokens": 4, "cost_toman": "3.000001"},
    ]


def test_report_of_nothing_and_of_junk():
    assert usage.report({}, "key") == {"rows": [], "totals": {"requests": 0, "prompt_tokens": 0, "cached_tokens": 0,
                                                              "completion_tokens": 0, "cost_toman": "0.000000"}}
    junk = {"1405-01-01": {"weird": "1", "key|k|bogus": "3", "key|k|requests": "x", "model|m|requests": "2"}}
    assert usage.report(junk, "key")["rows"] == []
    assert usage.report(junk, "day")["totals"]["requests"] == 2
    with pytest.raises(ValueError):
        usage.report(DAYS, "month")


def test_fetch_reads_what_settle_wrote(redis_url, r):
    seed_account(r, balance=100 * TOMAN)
    seed_key(r)
    seed_key(r, key="k2")
    d = jalali.day_key(T0 / 1000)

    async def body(L):
        for key, model, cost in ((KEY, "acme/chat-1", 1_000_000), ("k2", "acme/chat-1", 500_000),
                                 (KEY, "acme/other", 250_000)):
            a = await L.admit(account_id=ACCT, key_id=key, model=model, hold_micro=TOMAN, stream=False,
                              free=False, now_ms=T0)
            await L.settle(ACCT, a.hold_id, key_id=key, model=model, cost_micro=cost, prompt_tokens=7,
                           completion_tokens=3)
        return await usage.afetch(L.client, ACCT, [d, "1405-01-01"])

    fetched = run(redis_url, body)
    assert usage.report(fetched, "key") == usage.report(usage.fetch(r, ACCT, [d, "1405-01-01"]), "key")
    by_model = usage.report(fetched, "model")
    assert by_model["rows"] == [
        {"model": "acme/chat-1", "requests": 2, "prompt_tokens": 14, "cached_tokens": 0, "completion_tokens": 6, "cost_toman": "1.500000"},
        {"model": "acme/other", "requests": 1, "prompt_tokens": 7, "cached_tokens": 0, "completion_tokens": 3, "cost_toman": "0.250000"},
    ]
    assert by_model["totals"]["cost_toman"] == "1.750000"
    assert usage.report(fetched, "day")["rows"][0]["day"] == d
