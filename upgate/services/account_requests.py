"""An account holder's request records, filtered and paged (the dashboard's /dashboard/requests:
`from`, `to` (Jalali YYYY-MM-DD, Tehran days, both ends included), `model`, `key`, `status`,
cursor paging, `?format=csv`) and per-key figures drawn from the same records and the daily
aggregates (last used, a 30-day sparkline).

Records are read only through services/records.py (`account_window`: a time window of the
account's billed and refused records, newest first; upgate/billing/request_record.py owns their
stored form, which changes under us). The date filters are that window, applied in Redis; a page
reads at most WINDOW_READ records of it and filters model, key and status in Python. A cursor
("<ms>-<request id>", the last row shown) continues strictly below it, so paging walks the whole
retention; when a read was cut short before a page filled, the page is short and still has a
cursor to go on from.

`status`: "" (all), "ok" (below 400), "4xx", "5xx", or one HTTP status ("429").
"""
from __future__ import annotations

import time

import jdatetime

from upgate.billing import jalali, money
from upgate.services import csv_safe, records, usage
from upgate.services.account_rules import AccountError

PAGE = 50
WINDOW_READ = 2000  # records of the window read for one page, at most (billed and refused each)
CSV_MAX = 50_000  # rows of one CSV at most (five times the default retention's cap)
DAY_MS = 86_400_000
STATUS_CLASSES = ("ok", "4xx", "5xx")
CSV_FIELDS = ("request_id", "time", "key_id", "key_prefix", "model", "status", "code", "prompt_tokens",
              "completion_tokens", "cached_tokens", "cost_toman", "duration_ms")
SPARK_DAYS = 30


class InvalidFilter(AccountError):
    """A filter is not one the page offers; `field` names it."""

    reason = "filter_invalid"

    def __init__(self, message: str, field: str, **kw):
        super().__init__(message, **kw)
        self.field = field


def _day_ms(text: str, field: str, end: bool) -> int:
    try:
        day = jalali.parse_day(text)
    except ValueError:
        raise InvalidFilter(f"{field} must be a Jalali date YYYY-MM-DD, got {text!r}", field,
                            reason="date_malformed") from None
    if not 1300 <= day.year <= 1500:
        raise InvalidFilter(f"{field} must be a Jalali date YYYY-MM-DD, got {text!r}", field, reason="date_malformed")
    return jalali.day_start_ms(day, 1 if end else 0)


def check(*, start: str = "", end: str = "", model: str = "", key: str = "", status: str = "",
          cursor: str = "") -> dict:
    """The filters as typed (and a page's cursor) → {"since_ms", "until_ms", "model", "key",
    "status", "after"}, or InvalidFilter."""
    since = _day_ms(start, "from", False) if start else None
    until = _day_ms(end, "to", True) if end else None
    if since is not None and until is not None and until <= since:
        raise InvalidFilter("`to` is before `from`", "to", reason="range_backwards")
    for name, value in (("model", model), ("key", key)):
        if len(value) > 200 or not value.isprintable():
            raise InvalidFilter(f"{name} is not one the page offers", name)
    if status and status not in STATUS_CLASSES and not (len(status) == 3 and status.isdigit()):
        raise InvalidFilter("status must be ok, 4xx, 5xx or an HTTP status", "status")
    return {"since_ms": since, "until_ms": until, "model": model, "key": key, "status": status,
            "after": _cursor(cursor)}


def _status_ok(want: str, status) -> bool:
    if not want:
        return True
    s = int(status or 0)
    if want == "ok":
        return 0 < s < 400
    if want in ("4xx", "5xx"):
        return s // 100 == int(want[0])
    return s == int(want)


def _matches(r: dict, f: dict) -> bool:
    return ((not f["model"] or r["model"] == f["model"]) and (not f["key"] or r["key_id"] == f["key"])
            and _status_ok(f["status"], r["status"]))


def _cursor(text: str) -> tuple[int, str] | None:
    if not text:
        return None
    ms, _, rid = text.partition("-")
    if not (ms.isdigit() and len(ms) <= 15 and 0 < len(rid) <= 64 and rid.isprintable()):
        raise InvalidFilter(f"not a cursor from a previous page: {text[:80]!r}", "cursor", reason="cursor_invalid")
    return int(ms), rid


def _page(client, account_id: str, f: dict, after: tuple[int, str] | None, limit: int):
    """(matching rows with their (ms, id), the cursor to go on from or None)."""
    lo = f["since_ms"] or 0
    hi = f["until_ms"] or int(time.time() * 1000) + DAY_MS
    if after is not None:
        hi = min(hi, after[0] + 1)
    got = sorted(((ms, r["request_id"], r) for r, ms in records.account_window(client, [account_id], lo, hi, WINDOW_READ)),
                 key=lambda t: (t[0], t[1]), reverse=True)
    if after is not None:
        got = [t for t in got if (t[0], t[1]) < after]
    cut = None
    if len(got) >= WINDOW_READ:  # a set was cut short: only what is newer than its oldest is whole
        cut = got[WINDOW_READ - 1][0]
        whole = [t for t in got if t[0] > cut]
        got = whole or got[:WINDOW_READ]
    rows = [t for t in got if _matches(t[2], f)]
    if limit and len(rows) > limit:
        last = rows[limit - 1]
        return rows[:limit], f"{last[0]}-{last[1]}"
    if cut is not None:
        return rows, f"{cut}-~" if any(t[0] > cut for t in got) else f"{got[-1][0]}-{got[-1][1]}"
    return rows, None


def search(client, account_id: str, filters: dict, *, limit: int = PAGE) -> dict:
    """{"rows": the page (records as the customer sees them), "next_cursor": where the next
    page starts, or None}. `limit` 0: every match, page after page up to CSV_MAX (the CSV)."""
    after = filters.get("after")
    if limit:
        rows, nxt = _page(client, account_id, filters, after, limit)
        return {"rows": [records.for_customer(t[2]) for t in rows], "next_cursor": nxt}
    out: list = []
    while len(out) < CSV_MAX:
        rows, nxt = _page(client, account_id, filters, after, 0)
        out += rows
        if nxt is None:
            break
        after = _cursor(nxt)
    return {"rows": [records.for_customer(t[2]) for t in out[:CSV_MAX]], "next_cursor": None}


def choices(client, account_id: str) -> dict:
    """The models the account's kept records name (the model filter's options)."""
    kept = records.list_requests(client, account_id, limit=records.MAX_LIMIT)
    return {"models": sorted({r["model"] for r in kept if r["model"]})}


def to_csv(rows: list[dict]) -> str:
    return csv_safe.write(CSV_FIELDS, rows)


# ---- per key ------------------------------------------------------------------------------------

def key_figures(client, account_id: str, key_ids: list[str]) -> dict[str, dict]:
    """key id → {"daily_cost_micro": the last 30 Tehran days' cost, oldest first, "days",
    "last_used": the newest kept record's time (ISO UTC) or None, "last_used_day": the last day
    with requests in those 30 days (Jalali key) when no record is kept}."""
    today = jalali.parse_day(jalali.day_key())
    days = jalali.days(today - jdatetime.timedelta(days=SPARK_DAYS - 1), today)
    raw = usage.fetch(client, account_id, days)
    out = {k: {"daily_cost_micro": [0] * len(days), "days": days, "requests_30d": 0, "last_used": None,
               "last_used_day": None} for k in key_ids}
    for i, day in enumerate(days):
        for dim, name, metric, value in usage._fields(raw.get(day)):  # noqa: SLF001 (the one reader)
            if dim != "key" or name not in out:
                continue
            if metric == "cost":
                out[name]["daily_cost_micro"][i] += value
            elif metric == "requests" and value:
                out[name]["requests_30d"] += value
                out[name]["last_used_day"] = day
    for r in records.list_requests(client, account_id, limit=records.MAX_LIMIT):
        k = out.get(r["key_id"])
        if k is not None and k["last_used"] is None:
            k["last_used"] = r["time"]
    return out


def micro_total(values: list[int]) -> str:
    return money.fmt(sum(values))
