"""An account holder's request records, filtered and paged (the dashboard's /dashboard/requests:
`from`, `to` (Jalali YYYY-MM-DD, Tehran days, both ends included), `model`, `key`, `status`,
cursor paging, `?format=csv`) and per-key figures drawn from the same records and the daily
aggregates (last used, a 30-day sparkline).

Records are read only through services/records.py's `list_requests` (upgate/billing/
request_record.py owns their stored form, which changes under us), newest first, at most
`records.MAX_LIMIT` of them: the filters look at the account's newest MAX_LIMIT records, and say
so (`scanned_all` False) when older ones may exist beyond.

`status`: "" (all), "ok" (below 400), "4xx", "5xx", or one HTTP status ("429").
"""
from __future__ import annotations

import jdatetime

from upgate.billing import jalali, money
from upgate.i18n import dates
from upgate.services import csv_safe, records, usage
from upgate.services.account_rules import AccountError

PAGE = 50
STATUS_CLASSES = ("ok", "4xx", "5xx")
CSV_FIELDS = ("request_id", "time", "key_id", "key_prefix", "model", "status", "code", "prompt_tokens",
              "completion_tokens", "cached_tokens", "cost_toman", "duration_ms")
SPARK_DAYS = 30


class InvalidFilter(AccountError):
    """A filter is not one the page offers; `field` names it."""

    def __init__(self, message: str, field: str):
        super().__init__(message)
        self.field = field


def _day_ms(text: str, field: str, end: bool) -> int:
    try:
        day = jalali.parse_day(text)
    except ValueError:
        raise InvalidFilter(f"{field} must be a Jalali date YYYY-MM-DD, got {text!r}", field) from None
    if not 1300 <= day.year <= 1500:
        raise InvalidFilter(f"{field} must be a Jalali date YYYY-MM-DD, got {text!r}", field)
    return jalali.day_start_ms(day, 1 if end else 0)


def check(*, start: str = "", end: str = "", model: str = "", key: str = "", status: str = "") -> dict:
    """The filters as typed → {"since_ms", "until_ms", "model", "key", "status"}, or InvalidFilter."""
    since = _day_ms(start, "from", False) if start else None
    until = _day_ms(end, "to", True) if end else None
    if since is not None and until is not None and until <= since:
        raise InvalidFilter("`to` is before `from`", "to")
    for name, value in (("model", model), ("key", key)):
        if len(value) > 200 or not value.isprintable():
            raise InvalidFilter(f"{name} is not one the page offers", name)
    if status and status not in STATUS_CLASSES and not (len(status) == 3 and status.isdigit()):
        raise InvalidFilter("status must be ok, 4xx, 5xx or an HTTP status", "status")
    return {"since_ms": since, "until_ms": until, "model": model, "key": key, "status": status}


def _ms(record: dict) -> int:
    moment = dates.parse_time(record["time"])
    return int(moment.timestamp() * 1000) if moment else 0


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
    t = _ms(r)
    return ((f["since_ms"] is None or t >= f["since_ms"]) and (f["until_ms"] is None or t < f["until_ms"])
            and (not f["model"] or r["model"] == f["model"]) and (not f["key"] or r["key_id"] == f["key"])
            and _status_ok(f["status"], r["status"]))


def search(client, account_id: str, filters: dict, *, cursor: str = "", limit: int = PAGE) -> dict:
    """{"rows": the page (records as the customer sees them), "next_cursor": the last row's id
    when more match, "scanned_all": whether every kept record was looked at}. `limit` 0: every
    match (the CSV)."""
    kept = records.list_requests(client, account_id, limit=records.MAX_LIMIT)
    rows = [records.for_customer(r) for r in kept if _matches(r, filters)]
    if cursor:
        at = next((i for i, r in enumerate(rows) if r["request_id"] == cursor), None)
        rows = rows[at + 1:] if at is not None else []
    more = bool(limit) and len(rows) > limit
    page = rows[:limit] if limit else rows
    return {"rows": page, "next_cursor": page[-1]["request_id"] if more else None,
            "scanned_all": len(kept) < records.MAX_LIMIT}


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
