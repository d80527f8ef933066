"""upgate/services/statements.py and lua/statement.lua against a private real redis-server: known numbers
over two Jalali months, the CSV adding up, and the months a statement refuses."""
from __future__ import annotations

import csv
import io
import time
from datetime import datetime, time as dtime

import jdatetime
import pytest

from tests.ledger_kit import KEY, TOMAN, run, seed_key
from upgate.billing import jalali, money
from upgate.services import accounts, statements, transactions
from upgate.store import connection as store, keyspace


def _previous_month_ts(now: float) -> float:
    """Noon, Tehran, on the 10th of the previous Jalali month."""
    first, _ = jalali.this_month(now)
    prev = first - jdatetime.timedelta(days=20)
    g = prev.replace(day=10).togregorian()
    return datetime.combine(g, dtime(12), jalali.TEHRAN).timestamp()


def test_two_months_with_known_numbers(redis_url):
    c = store.connect_sync(redis_url)
    now = time.time()
    before = _previous_month_ts(now)
    acct = accounts.create_account(c, "09121234567", 100 * TOMAN)
    c.hset(keyspace.wallet(acct), "created_at", int(before) - 86_400)  # it existed last month
    seed_key(c, acct, KEY)

    async def charge(L, at_ms, cost):
        adm = await L.admit(account_id=acct, key_id=KEY, model="m/x", hold_micro=TOMAN, stream=False,
                            free=False, now_ms=at_ms)
        await L.settle(acct, adm.hold_id, key_id=KEY, model="m/x", cost_micro=cost, prompt_tokens=1,
                       completion_tokens=1)

    async def body(L):
        await charge(L, int(before * 1000), 3 * TOMAN)
        await charge(L, int(before * 1000) + 1000, 250_000)
        await charge(L, int(now * 1000), 2 * TOMAN)

    run(redis_url, body)
    transactions.topup(c, acct, "50", ref="p1")
    transactions.adjust(c, acct, "-0.5", note="fix")

    prev_month, this_month = jalali.month_key(before), jalali.month_key(now)
    prev = statements.statement(c, acct, prev_month)
    cur = statements.statement(c, acct)
    assert cur["month"] == this_month
    # the opening transaction happened now: last month saw only its charges
    assert prev["charges_toman"] == "3.250000" and prev["requests"] == 2
    assert prev["days"] == [{"day": jalali.day_key(before), "requests": 2, "charges_toman": "3.250000"}]
    assert prev["topups_toman"] == prev["adjustments_toman"] == "0.000000" and prev["transactions"] == []
    assert prev["closing_balance_toman"] == "-3.250000" and prev["opening_balance_toman"] == "0.000000"
    assert cur["opening_balance_toman"] == prev["closing_balance_toman"]
    assert cur["topups_toman"] == "150.000000" and cur["adjustments_toman"] == "-0.500000"
    assert cur["charges_toman"] == "2.000000" and cur["requests"] == 1
    balance = int(c.hget(keyspace.wallet(acct), "balance"))
    assert cur["closing_balance_toman"] == money.fmt(balance) == "144.250000"
    assert [t["kind"] for t in cur["transactions"]] == ["opening", "topup", "adjustment"]

    rows = list(csv.DictReader(io.StringIO(statements.to_csv(cur))))
    assert rows[0]["kind"] == "opening_balance" and rows[-1]["kind"] == "closing_balance"
    inner = sum(money.parse_toman(r["amount_toman"], allow_negative=True) for r in rows[1:-1])
    assert inner == balance - money.parse_toman(cur["opening_balance_toman"], allow_negative=True)
    assert [r["kind"] for r in rows[1:-1]].count("charges") == 1


def test_months_a_statement_refuses(redis_url):
    c = store.connect_sync(redis_url)
    acct = accounts.create_account(c, "09121234567", 0)
    now = jalali.month_key()
    y, m = (int(p) for p in now.split("-"))
    nxt = f"{y + (m == 12):04d}-{m % 12 + 1:02d}"
    for bad, needle in (("1405-00", "Jalali month"), ("1405-13", "Jalali month"), ("05-01", "Jalali month"),
                        (nxt, "not begun"), (f"{y - 2:04d}-{m:02d}", "beyond"),
                        (f"{y - 1 + (m == 12):04d}-{m % 12 + 1:02d}", "before the account existed")):
        with pytest.raises(statements.InvalidMonth, match=needle):
            statements.statement(c, acct, bad)
    assert statements.InvalidMonth.field == "month"
    with pytest.raises(accounts.UnknownAccount):
        statements.statement(c, "00000000-0000-4000-8000-000000000000")


def test_read_only_steps_answer_while_the_store_refuses_writes(redis_url):
    """A full Redis (noeviction) refuses every function that may write before it runs; a
    statement (statement.lua) and the rate headers' peek (rate_peek.lua) are flagged no-writes,
    so the operator can still read an account's money and a client its usage then."""
    import redis

    client = store.connect_sync(redis_url)
    acct = accounts.create_account(client, "09121234567", 5 * TOMAN)
    seed_key(redis.Redis.from_url(redis_url), acct, KEY)
    r = redis.Redis.from_url(redis_url)
    r.config_set("maxmemory-policy", "noeviction")
    r.config_set("maxmemory", 1)
    try:
        with pytest.raises(redis.exceptions.OutOfMemoryError):
            transactions.topup(client, acct, "1", ref="refused")  # a write: refused, as before
        st = statements.statement(client, acct)

        async def peek(L):
            return await L.rate_peek(acct, KEY)

        rate = run(redis_url, peek)
    finally:
        r.config_set("maxmemory", 0)
    assert st["closing_balance_toman"] == "5.000000"
    assert rate.limit > 0 and rate.remaining == rate.limit
