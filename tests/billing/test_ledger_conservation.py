"""Conservation of money under any mix of admit / settle / release / renew / reap (hypothesis),
against a private real redis-server. The account's free quota and each key's rpm are drawn too,
small ones included, so rpm and free-quota refusals and free credit-back are part of the mix.
A model predicts every admit outcome; after every step the wallet's and keys' `held` equal the
open holds and each day's free counter equals its admitted free requests minus those credited
back, and at the end balance = initial − Σ charges, held = 0 and each key's month counter =
Σ its charges, to the micro-toman.

Money of record rides along: top-ups and adjustments (lua/credit.lua) with refs drawn from a
small set, so replays and conflicts happen; the account is either new (an opening transaction)
or from before transactions were recorded (migrated by the first money script that sees it).
After every step balance == credited − charged; at the end Σ transactions == credited, the audit
finds nothing, the statements of every month from the first charge to now chain and add up
(closing = opening + topups + adjustments − charges, closing = next opening, the last = the
balance), and every settled or released request left exactly one record with its real charge."""
from __future__ import annotations

import uuid

from hypothesis import HealthCheck, event, given, settings as hsettings, strategies as st

from tests.ledger_kit import T0, TOMAN, h, i, outcome, run, seed_account, seed_key, settings
from upgate.billing import jalali, money
from upgate.services import accounts, audit, records, statements, transactions, usage
from upgate.store import keyspace

KEYS = ("k1", "k2")
LIMIT_K2 = 12 * TOMAN
LEASE_MS = 30_000

op = st.one_of(
    st.tuples(st.just("admit"), st.sampled_from(KEYS),
              st.one_of(st.sampled_from((0, 1, TOMAN, 3 * TOMAN, 5 * TOMAN)), st.integers(0, 5 * TOMAN)),
              st.sampled_from((True, True, False)), st.booleans()),  # stream, free
    st.tuples(st.just("settle"), st.integers(0, 50),
              st.one_of(st.sampled_from((0, TOMAN, 8 * TOMAN)), st.integers(0, 8 * TOMAN))),
    st.tuples(st.just("release"), st.integers(0, 50), st.booleans()),
    st.tuples(st.just("renew"), st.integers(0, 50)),
    st.tuples(st.just("reap"),),
    st.tuples(st.sampled_from(("topup", "adjust")),
              st.one_of(st.sampled_from((1, TOMAN, -TOMAN, 7 * TOMAN)), st.integers(-5 * TOMAN, 5 * TOMAN)),
              st.sampled_from((None, None, "r0", "r1"))),
)
step = st.tuples(st.sampled_from((0, 0, 700, 5_000, 15_000, 31_000)), op)
MAX_STREAMS = 3  # small, so the stream cap is reached in short runs
RPM_WINDOW_MS = 60_000
free_quota = st.sampled_from((0, 1, 2, 3, 1000))  # requests per Tehran day
rpm = st.sampled_from((1, 2, 3, 5, 600))  # per key


def _record(request_id: str, key: str, cost: int) -> dict:
    return records.new(request_id=request_id, key_id=key, model="m/a", status=200, cost_micro=cost)


def check(url, sync, ops, initial, sharded=False, quota=1000, rpms=(600, 600), legacy=False):
    acct = str(uuid.uuid4())
    if legacy:  # from before transactions: a bare balance, no counters, no log
        seed_account(sync, acct, balance=initial, free_quota=quota)
    else:
        seed_account(sync, acct, balance=0, free_quota=quota)
        sync.hset(keyspace.wallet(acct), mapping={"credited": 0, "charged": 0})
        transactions.credit(sync, acct, "opening", initial)
    seed_key(sync, acct, "k1", rpm=rpms[0])
    seed_key(sync, acct, "k2", rpm=rpms[1], monthly_limit=LIMIT_K2)
    limits = dict(zip(KEYS, rpms))
    free_taken: dict[str, int] = {}  # Tehran day → free requests admitted that day
    free_credited: dict[str, int] = {}  # Tehran day → of those, credited back by a release

    async def body(L):
        now = T0
        holds: list[dict] = []  # every hold ever admitted, in order
        charged = {k: 0 for k in KEYS}
        balance = initial
        counted = {k: [] for k in KEYS}  # each key's counted requests (times, ms): the rpm window
        refs: dict[str, tuple] = {}  # ref → (kind, amount) of its first transaction
        kept: dict[str, int] = {}  # request id → the cost its record must show
        credits = 0  # Σ top-ups and adjustments applied

        def open_holds():
            return [x for x in holds if x["state"] == "open"]

        for advance, action in ops:
            now += advance
            kind = action[0]
            if kind == "admit":
                _, key, amount, stream, free = action
                day = jalali.day_key(now / 1000)
                wallet_held = sum(x["amount"] for x in open_holds())
                key_held = sum(x["amount"] for x in open_holds() if x["key"] == key)
                in_window = sum(1 for t in counted[key] if t > now - RPM_WINDOW_MS)
                if in_window >= limits[key]:
                    expect = "rate_limit_exceeded"
                elif stream and sum(1 for x in open_holds() if x["stream"] and x["deadline"] > now) >= MAX_STREAMS:
                    expect = "too_many_concurrent_streams"
                elif free and free_taken.get(day, 0) - free_credited.get(day, 0) >= quota:
                    expect = "free_quota_exceeded"
                elif free:
                    expect = "ok"
                elif key == "k2" and charged["k2"] + key_held + amount > LIMIT_K2:
                    expect = "key_monthly_limit_reached"
                elif balance < 0 or balance - wallet_held < amount:
                    expect = "insufficient_balance"
                else:
                    expect = "ok"
                if expect != "rate_limit_exceeded":  # every other request is counted, refused or not
                    counted[key].append(now)
                result = {}

                async def go():
                    result["a"] = await L.admit(account_id=acct, key_id=key, model="m/a", hold_micro=amount,
                                                stream=stream, free=free, now_ms=now,
                                                request_id=f"req_{len(holds)}")

                got = await outcome(go())
                assert got == expect, (action, got, expect)
                event(f"admit: {got}")
                if got == "ok":
                    holds.append({"id": result["a"].hold_id, "rid": f"req_{len(holds)}", "key": key, "amount": 0 if free else amount,
                                  "stream": stream, "state": "open", "deadline": now + LEASE_MS,
                                  "free": free, "day": day})
                    if free:
                        free_taken[day] = free_taken.get(day, 0) + 1
            elif kind in ("settle", "release", "renew") and holds:
                x = holds[action[1] % len(holds)]
                if kind == "settle":
                    cost = action[2]
                    done = await L.settle(acct, x["id"], key_id=x["key"], model="m/a", cost_micro=cost,
                                          prompt_tokens=1, completion_tokens=2,
                                          record=_record(x["rid"], x["key"], cost))
                    assert done == (x["state"] in ("open", "reaped"))
                    event(f"settle of a hold {x['state']}")
                    if done:
                        kept[x["rid"]] = cost
                        x["state"] = "settled"
                        charged[x["key"]] += cost
                        balance -= cost
                elif kind == "release":
                    done = await L.release(acct, x["id"], credit_free=action[2],
                                           record=_record(x["rid"], x["key"], 0))
                    assert done == (x["state"] == "open")
                    if x["state"] in ("open", "reaped"):
                        kept[x["rid"]] = 0
                    if done and x["free"] and action[2]:  # the provider never served it: given back
                        free_credited[x["day"]] = free_credited.get(x["day"], 0) + 1
                        event("free request credited back")
                    if x["state"] in ("open", "reaped"):
                        x["state"] = "released"
                else:
                    lost = await L.renew(acct, [x["id"]], now_ms=now)
                    assert lost == ([] if x["state"] == "open" else [x["id"]])
                    if x["state"] == "open":
                        x["deadline"] = now + LEASE_MS
            elif kind == "reap":
                n = await L.reap(now_ms=now)
                due = [x for x in open_holds() if x["deadline"] <= now]
                assert n == len(due)
                if n:
                    event("reap released holds")
                for x in due:
                    x["state"] = "reaped"
                    kept[x["rid"]] = 0  # the reaper's record, until a late settle replaces it
            elif kind in ("topup", "adjust"):
                _, amount, ref = action
                money_kind = "adjustment" if kind == "adjust" or amount < 0 else "topup"
                try:
                    if kind == "topup":
                        res = transactions.topup(sync, acct, money.fmt(amount), ref=ref)
                    else:
                        res = transactions.adjust(sync, acct, money.fmt(amount), note="n", ref=ref)
                    got = "replayed" if res["replayed"] else "applied"
                except accounts.InvalidAmount:
                    got = "zero"
                except transactions.IdempotencyConflict:
                    got = "conflict"
                if amount == 0:
                    expect = "zero"
                elif ref in refs:
                    expect = "replayed" if refs[ref] == (money_kind, amount) else "conflict"
                else:
                    expect = "applied"
                assert got == expect, (action, got, expect)
                event(f"{kind}: {got}")
                if got == "applied":
                    balance += amount
                    credits += amount
                    if ref is not None:
                        refs[ref] = (money_kind, amount)
            # invariants after every step
            w = h(sync, keyspace.wallet(acct))
            assert i(w["held"]) == sum(x["amount"] for x in open_holds())
            assert i(w["balance"]) == balance
            for k in KEYS:
                assert i(sync.hget(keyspace.key_record(acct, k), "held")) == \
                    sum(x["amount"] for x in open_holds() if x["key"] == k)
            if open_holds():
                score = sync.zscore(keyspace.reap_index(acct, sharded), acct)
                assert score is not None and score <= min(x["deadline"] for x in open_holds())
            for d, taken in free_taken.items():
                assert i(sync.get(keyspace.free(acct, d))) == taken - free_credited.get(d, 0), d
            if "credited" in w:  # new, or migrated by now: the lifetime counters hold at rest
                assert i(w["balance"]) == i(w["credited"]) - i(w["charged"])
        # the end: every open request finishes one way or the other
        for n, x in enumerate(open_holds()):
            if n % 2:
                assert await L.release(acct, x["id"], record=_record(x["rid"], x["key"], 0))
                kept[x["rid"]] = 0
            else:
                assert await L.settle(acct, x["id"], key_id=x["key"], model="m/a", cost_micro=1,
                                      prompt_tokens=0, completion_tokens=0, record=_record(x["rid"], x["key"], 1))
                kept[x["rid"]] = 1
                charged[x["key"]] += 1
                balance -= 1
        return charged, kept, credits

    charged, kept, credits = run(url, body, settings(max_streams=MAX_STREAMS))
    w = h(sync, keyspace.wallet(acct))
    assert i(w["held"]) == 0
    assert i(w["balance"]) == initial + credits - sum(charged.values())
    for k in KEYS:
        rec = h(sync, keyspace.key_record(acct, k))
        assert i(rec.get("held")) == 0
        assert sum(int(v) for f, v in rec.items() if f.startswith("spent:")) == charged[k]
    days = {jalali.day_key(T0 / 1000), jalali.day_key((T0 + 80 * 31_000) / 1000)}
    total_cost = sum(usage.totals(h(sync, keyspace.usage(acct, d)))["cost"] for d in days)
    assert total_cost == sum(charged.values())
    assert sync.zcard(keyspace.holds(acct)) == 0 and sync.zcard(keyspace.streams(acct)) == 0
    # the free counters: admitted free requests minus those credited back, per Tehran day
    for d in days | set(free_taken):
        assert i(sync.get(keyspace.free(acct, d))) == free_taken.get(d, 0) - free_credited.get(d, 0), d
    money_of_record(sync, acct, charged, kept)


def money_of_record(sync, acct: str, charged: dict, kept: dict) -> None:
    """Σ transactions, the audit, the statements and the records, to the micro-toman."""
    transactions.migrate(sync, acct)  # a legacy account no money script touched yet
    w = h(sync, keyspace.wallet(acct))
    txns = transactions.list_transactions(sync, acct)
    assert sum(money.parse_toman(t["amount_toman"], allow_negative=True) for t in txns) == i(w["credited"])
    assert i(w["balance"]) == i(w["credited"]) - i(w["charged"])
    assert [m for m in audit.run(sync, deep=True)["mismatches"] if m["account_id"] == acct] == []
    first, now = jalali.month_key(T0 / 1000), jalali.month_key()
    months, m = [], first
    while m <= now:
        months.append(m)
        y, mo = (int(p) for p in m.split("-"))
        m = f"{y + (mo == 12):04d}-{mo % 12 + 1:02d}"
    sts = [statements.statement(sync, acct, m) for m in months]
    f = lambda v: money.parse_toman(v, allow_negative=True)  # noqa: E731
    for a, b in zip(sts, sts[1:]):
        assert a["closing_balance_toman"] == b["opening_balance_toman"]
    for s_ in sts:
        assert f(s_["closing_balance_toman"]) == f(s_["opening_balance_toman"]) + f(s_["topups_toman"]) + \
            f(s_["adjustments_toman"]) - f(s_["charges_toman"])
    assert f(sts[-1]["closing_balance_toman"]) == i(w["balance"])
    assert sum(f(s_["charges_toman"]) for s_ in sts) == sum(charged.values())
    assert sum(f(s_["topups_toman"]) + f(s_["adjustments_toman"]) for s_ in sts) == i(w["credited"])
    got = {r["request_id"]: f(r["cost_toman"]) for r in records.list_requests(sync, acct, limit=1000)}
    assert got == kept


@hsettings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(step, min_size=10, max_size=80),
       initial=st.one_of(st.sampled_from((0, 5 * TOMAN, 100 * TOMAN)), st.integers(0, 30 * TOMAN)),
       quota=free_quota, rpms=st.tuples(rpm, rpm), legacy=st.booleans())
def test_conservation_under_any_mix(redis_url, r, ops, initial, quota, rpms, legacy):
    check(redis_url, r, ops, initial, quota=quota, rpms=rpms, legacy=legacy)
