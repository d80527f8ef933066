"""Finding requests across accounts (OPERATORS.md "support desk"): the request records kept for
every account — settled ones and refused ones — filtered by a Jalali period, model, key, HTTP
status and code, newest first, a page at a time.

Bounded by construction, for the admin read pool: the period is at most MAX_DAYS Jalali days
(default: today); the accounts are at most account_list.SCAN_MAX (one key's account alone when
`key` is given); each account's records in the period are first counted (ZCOUNT, one pipeline),
and at most READ_MAX of them are read and decoded per call (pipelined BATCH accounts per round
trip). When the period holds more, the answer says `capped` and how many were searched: narrow
the period, or give the key. Records are decoded newest first only until the page is full
(an unfiltered page reads each account's newest limit+1 alone). The cursor is the last record's (time ms, request id): the next
page reads what is strictly older, so a record landing meanwhile is never shown twice.

Records are read and decoded only through services/records.py (`account_window`), so their
stored form may change under this module.
"""
from __future__ import annotations

from upgate.billing import jalali
from upgate.services import periods, phones, records
from upgate.services.account_rules import AccountError
from upgate.store import connection as store, keyspace

MAX_DAYS = 31
READ_MAX = 50_000  # records decoded per search at most
ACCOUNTS_MAX = 10_000
BATCH = 500
PAGE_MAX = 500
DAY_MS = 86_400_000


class InvalidSearch(AccountError):
    def __init__(self, message: str, field: str, **kw):
        super().__init__(message, **kw)
        self.field = field


def _cursor(text: str | None) -> tuple[int, str] | None:
    if not text:
        return None
    ms, _, rid = text.partition(".")
    if not ms.isdigit() or not rid or len(rid) > 64:
        raise InvalidSearch(f"not a cursor from a previous page: {text[:80]!r}", "cursor", reason="cursor_invalid")
    return int(ms), rid


def _period(start: str | None, end: str | None) -> tuple[int, int]:
    """[lo, hi) ms: from `start`'s Tehran midnight (default: `end`'s day, or today) to the
    midnight after `end` (default: after today)."""
    lo, hi = periods.bounds_ms(start or None, end or None)
    today = jalali.tehran_day_bounds()
    hi = hi if hi is not None else int(today[1] * 1000)
    lo = lo if lo is not None else (hi - DAY_MS if end else int(today[0] * 1000))
    if hi <= lo:
        raise InvalidSearch("to is before from", "to", reason="range_backwards")
    if hi - lo > DAY_MS * MAX_DAYS + 2 * 3_600_000:  # (a day may be 23 or 25 hours long)
        raise InvalidSearch(f"at most {MAX_DAYS} days per search: narrow from/to", "from", reason="range_too_long",
                            n=MAX_DAYS)
    return lo, hi


def _status(value) -> int | None:
    if value in (None, ""):
        return None
    text = phones.ascii_digits(str(value)).strip()  # Persian digits are digits
    if not (text.isascii() and text.isdigit() and 100 <= int(text) <= 599):
        raise InvalidSearch(f"status must be an HTTP status from 100 to 599, got {text[:20]!r}", "status",
                            reason="status_invalid")
    return int(text)


def search(client, *, start: str | None = None, end: str | None = None, model: str | None = None,
           key: str | None = None, status=None, code: str | None = None, limit: int = 50,
           cursor: str | None = None) -> dict:
    """{"data": [request record], "next_cursor", "searched": records looked at, "capped": bool,
    "from", "to": the period as Jalali days}. Filters: `model` (asked or answered), `key` (a key
    id), `status` (HTTP), `code` (the error code; "ok" for none)."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= PAGE_MAX:
        raise InvalidSearch(f"limit must be a whole number from 1 to {PAGE_MAX}", "limit", reason="limit_range",
                            high=PAGE_MAX)
    lo, hi = _period(start, end)
    after = _cursor(cursor)
    if after is not None:
        hi = min(hi, after[0] + 1)
    want_status = _status(status)
    model = (model or "").strip() or None
    code = (code or "").strip() or None
    key = (key or "").strip() or None
    if key is not None:
        owner = client.get(keyspace.key_owner(key)) if len(key) <= 64 else None
        ids = [store.text(owner)] if owner is not None else []
    else:
        ids = [store.text(a) for a in client.sscan_iter(keyspace.ACCOUNTS, count=1000)][:ACCOUNTS_MAX]
    counts = records.count_window(client, ids, lo, hi, BATCH)
    busy = [a for a in ids if counts.get(a)]
    total = sum(counts.values())
    filtered = any(v is not None for v in (model, key, want_status, code))
    # unfiltered, an account's newest limit+1 in the period are all a page can need
    per_account = READ_MAX if filtered else limit + 1
    capped = total > READ_MAX and (filtered or len(busy) * per_account > READ_MAX)
    entries: list[tuple[int, str, bytes]] = []  # read, not decoded yet: only what a page shows is
    for i in range(0, len(busy), BATCH):
        budget = READ_MAX - len(entries)
        if budget <= 0:
            break
        entries += [(ms, acct, raw) for acct, raw, ms in
                    records.account_window_raw(client, busy[i:i + BATCH], lo, hi, min(per_account, budget))]
    found: list[tuple[int, dict]] = []
    for ms, rec in _newest_first(entries):
        if after is not None and (ms, rec["request_id"]) >= after:
            continue
        if _matches(rec, model, key, want_status, code):
            found.append((ms, rec))
            if len(found) > limit:
                break
    page = found[:limit]
    nxt = f"{page[-1][0]}.{page[-1][1]['request_id']}" if len(found) > limit else None
    return {"data": [r for _, r in page], "next_cursor": nxt, "searched": len(entries), "capped": capped,
            "from": jalali.day_key(lo / 1000), "to": jalali.day_key((hi - 1) / 1000)}


def _newest_first(entries: list[tuple[int, str, bytes]]):
    """(time ms, record) newest first, decoding as it goes (records.decode: the stored form is
    request_record's business); records of one millisecond in request id order, newest first."""
    entries.sort(key=lambda e: e[0], reverse=True)
    i = 0
    while i < len(entries):
        j = i
        while j < len(entries) and entries[j][0] == entries[i][0]:
            j += 1
        group = [(ms, records.decode(acct, raw)) for ms, acct, raw in entries[i:j]]
        group.sort(key=lambda g: g[1]["request_id"], reverse=True)
        yield from group
        i = j


def _matches(rec: dict, model, key, status, code) -> bool:
    if model is not None and model not in (rec.get("model"), rec.get("answered_model")):
        return False
    if key is not None and rec.get("key_id") != key:
        return False
    if status is not None and rec.get("status") != status:
        return False
    if code is not None and (rec.get("code") or "ok") != code:
        return False
    return True


def to_csv(found: dict) -> str:
    from upgate.services import csv_safe

    return csv_safe.write(records.PUBLIC, found["data"])
