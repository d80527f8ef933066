"""Statements: what an account was credited and charged in one Jalali month (Tehran time).

Built from one consistent snapshot (lua/statement.lua, one read-only script in the account's
slot): the balance now, the transaction log, and the day-by-day charges settle.lua keeps in the
usage hashes (the sum of its models' `cost` and `requests` fields). The closing balance of month M is the balance
now minus the transactions made after M plus the charges of the days after M; the opening
balance is the closing minus M's own movements. So, exactly, to the micro-toman:

    closing = opening + topups + adjustments − charges     (`opening` counts as a top-up)
    closing = the balance now                               (current month)
    closing = the next month's opening                      (past months)

A charge belongs to the Tehran day its request was admitted on (as in the usage report); a
transaction to the moment Redis recorded it. Usage hashes live 400 days, so a statement reaches
back MAX_MONTHS_BACK months at most; a month before the account existed, or in the future, is
refused (`InvalidMonth`).
"""
from __future__ import annotations

from upgate.billing import jalali, money
from upgate.services import csv_safe, transactions
from upgate.store import connection as store, keyspace
from upgate.services.account_rules import (  # noqa: F401  (check_month is part of this module's API)
    MONTH, InvalidMonth, UnknownAccount, check_month, normalize_id)

MAX_MONTHS_BACK = 12  # usage hashes (the charges) live 400 days


def _index(month: str) -> int:
    y, m = (int(p) for p in month.split("-"))
    return y * 12 + m - 1


def _month(index: int) -> str:
    return f"{index // 12:04d}-{index % 12 + 1:02d}"


def statement(client, account_id: str, month: str | None = None, *, now: float | None = None) -> dict:
    """The statement of one Jalali month (default: the current one), as OPERATORS.md shapes it."""
    import time

    acct = normalize_id(account_id)
    ts = time.time() if now is None else now
    current = jalali.month_key(ts)
    month = current if month is None else check_month(month)
    if _index(month) > _index(current):
        raise InvalidMonth(f"month {month} has not begun yet (it is {current} in Tehran)",
                           reason="month_not_begun", month=month)
    if _index(current) - _index(month) > MAX_MONTHS_BACK:
        raise InvalidMonth(f"month {month} is beyond the {MAX_MONTHS_BACK} months a statement can "
                           f"cover (daily charges are kept 400 days)", reason="month_too_old", n=MAX_MONTHS_BACK)
    first, _ = jalali.parse_month(month)
    # today and tomorrow too: the store's clock may already be a day ahead of this machine's
    days = jalali.days(first, jalali.parse_day(jalali.day_key(ts + 86_400)))
    snap = store.script("statement").call_sync(
        client, [keyspace.wallet(acct), keyspace.transactions(acct)],
        [keyspace.usage(acct, ""), *days])
    if int(snap[0]) == 0:
        raise UnknownAccount(f"unknown account {acct}")
    created = _created_month(client, acct)
    if created is not None and _index(month) < _index(created):
        raise InvalidMonth(f"month {month} is before the account existed (created {created})",
                           reason="month_before_account", month=month)
    balance = int(snap[1])
    txns = [transactions.decode(acct, r) for r in snap[4]]
    flat = [store.text(v) for v in snap[5]]
    start_ms, end_ms = transactions.month_bounds_ms(month)
    _, last = jalali.parse_month(month)
    last_day = f"{last.year:04d}-{last.month:02d}-{last.day:02d}"

    after_txn = sum(t["_micro"] for t in txns if t["_ms"] >= end_ms)
    in_month = [t for t in txns if start_ms <= t["_ms"] < end_ms]
    charges_after, charges, requests, rows = 0, 0, 0, []
    for n, day in enumerate(days):
        cost, count = int(flat[2 * n] or 0), int(flat[2 * n + 1] or 0)
        if day > last_day:
            charges_after += cost
        elif cost or count:
            charges += cost
            requests += count
            rows.append({"day": day, "requests": count, "charges_toman": money.fmt(cost)})
    topups = sum(t["_micro"] for t in in_month if t["kind"] in ("topup", "opening"))
    adjustments = sum(t["_micro"] for t in in_month if t["kind"] == "adjustment")
    closing = balance - after_txn + charges_after
    opening = closing - topups - adjustments + charges
    return {
        "account_id": acct, "month": month,
        "opening_balance_toman": money.fmt(opening), "topups_toman": money.fmt(topups),
        "adjustments_toman": money.fmt(adjustments), "charges_toman": money.fmt(charges),
        "closing_balance_toman": money.fmt(closing), "requests": requests,
        "transactions": [transactions.public(t) for t in in_month],
        "days": rows,
    }


def _created_month(client, acct: str) -> str | None:
    raw = client.hget(keyspace.wallet(acct), "created_at")
    created = int(store.text(raw)) if raw else 0
    return jalali.month_key(created) if created > 1_000_000_000 else None


CSV_FIELDS = ("day", "time", "kind", "id", "ref", "note", "requests", "amount_toman")


def to_csv(st: dict) -> str:
    """The statement as CSV: a header row; the opening balance; every transaction and every
    day's charges (negative) in date order; the closing balance. The amounts between the first
    and last rows add up to closing − opening."""
    return csv_safe.write(CSV_FIELDS, rows(st))


def rows(st: dict) -> list[dict]:
    """The statement's CSV rows (CSV_FIELDS), which every face's file writes in its own words."""
    rows = [{"day": st["month"] + "-01", "kind": "opening_balance",
             "amount_toman": st["opening_balance_toman"]}]
    moves = []
    for t in st["transactions"]:
        day = jalali.day_key(_iso_ts(t["time"]))
        moves.append((day, t["time"], {"day": day, "time": t["time"], "kind": t["kind"], "id": t["id"],
                                       "ref": t["ref"], "note": t["note"],
                                       "amount_toman": t["amount_toman"]}))
    for d in st["days"]:
        charge = money.parse_toman(d["charges_toman"])
        moves.append((d["day"], "~", {"day": d["day"], "kind": "charges", "requests": d["requests"],
                                     "amount_toman": money.fmt(-charge)}))
    rows += [m[2] for m in sorted(moves, key=lambda m: (m[0], m[1]))]
    rows.append({"kind": "closing_balance", "amount_toman": st["closing_balance_toman"],
                 "requests": st["requests"]})
    return rows


def _iso_ts(iso: str) -> float:
    from datetime import datetime, timezone

    return datetime.strptime(iso, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()
