"""upgate/billing/ledger.py and lua/admit|settle|release.lua against a private real redis-server:
every branch of admit in its order, each error's svc fields and Retry-After, settle and release
(idempotency, charges above the hold, free credit-back), month and day roll-over."""
from __future__ import annotations

import math

import pytest

from tests import ledger_kit as kit
from tests.ledger_kit import (ACCT, KEY, T0, TOMAN, h, i, outcome, run, seed_account, seed_key, settings,
                              tehran_ts)
from upgate.billing import jalali
from upgate.services import usage
from upgate.store import keyspace
from upgate.billing.ledger import Admission, RateInfo, Rejected

ALT = {"alternative_model": "acme/chat-1", "alternative_model_price_toman_per_million": "60000.000000"}


def admit(L, hold=TOMAN, *, stream=False, free=False, key=KEY, acct=ACCT, now=None, alternative=None):
    return L.admit(account_id=acct, key_id=key, model="acme/chat-1", hold_micro=hold, stream=stream,
                   free=free, alternative=alternative, now_ms=now)


def settle(L, a, cost, *, key=KEY, model="acme/chat-1", p=10, c=20, acct=ACCT, reset=None):
    return L.settle(acct, a.hold_id, key_id=key, model=model, cost_micro=cost, prompt_tokens=p,
                    completion_tokens=c, cooldown_reset=reset)


async def rejected(coro) -> Rejected:
    with pytest.raises(Rejected) as info:
        await coro
    return info.value


def nothing_reserved(r, held=0):
    assert i(r.hget(keyspace.wallet(ACCT), "held")) == held
    assert i(r.hget(keyspace.key_record(ACCT, KEY), "held")) == held
    assert r.zcard(keyspace.streams(ACCT)) == 0 or held
    assert not r.keys(keyspace.tag(ACCT) + ":hold:*") or held


# ---- the happy path --------------------------------------------------------------------------

def test_admit_places_a_leased_indexed_hold(redis_url, r):
    seed_account(r, balance=10 * TOMAN)
    seed_key(r, rpm=5)

    async def body(L):
        return await admit(L, 3 * TOMAN, stream=True, now=T0)

    a = run(redis_url, body)
    assert isinstance(a, Admission) and a.hold_micro == 3 * TOMAN
    assert a.rate == RateInfo(limit=5, remaining=4, reset_s=math.ceil((T0 + 60_000) / 1000))
    assert h(r, keyspace.wallet(ACCT))["held"] == str(3 * TOMAN)
    assert h(r, keyspace.key_record(ACCT, KEY))["held"] == str(3 * TOMAN)
    rec = h(r, keyspace.hold(ACCT, a.hold_id))
    assert rec == {"state": "open", "amount": str(3 * TOMAN), "key": KEY, "free": "0", "stream": "1",
                   "month": jalali.month_key(T0 / 1000), "day": jalali.day_key(T0 / 1000),
                   "deadline": str(T0 + 30_000)}
    assert r.zscore(keyspace.holds(ACCT), a.hold_id) == T0 + 30_000
    assert r.zscore(keyspace.streams(ACCT), a.hold_id) == T0 + 30_000
    assert r.zscore(keyspace.REAP_INDEX, ACCT) == T0 + 30_000
    assert r.zscore(keyspace.rpm(ACCT, KEY), a.hold_id) == T0


def test_default_rpm_is_60_and_redis_time_is_the_clock(redis_url, r):
    seed_account(r)
    seed_key(r)

    async def body(L):
        return await admit(L), await L.rate_peek(ACCT, KEY)

    a, peek = run(redis_url, body)
    now_s = int(r.time()[0])
    assert a.rate.limit == 60 and a.rate.remaining == 59
    assert now_s + 59 <= a.rate.reset_s <= now_s + 61
    assert peek == a.rate


# ---- step 0: the authoritative key and account checks ------------------------------------------

@pytest.mark.parametrize("case", ["no_key", "revoked", "expired", "other_account", "no_wallet"])
def test_invalid_key_is_refused_before_anything_is_counted(redis_url, r, case):
    if case != "no_wallet":
        seed_account(r)
    if case != "no_key":
        seed_key(r, revoked="1" if case == "revoked" else "0",
                 expires_at=T0 if case == "expired" else T0 + 1,
                 account_id="someone-else" if case == "other_account" else ACCT)

    async def body(L):
        return await rejected(admit(L, now=T0))

    e = run(redis_url, body)
    assert (e.code, e.status, e.rate, e.svc) == ("invalid_api_key", 401, None, None)
    assert r.zcard(keyspace.rpm(ACCT, KEY)) == 0
    nothing_reserved(r)


def test_key_valid_until_its_expiry(redis_url, r):
    seed_account(r)
    seed_key(r, expires_at=T0 + 1)

    async def body(L):
        return await outcome(admit(L, now=T0)), await outcome(admit(L, now=T0 + 1))

    assert run(redis_url, body) == ("ok", "invalid_api_key")


def test_suspended_account(redis_url, r):
    seed_account(r, suspended="1")
    seed_key(r)

    async def body(L):
        return await rejected(admit(L))

    e = run(redis_url, body)
    assert (e.code, e.status, e.rate) == ("account_suspended", 403, None)
    assert e.headers() == {"x-should-retry": "false"}
    assert r.zcard(keyspace.rpm(ACCT, KEY)) == 0
    nothing_reserved(r)


# ---- step 1: rpm --------------------------------------------------------------------------------

def test_rpm_window_rejects_without_counting_and_slides(redis_url, r):
    seed_account(r)
    seed_key(r, rpm=3)

    async def body(L):
        got = [await admit(L, now=T0 + d) for d in (0, 10_000, 20_000)]
        assert [a.rate.remaining for a in got] == [2, 1, 0]
        e = await rejected(admit(L, now=T0 + 30_000))
        assert r.zcard(keyspace.rpm(ACCT, KEY)) == 3  # the refused request is not counted
        e2 = await rejected(admit(L, now=T0 + 59_999))
        ok = await admit(L, now=T0 + 60_000)  # the entry at T0 has left the window
        peek = await L.rate_peek(ACCT, KEY, now_ms=T0 + 60_000)
        return e, e2, ok, peek

    e, e2, ok, peek = run(redis_url, body)
    assert (e.code, e.status) == ("rate_limit_exceeded", 429)
    assert e.retry_after == 30 and e.headers()["Retry-After"] == "30"  # until T0's entry leaves
    assert e.rate == RateInfo(3, 0, math.ceil((T0 + 20_000 + 60_000) / 1000))
    assert "x-should-retry" not in e.headers()
    assert e2.retry_after == 1
    assert ok.rate.remaining == 0
    assert peek == RateInfo(3, 0, math.ceil((T0 + 120_000) / 1000))
    nothing_reserved(r, held=4 * TOMAN)


def test_a_request_refused_by_a_later_step_is_counted(redis_url, r):
    seed_account(r, balance=0)
    seed_key(r, rpm=2)

    async def body(L):
        first = await rejected(admit(L, TOMAN, now=T0))
        second = await rejected(admit(L, TOMAN, now=T0 + 1))
        third = await rejected(admit(L, TOMAN, now=T0 + 2))
        return first, second, third

    first, second, third = run(redis_url, body)
    assert (first.code, first.rate.remaining) == ("insufficient_balance", 1)
    assert (second.code, second.rate.remaining) == ("insufficient_balance", 0)
    assert third.code == "rate_limit_exceeded"


def test_rate_peek_counts_nothing(redis_url, r):
    seed_account(r)
    seed_key(r, rpm=10)

    async def body(L):
        empty = await L.rate_peek(ACCT, KEY, now_ms=T0)
        await admit(L, now=T0)
        await admit(L, now=T0 + 5_000)
        peeks = [await L.rate_peek(ACCT, KEY, now_ms=T0 + 6_000) for _ in range(5)]
        late = await L.rate_peek(ACCT, KEY, now_ms=T0 + 65_000)
        return empty, peeks, late

    empty, peeks, late = run(redis_url, body)
    assert empty == RateInfo(10, 10, T0 // 1000)
    assert set(peeks) == {RateInfo(10, 8, (T0 + 65_000) // 1000)}
    assert late == RateInfo(10, 10, (T0 + 65_000) // 1000)
    assert r.zcard(keyspace.rpm(ACCT, KEY)) == 2


# ---- step 2: stream slots -----------------------------------------------------------------------

def test_stream_slots_per_account_across_keys(redis_url, r):
    seed_account(r, balance=1000 * TOMAN)
    seed_key(r, key="k1", rpm=600)
    seed_key(r, key="k2", rpm=600)

    async def body(L):
        held = [await admit(L, TOMAN, stream=True, key=("k1", "k2")[j % 2], now=T0) for j in range(10)]
        e = await rejected(admit(L, TOMAN, stream=True, key="k2", now=T0))
        plain = await outcome(admit(L, TOMAN, stream=False, key="k2", now=T0))
        assert await settle(L, held[0], 5, key="k1")
        again = await outcome(admit(L, TOMAN, stream=True, key="k1", now=T0))
        return e, plain, again

    e, plain, again = run(redis_url, body)
    assert (e.code, e.status, e.retry_after) == ("too_many_concurrent_streams", 429, 5)
    assert e.headers() == {"Retry-After": "5"}
    assert e.rate.limit == 600 and e.rate.remaining == 600 - 6  # k2: 5 streams + this one
    assert (plain, again) == ("ok", "ok")
    assert r.zcard(keyspace.streams(ACCT)) == 10
    assert i(r.hget(keyspace.wallet(ACCT), "held")) == 11 * TOMAN  # 10 streams + 1 plain


def test_stream_slot_past_its_lease_does_not_count(redis_url, r):
    seed_account(r, balance=1000 * TOMAN)
    seed_key(r, rpm=600)

    async def body(L):
        for _ in range(10):
            await admit(L, TOMAN, stream=True, now=T0)
        before = await outcome(admit(L, TOMAN, stream=True, now=T0 + 29_999))
        after = await outcome(admit(L, TOMAN, stream=True, now=T0 + 30_000))
        return before, after

    assert run(redis_url, body, settings(max_streams=10)) == ("too_many_concurrent_streams", "ok")


# ---- step 3a: the free quota --------------------------------------------------------------------

def test_free_quota_from_the_wallet_then_default(redis_url, r):
    seed_account(r, balance=0, free_quota=2)
    seed_key(r)
    day = jalali.day_key(T0 / 1000)

    async def body(L):
        got = [await admit(L, 999, free=True, now=T0), await admit(L, 999, free=True, now=T0)]
        e = await rejected(admit(L, free=True, now=T0, alternative=ALT))
        e_no_alt = await rejected(admit(L, free=True, now=T0))
        return got, e, e_no_alt

    got, e, e_no_alt = run(redis_url, body)
    assert [a.hold_micro for a in got] == [0, 0]  # no money on hold for a free request
    assert (e.code, e.status, e.retry_after, e.svc) == ("free_quota_exceeded", 429, 3600, ALT)
    assert e.headers() == {"Retry-After": "3600", "x-should-retry": "false"}
    assert e.body()["error"]["svc"]["alternative_model"] == "acme/chat-1"
    assert e_no_alt.svc is None
    assert r.get(keyspace.free(ACCT, day)) == "2"
    assert 86_400_000 < r.pttl(keyspace.free(ACCT, day)) <= 2 * 86_400_000
    assert i(r.hget(keyspace.wallet(ACCT), "held")) == 0
    assert r.zcard(keyspace.holds(ACCT)) == 2  # leased records all the same

    r.hdel(keyspace.wallet(ACCT), "free_quota")

    async def default(L):
        return [await outcome(admit(L, free=True, now=T0)) for _ in range(2)]

    assert run(redis_url, default, settings(free_quota_default=3)) == ["ok", "free_quota_exceeded"]


def test_free_quota_rolls_over_at_tehran_midnight(redis_url, r):
    seed_account(r, balance=0, free_quota=1)
    seed_key(r)
    before = int(tehran_ts(1405, 3, 10, 23, 59, 59) * 1000)
    after = before + 1000  # 1405-03-11 00:00:00 Tehran

    async def body(L):
        return [await outcome(admit(L, free=True, now=t)) for t in (before, before, after, after)]

    assert run(redis_url, body) == ["ok", "free_quota_exceeded", "ok", "free_quota_exceeded"]
    assert r.get(keyspace.free(ACCT, "1405-03-10")) == "1"
    assert r.get(keyspace.free(ACCT, "1405-03-11")) == "1"


def test_free_request_never_served_is_credited_to_its_own_day(redis_url, r):
    seed_account(r, balance=0, free_quota=1)
    seed_key(r)
    t = int(tehran_ts(1405, 3, 10, 23, 59, 59) * 1000)

    async def body(L):
        a = await admit(L, free=True, now=t)
        assert await L.release(ACCT, a.hold_id, credit_free=True)  # released after midnight
        assert not await L.release(ACCT, a.hold_id, credit_free=True)  # credited once only
        b = await admit(L, free=True, now=t)  # the quota is back
        assert await L.release(ACCT, b.hold_id, credit_free=False)
        return await outcome(admit(L, free=True, now=t))

    assert run(redis_url, body) == "free_quota_exceeded"
    assert r.get(keyspace.free(ACCT, "1405-03-10")) == "1"
    assert r.zcard(keyspace.holds(ACCT)) == 0


# ---- step 3b: the monthly limit, then the wallet ------------------------------------------------

def test_monthly_limit_counts_settled_and_open_holds(redis_url, r):
    month = jalali.month_key(T0 / 1000)
    seed_account(r, balance=1000 * TOMAN)
    seed_key(r, monthly_limit=10 * TOMAN, **{f"spent:{month}": 6 * TOMAN})

    async def body(L):
        a = await admit(L, 3 * TOMAN, now=T0)  # 6 + 0 + 3 ≤ 10
        e = await rejected(admit(L, 2 * TOMAN, now=T0))  # 6 + 3 + 2 > 10
        exact = await admit(L, TOMAN, now=T0)  # 6 + 3 + 1 = 10: allowed
        return a, e, exact

    a, e, exact = run(redis_url, body)
    # every 429 carries Retry-After: here the seconds until the next Jalali month (Tehran time);
    # waiting a few seconds cannot help, so the openai client is told not to retry
    until = jalali.seconds_to_next_month(T0 / 1000)
    assert (e.code, e.status, e.retry_after) == ("key_monthly_limit_reached", 429, until)
    assert e.svc == {"monthly_limit_toman": "10.000000", "spent_toman": "9.000000"}
    assert e.headers() == {"Retry-After": str(until), "x-should-retry": "false"}
    assert e.rate.remaining == 60 - 2
    assert i(r.hget(keyspace.key_record(ACCT, KEY), "held")) == 4 * TOMAN


def test_monthly_limit_resets_with_the_jalali_month(redis_url, r):
    last = int(tehran_ts(1405, 1, 31, 23, 59, 59) * 1000)
    first = last + 1000  # 1405-02-01 00:00:00 Tehran
    seed_account(r, balance=1000 * TOMAN)
    seed_key(r, rpm=600, monthly_limit=5 * TOMAN)

    async def body(L):
        a = await admit(L, 4 * TOMAN, now=last)
        assert await settle(L, a, 4 * TOMAN)
        e = await rejected(admit(L, 2 * TOMAN, now=last))
        b = await admit(L, 2 * TOMAN, now=first)  # a new month: spent 0, nothing held
        await admit(L, 3 * TOMAN, now=first)  # 0 + 2 + 3 = 5
        e2 = await rejected(admit(L, 1, now=first))
        assert await settle(L, b, 2 * TOMAN)
        return e, e2

    e, e2 = run(redis_url, body)
    assert e.svc["spent_toman"] == "4.000000"
    assert e.retry_after == 1  # refused in the month's last second
    assert e2.svc == {"monthly_limit_toman": "5.000000", "spent_toman": "5.000000"}
    assert e2.retry_after == 31 * 86_400  # refused at the first instant of 31-day Ordibehesht
    rec = h(r, keyspace.key_record(ACCT, KEY))
    assert rec["spent:1405-01"] == str(4 * TOMAN)
    assert rec["spent:1405-02"] == str(2 * TOMAN)


def test_settle_charges_the_month_of_the_hold(redis_url, r):
    last = int(tehran_ts(1405, 6, 31, 23, 59, 50) * 1000)
    seed_account(r, balance=1000 * TOMAN)
    seed_key(r)
    clock_now = [last / 1000]

    async def body(L):
        a = await admit(L, 4 * TOMAN)  # the injected clock says the last second of 1405-06
        clock_now[0] += 60  # settles in 1405-07
        assert await settle(L, a, 3 * TOMAN)

    run(redis_url, body, clock=lambda: clock_now[0])
    rec = h(r, keyspace.key_record(ACCT, KEY))
    assert rec["spent:1405-06"] == str(3 * TOMAN) and "spent:1405-07" not in rec
    assert usage.totals(h(r, keyspace.usage(ACCT, "1405-06-31")))["cost"] == 3 * TOMAN


def test_calendar_keys_change_exactly_at_tehran_midnight(redis_url, r):
    """The node caches the Tehran day and Jalali month until the next Tehran midnight, exactly:
    a request 0.2 s into a new month is counted in the new month and day."""
    boundary = tehran_ts(1405, 2, 1)  # 1405-02-01 00:00 Tehran
    seed_account(r, balance=1000 * TOMAN)
    seed_key(r, rpm=600)
    clock_now = [boundary - 0.5]

    async def body(L):
        a = await admit(L, TOMAN)
        clock_now[0] = boundary + 0.2
        b = await admit(L, TOMAN, free=True)
        return a, b

    a, b = run(redis_url, body, settings(free_quota_default=5), clock=lambda: clock_now[0])
    rec_a, rec_b = h(r, keyspace.hold(ACCT, a.hold_id)), h(r, keyspace.hold(ACCT, b.hold_id))
    assert (rec_a["month"], rec_a["day"]) == ("1405-01", "1405-01-31")
    assert (rec_b["month"], rec_b["day"]) == ("1405-02", "1405-02-01")
    assert r.get(keyspace.free(ACCT, "1405-02-01")) == "1"


@pytest.mark.parametrize("balance,held,hold", [
    (5 * TOMAN, 0, 5 * TOMAN + 1),  # balance below the hold
    (10 * TOMAN, 6 * TOMAN, 5 * TOMAN),  # available = balance − held below the hold
    (-1, 0, 0),  # a negative balance refuses even a zero hold
])
def test_insufficient_balance(redis_url, r, balance, held, hold):
    seed_account(r, balance=balance, held=held)
    seed_key(r)

    async def body(L):
        return await rejected(admit(L, hold))

    e = run(redis_url, body)
    assert (e.code, e.status, e.retry_after) == ("insufficient_balance", 402, None)
    from upgate.billing import money
    assert e.svc == {"balance_toman": money.fmt(balance), "available_toman": money.fmt(balance - held),
                     "required_toman": money.fmt(hold), "topup_url": "https://pay.example/topup"}
    assert e.headers() == {"x-should-retry": "false"}
    assert i(r.hget(keyspace.wallet(ACCT), "held")) == held
    assert r.zcard(keyspace.holds(ACCT)) == 0


def test_exactly_available_is_enough(redis_url, r):
    seed_account(r, balance=10 * TOMAN, held=4 * TOMAN)
    seed_key(r)

    async def body(L):
        return await outcome(admit(L, 6 * TOMAN)), await outcome(admit(L, 1))

    assert run(redis_url, body) == ("ok", "insufficient_balance")


def test_checks_run_in_the_spec_order(redis_url, r):
    month = jalali.month_key(T0 / 1000)
    seed_account(r, balance=0)
    seed_key(r, rpm=600, monthly_limit=1, **{f"spent:{month}": 1})

    async def body(L):
        monthly_first = await outcome(admit(L, TOMAN, now=T0))  # both limit and wallet fail
        for _ in range(10):  # fill the slots on the free path: no balance needed
            await admit(L, free=True, stream=True, now=T0)
        streams_first = await outcome(admit(L, TOMAN, stream=True, now=T0))
        return monthly_first, streams_first

    assert run(redis_url, body, settings(free_quota_default=100)) == \
        ("key_monthly_limit_reached", "too_many_concurrent_streams")


def test_free_requests_ignore_wallet_and_monthly_limit(redis_url, r):
    seed_account(r, balance=-5 * TOMAN)
    seed_key(r, monthly_limit=1)

    async def body(L):
        return await outcome(admit(L, 10 * TOMAN, free=True))

    assert run(redis_url, body) == "ok"


# ---- settle and release -------------------------------------------------------------------------

def test_settle_charges_releases_the_rest_and_aggregates_usage(redis_url, r):
    seed_account(r, balance=20 * TOMAN)
    seed_key(r)
    day, month = jalali.day_key(T0 / 1000), jalali.month_key(T0 / 1000)

    async def body(L):
        a = await admit(L, 5 * TOMAN, stream=True, now=T0)
        first = await settle(L, a, 1_234_567, p=100, c=50)
        again = await settle(L, a, 1_234_567, p=100, c=50)
        released = await L.release(ACCT, a.hold_id)
        return first, again, released

    assert run(redis_url, body) == (True, False, False)
    w = h(r, keyspace.wallet(ACCT))
    assert (w["balance"], w["held"]) == (str(20 * TOMAN - 1_234_567), "0")
    k = h(r, keyspace.key_record(ACCT, KEY))
    assert (k["held"], k[f"spent:{month}"]) == ("0", "1234567")
    assert r.zcard(keyspace.streams(ACCT)) == 0 and r.zcard(keyspace.holds(ACCT)) == 0
    assert not r.keys(keyspace.tag(ACCT) + ":hold:*")
    day_hash = h(r, keyspace.usage(ACCT, day))
    for dim in (f"key|{KEY}", "model|acme/chat-1"):
        assert day_hash[f"{dim}|requests"] == "1"
        assert day_hash[f"{dim}|prompt_tokens"] == "100"
        assert day_hash[f"{dim}|completion_tokens"] == "50"
        assert day_hash[f"{dim}|cost"] == "1234567"
    assert not [f for f in day_hash if f.startswith("total|")]  # the sum over models (usage.py)
    assert usage.totals(day_hash)["cost"] == 1234567
    assert r.pttl(keyspace.usage(ACCT, day)) > 300 * 86_400_000


def test_the_usage_hash_expiry_is_set_once_a_day_and_whenever_the_hash_is_new(redis_url, r):
    """settle.lua sets a day's usage hash expiry at the account's first settlement of that day
    (the wallet's usage_day), not on every one; a hash made again the same day gets it again."""
    seed_account(r, balance=20 * TOMAN)
    seed_key(r)
    day = jalali.day_key(T0 / 1000)
    key = keyspace.usage(ACCT, day)
    seen = []

    async def body(L):
        for i in range(3):
            a = await admit(L, TOMAN, now=T0 + i)
            await settle(L, a, 1000, p=1, c=1)
            seen.append((r.hget(keyspace.wallet(ACCT), "usage_day"), r.pttl(key)))
            if i == 0:
                r.pexpire(key, 10_000_000)  # stands in for time gone by: the next settlement keeps it
            if i == 1:
                r.delete(key)  # gone behind the scripts' back: the next settlement makes it again

    run(redis_url, body)
    ttl = 400 * 86_400_000
    assert [d for d, _ in seen] == [day] * 3
    assert ttl - 5_000 < seen[0][1] <= ttl
    assert seen[1][1] <= 10_000_000  # the same day: not set again
    assert ttl - 5_000 < seen[2][1] <= ttl  # a new hash: set again, though the day is marked
    assert usage.totals(h(r, key))["requests"] == 1


def test_settle_above_the_hold_may_make_the_balance_negative(redis_url, r):
    seed_account(r, balance=2 * TOMAN)
    seed_key(r)

    async def body(L):
        a = await admit(L, 2 * TOMAN)
        assert await settle(L, a, 3 * TOMAN + 7)
        return await rejected(admit(L, 0))

    e = run(redis_url, body)
    assert e.code == "insufficient_balance"
    assert e.svc["balance_toman"] == "-1.000007" and e.svc["available_toman"] == "-1.000007"
    assert i(r.hget(keyspace.wallet(ACCT), "held")) == 0


def test_release_charges_nothing_and_is_idempotent(redis_url, r):
    seed_account(r, balance=20 * TOMAN)
    seed_key(r)

    async def body(L):
        a = await admit(L, 5 * TOMAN, stream=True)
        return (await L.release(ACCT, a.hold_id), await L.release(ACCT, a.hold_id),
                await settle(L, a, 5))

    assert run(redis_url, body) == (True, False, False)
    w = h(r, keyspace.wallet(ACCT))
    assert (w["balance"], w["held"]) == (str(20 * TOMAN), "0")
    assert i(r.hget(keyspace.key_record(ACCT, KEY), "held")) == 0
    assert r.zcard(keyspace.streams(ACCT)) == 0
    assert not r.keys(keyspace.tag(ACCT) + ":usage:*")


def test_unknown_hold_changes_nothing(redis_url, r):
    seed_account(r)
    seed_key(r)

    async def body(L):
        s = await L.settle(ACCT, "feedfacefeedface", key_id=KEY, model="m/x", cost_micro=5, prompt_tokens=1,
                           completion_tokens=1)
        return s, await L.release(ACCT, "feedfacefeedface", credit_free=True)

    assert run(redis_url, body) == (False, False)
    assert h(r, keyspace.wallet(ACCT))["balance"] == str(100 * TOMAN)


def test_amounts_near_2_pow_53_stay_exact(redis_url, r):
    big = 2**53 - 1
    seed_account(r, balance=big)
    seed_key(r, monthly_limit=big)

    async def body(L):
        a = await admit(L, 2**52 + 1)
        assert await settle(L, a, 2**52 - 3)
        b = await admit(L, 123_456_789_012_345)
        assert await L.release(ACCT, b.hold_id)

    run(redis_url, body)
    assert h(r, keyspace.wallet(ACCT))["balance"] == str(big - (2**52 - 3))
    assert h(r, keyspace.wallet(ACCT))["held"] == "0"
    month = jalali.month_key()
    assert h(r, keyspace.key_record(ACCT, KEY))[f"spent:{month}"] == str(2**52 - 3)


def test_negative_amounts_are_refused_in_python(redis_url, r):
    seed_account(r)
    seed_key(r)

    async def body(L):
        with pytest.raises(ValueError):
            await admit(L, -1)
        a = await admit(L, 1)
        with pytest.raises(ValueError):
            await settle(L, a, -5)

    run(redis_url, body)
    assert r.zcard(keyspace.rpm(ACCT, KEY)) == 1


def test_scripts_reload_after_function_flush(redis_url, r):
    seed_account(r)
    seed_key(r)

    async def body(L):
        a = await admit(L, TOMAN)
        r.function_flush()
        b = await admit(L, TOMAN)
        r.function_flush()
        await L.cooldown_strike("acme/chat-1")  # the node now knows of a strike
        r.function_flush()
        ok = await settle(L, a, 10, reset="acme/chat-1")  # settle + reset in one pipeline
        r.function_flush()
        ok2 = await L.release(ACCT, b.hold_id, strike="acme/chat-1")
        return ok, ok2, L.strikes("acme/chat-1")

    assert run(redis_url, body) == (True, True, 1)
    assert h(r, keyspace.cooldown("acme/chat-1"))["strikes"] == "1"


def test_the_embedded_store_runs_the_same_scripts(memory_url):
    """The demo's fakeredis store (Lua via lupa): the whole life of a hold works there too."""
    from upgate.store import connection as store

    sync = store.connect_sync(memory_url)
    seed_account(sync, balance=10 * TOMAN, free_quota=1)
    seed_key(sync, rpm=5)

    async def body(L):
        a = await admit(L, 3 * TOMAN, stream=True)
        await L.cooldown_strike("acme/chat-1")
        assert await settle(L, a, 1_000_001, reset="acme/chat-1")
        b = await admit(L, free=True)
        assert await L.release(ACCT, b.hold_id, credit_free=True, strike="acme/chat-1")
        c = await admit(L, TOMAN)
        await L.renew(ACCT, [c.hold_id])
        reaped = await L.reap(now_ms=int(sync.time()[0]) * 1000 + 31_000)
        await L.reload_cooldowns()
        return reaped, await L.rate_peek(ACCT, KEY), L.strikes("acme/chat-1")

    reaped, peek, strikes = run(memory_url, body)
    assert (reaped, peek.remaining, strikes) == (1, 2, 1)
    w = h(sync, keyspace.wallet(ACCT))
    assert (w["balance"], w["held"]) == (str(10 * TOMAN - 1_000_001), "0")


def test_day_and_month_keys_follow_the_stores_clock_not_a_skewed_nodes(redis_url, r):
    """A node whose clock runs a day ahead books its first request on "tomorrow" (it knows no
    better yet); from then on it has learned the store's clock from the admission's lease
    deadline, and books requests on the store's Tehran day and Jalali month like every other
    node — without any extra round trip."""
    import time as _time

    from upgate.billing.ledger import Ledger

    seed_account(r)
    seed_key(r)
    ahead = 86_400 * 40  # forty days: another day and another month

    async def body(_L):
        L = Ledger(_L.client, kit.settings(), clock=lambda: _time.time() + ahead, follow_store_clock=True)
        first = await L.admit(account_id=ACCT, key_id=KEY, model="acme/chat-1", hold_micro=TOMAN,
                              stream=False, free=False)
        second = await L.admit(account_id=ACCT, key_id=KEY, model="acme/chat-1", hold_micro=TOMAN,
                               stream=False, free=False)
        return first, second, L.store_skew_s

    first, second, skew = run(redis_url, body)
    assert abs(skew + ahead) < 5  # learned: the store is forty days "behind" this node
    now = _time.time()
    assert r.hget(keyspace.hold(ACCT, first.hold_id), "day") == jalali.day_key(now + ahead)
    assert r.hget(keyspace.hold(ACCT, second.hold_id), "day") == jalali.day_key(now)
    assert r.hget(keyspace.hold(ACCT, second.hold_id), "month") == jalali.month_key(now)
