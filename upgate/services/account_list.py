"""Browsing accounts: the change list behind the console's /admin/accounts (any face may call it).

- **Order.** Newest first by default, from the index ``keyspace.ACCOUNTS_BY_TIME`` (a sorted
  set scored by `created_at`, written with the ``ACCOUNTS`` set by `accounts.listing`), with a
  keyset cursor: an account created while someone pages is never shown twice. Or by balance
  (highest or lowest first) or by what the account spent this Jalali month (highest first):
  those values change with every request and no index of them may be kept (the hot path
  touches one account's keys only), so they are read for the newest `SCAN_MAX` accounts,
  sorted, and paged by position.
- **Search.** One box takes an account id, a key id, a key prefix (``sk-up-AbCd``), a request
  id (``req_…``) or a phone number in any spelling (services/phones.py), whole or in part. Exact
  forms are looked up directly (an id, the phone index, the request index); partial ones
  (part of a phone or of an account id, a key prefix) are matched among the newest
  `SCAN_MAX` accounts, and the answer says so when there are more.
- **Bounds.** Every call reads at most `SCAN_MAX` accounts' fields, pipelined `BATCH` at a time
  (measured with 10,000 accounts of one key each on one local Redis, on a loaded 2-core
  machine: newest first 22 ms, by balance 0.66 s, part of a phone 0.45 s, a key prefix 1.9 s,
  by spend 2.8 s), and renders at most `accounts.PAGE_MAX`
  views. It runs on the admin read pool, never on the event loop.

Accounts created before the index are added to it the first time a listing finds the index
shorter than the ``ACCOUNTS`` set (one pass over the set; `backfill`).
"""
from __future__ import annotations

import re
import uuid

from upgate.billing import jalali
from upgate.services import accounts, keys, phones, phone_index, records
from upgate.services.account_rules import InvalidCursor, UnknownAccount
from upgate.services.key_rules import KEY_PREFIX
from upgate.store import connection as store, keyspace

SCAN_MAX = 10_000  # accounts a sort or a partial search reads at most
BATCH = 1_000  # commands per pipeline round trip
SORTS = ("newest", "balance", "balance_low", "spend")
_HEXISH = re.compile(r"[0-9a-f-]{4,36}")
_KEY_ID = re.compile(r"[0-9a-f]{16}")
_PHONEISH = re.compile(r"\+?[0-9]{3,15}")


def backfill(client) -> int:
    """Add every listed account missing from the time index (created before it existed, or by
    an older node); returns how many were added. Idempotent (ZADD NX)."""
    if client.zcard(keyspace.ACCOUNTS_BY_TIME) >= client.scard(keyspace.ACCOUNTS):
        return 0
    ids = [store.text(a) for a in client.sscan_iter(keyspace.ACCOUNTS, count=BATCH)]
    added = 0
    for start in range(0, len(ids), BATCH):
        chunk = ids[start:start + BATCH]
        pipe = client.pipeline(transaction=False)
        for acct in chunk:
            pipe.hget(keyspace.wallet(acct), "created_at")
        stamps = pipe.execute()
        scores = {a: int(store.text(t) or 0) for a, t in zip(chunk, stamps) if t is not None}
        if scores:
            added += client.zadd(keyspace.ACCOUNTS_BY_TIME, scores, nx=True)
    return added


def _newest(client, n: int) -> list[str]:
    return [store.text(a) for a in client.zrevrange(keyspace.ACCOUNTS_BY_TIME, 0, n - 1)]


def _fields(client, ids: list[str], field: str) -> list[str | None]:
    out: list[str | None] = []
    for start in range(0, len(ids), BATCH):
        pipe = client.pipeline(transaction=False)
        for acct in ids[start:start + BATCH]:
            pipe.hget(keyspace.wallet(acct), field)
        out += [None if v is None else store.text(v) for v in pipe.execute()]
    return out


def spent_this_month(client, ids: list[str]) -> dict[str, int]:
    """Micro-toman each account's keys spent this Jalali month (Σ their `spent:<month>`), two
    pipelined passes: the key sets, then one HGET per key."""
    month = "spent:" + jalali.month_key()
    key_ids: list[tuple[str, list[str]]] = []
    for start in range(0, len(ids), BATCH):
        pipe = client.pipeline(transaction=False)
        chunk = ids[start:start + BATCH]
        for acct in chunk:
            pipe.smembers(keyspace.account_keys(acct))
        key_ids += [(a, [store.text(k) for k in ks]) for a, ks in zip(chunk, pipe.execute())]
    pairs = [(a, k) for a, ks in key_ids for k in ks]
    out = {a: 0 for a in ids}
    for start in range(0, len(pairs), BATCH):
        pipe = client.pipeline(transaction=False)
        chunk = pairs[start:start + BATCH]
        for acct, kid in chunk:
            pipe.hget(keyspace.key_record(acct, kid), month)
        for (acct, _), v in zip(chunk, pipe.execute()):
            out[acct] += int(store.text(v)) if v else 0
    return out


def _key_prefix_hits(client, ids: list[str], prefix: str) -> set[str]:
    """Accounts among `ids` holding a key whose shown prefix starts with `prefix`."""
    hits: set[str] = set()
    for acct, _kid, (shown,) in keys.key_fields(client, ids, ("prefix",), BATCH):
        shown = shown or ""
        n = min(len(shown), len(prefix))
        if shown and shown[:n] == prefix[:n]:
            hits.add(acct)
    return hits


def _phone_needle(q: str) -> str | None:
    """Part of a phone as typed (any digits, separators, +98/0098/0 forms) → the digits to look
    for inside a canonical "+98…" number; None when `q` is not phone-like."""
    s = phones.ascii_digits(q)
    s = re.sub(r"[\s\-.()\u200c\u200e\u200f\u202a-\u202e]", "", s)
    if not _PHONEISH.fullmatch(s):
        return None
    if s.startswith("+"):
        return s[1:]
    if s.startswith("00"):
        return s[2:]
    return "98" + s[1:] if s.startswith("0") else s


def _exact(client, q: str) -> tuple[str | None, list[str]]:
    """(what `q` is, the accounts it names) for the forms looked up directly; (None, []) else."""
    if q.startswith("req_"):
        try:
            return "request", [records.find(client, q)["account_id"]]
        except ValueError:
            return "request", []
    try:
        acct = str(uuid.UUID(q))
    except ValueError:
        pass
    else:
        return "account", [acct] if client.exists(keyspace.wallet(acct)) else []
    if _KEY_ID.fullmatch(q):
        owner = client.get(keyspace.key_owner(q))
        if owner is not None:
            return "key", [store.text(owner)]
    try:
        owner = phone_index.owner(client, phones.canonical(q))
    except phones.PhoneError:
        return None, []
    if owner not in (None, phone_index.SHARED):
        return "phone", [owner]
    return None, []  # a whole phone nobody (or several) holds in the index: matched as a part


def _matches(client, q: str, window: list[str]) -> tuple[str | None, list[str]]:
    """(what `q` matched, the accounts of `window` it matches, in window order)."""
    lowered = q.lower()
    if lowered.startswith(KEY_PREFIX):
        hits = _key_prefix_hits(client, window, q.split("…")[0])
        return "key_prefix", [a for a in window if a in hits]
    needle = _phone_needle(q)
    id_part = lowered if _HEXISH.fullmatch(lowered) else None
    if needle is None and id_part is None:
        return None, []
    stored = _fields(client, window, "phone") if needle is not None else [None] * len(window)
    out = [a for a, ph in zip(window, stored)
           if (needle is not None and ph and needle in ph) or (id_part is not None and id_part in a)]
    return ("phone" if needle is not None else "account"), out


def _parse_cursor(cursor: str | None, sort: str, keyset: bool):
    if cursor in (None, ""):
        return None
    try:
        if keyset and cursor.startswith("t"):
            score, _, acct = cursor[1:].partition(".")
            return int(score), str(uuid.UUID(acct))
        if not keyset and cursor.startswith("o"):
            n = int(cursor[1:])
            if 0 <= n <= SCAN_MAX:
                return n
    except ValueError:
        pass
    raise InvalidCursor(f"not a cursor from a previous page of this listing: {cursor!r}")


def _after(client, cursor: tuple[int, str], n: int) -> list[str]:
    """The next `n` ids newest first after (score, id): those of the same second with a
    smaller id (ZREVRANGE order), then older seconds."""
    score, acct = cursor
    same = [store.text(a) for a in client.zrevrangebyscore(keyspace.ACCOUNTS_BY_TIME, score, score)]
    out = [a for a in same if a < acct][:n]
    if len(out) < n:
        out += [store.text(a) for a in client.zrevrangebyscore(
            keyspace.ACCOUNTS_BY_TIME, f"({score}", "-inf", start=0, num=n - len(out))]
    return out


def browse(client, *, q: str = "", sort: str = "newest", cursor: str | None = None,
           limit: int = 25) -> dict:
    """One page of accounts: ``{"data": [account views + "spent_month_micro"], "next_cursor",
    "matched": what q matched ("account", "key", "key_prefix", "request", "phone") or None,
    "total": accounts listed, "searched": accounts looked at, "capped": more were not}``."""
    if sort not in SORTS:
        raise InvalidCursor(f"sort must be one of {', '.join(SORTS)}, got {sort!r}", reason="invalid")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= accounts.PAGE_MAX:
        raise InvalidCursor(f"limit must be a whole number from 1 to {accounts.PAGE_MAX}, got {limit!r}",
                            reason="limit_range", high=accounts.PAGE_MAX)
    q = (q or "").strip()[:128]
    backfill(client)
    total = client.zcard(keyspace.ACCOUNTS_BY_TIME)
    keyset = sort == "newest" and not q
    at = _parse_cursor(cursor, sort, keyset)
    matched, capped, searched = None, False, 0
    if keyset:
        ids = _after(client, at, limit + 1) if at else _newest(client, limit + 1)
        page, more = ids[:limit], len(ids) > limit
        next_cursor = None
        if more:
            last = page[-1]
            next_cursor = f"t{int(client.zscore(keyspace.ACCOUNTS_BY_TIME, last))}.{last}"
        searched = len(page)
    else:
        matched, ids = _exact(client, q) if q else (None, [])
        if matched is None:
            window = _newest(client, SCAN_MAX)
            searched, capped = len(window), total > len(window)
            matched, ids = _matches(client, q, window) if q else (None, window)
        ids = _sorted(client, ids, sort)
        start = at or 0
        page = ids[start:start + limit]
        next_cursor = f"o{start + limit}" if start + limit < len(ids) else None
    views = [v for _, v in accounts._views(client, page, BATCH) if v is not None]
    spent = spent_this_month(client, [v["account_id"] for v in views])
    for v in views:
        v["spent_month_micro"] = spent[v["account_id"]]
    return {"data": views, "next_cursor": next_cursor, "matched": matched, "total": total,
            "searched": searched, "capped": capped}


def _sorted(client, ids: list[str], sort: str) -> list[str]:
    """`ids` (newest first) in the order asked; ties stay newest first."""
    if sort == "newest" or len(ids) < 2:
        return ids
    if sort == "spend":
        spent = spent_this_month(client, ids)
        return sorted(ids, key=lambda a: -spent[a])
    balance = {a: int(b or 0) for a, b in zip(ids, _fields(client, ids, "balance"))}
    sign = -1 if sort == "balance" else 1
    return sorted(ids, key=lambda a: sign * balance[a])


CSV_FIELDS = ("id", "phone", "status", "balance_toman", "held_toman", "available_toman", "free_quota_per_day",
              "low_balance_toman", "created_at", "spent_this_month_toman")


def export_csv(client, default_quota: int, *, q: str = "", sort: str = "newest") -> str:
    """The accounts `browse` finds for `q` in `sort` order — every page, at most SCAN_MAX
    accounts — as CSV: the account object's fields and this Jalali month's spend (csv_safe)."""
    from upgate.billing import money
    from upgate.services import csv_safe

    rows, cursor = [], None
    while len(rows) < SCAN_MAX:
        page = browse(client, q=q, sort=sort, cursor=cursor, limit=accounts.PAGE_MAX)
        rows += [{**accounts.account_object(v, default_quota),
                  "spent_this_month_toman": money.fmt(v["spent_month_micro"])} for v in page["data"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    return csv_safe.write(CSV_FIELDS, rows[:SCAN_MAX])


__all__ = ["SCAN_MAX", "SORTS", "backfill", "browse", "export_csv", "spent_this_month", "UnknownAccount"]
