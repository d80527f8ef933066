"""The usage report, from the daily aggregates settle.lua keeps per account.

Each Tehran day of an account has one hash, ``keyspace.usage(account, day)``, whose fields are
``<dimension>|<name>|<metric>``: dimension ``key`` (name = key id) or ``model`` (name = model
id); the day's totals are the sum over its models, since every settlement has exactly one (hashes
written before also hold a ``total`` dimension, which is ignored); metric ``requests``, ``prompt_tokens``, ``cached_tokens`` (the part
of the prompt the provider served from its cache), ``completion_tokens`` or ``cost`` (micro-toman). No per-request log and no content exist to read.
"""
from __future__ import annotations

from upgate.billing import jalali, money
from upgate.store import connection as store, keyspace
from upgate.errors import Reasoned

GROUPS = {"key": "key_id", "model": "model", "day": "day"}
MAX_DAYS = 366


class InvalidRange(Reasoned):
    """A report's `from`/`to` is not a Jalali day, runs backwards or spans too many days."""

    def __init__(self, message: str, field: str, **reason):
        super().__init__(message, **reason)
        self.field = field


def day_range(start: str | None, end: str | None) -> list[str]:
    """The Jalali days from `start` to `end` (YYYY-MM-DD, Tehran; each defaults to the current
    month's first or last day), at most MAX_DAYS — counted by date arithmetic before any day is
    listed (listing 0001-01-01..1500-01-01 one day at a time held a node's loop for 10 s)."""
    first, last = jalali.this_month()
    for name, text in (("from", start), ("to", end)):
        try:
            if text and name == "from":
                first = jalali.parse_day(text)
            elif text:
                last = jalali.parse_day(text)
        except ValueError as e:
            raise InvalidRange(str(e), name, reason="date_malformed") from None
    if last < first:
        raise InvalidRange("`to` is before `from`.", "to", reason="range_backwards")
    if (last.togregorian() - first.togregorian()).days >= MAX_DAYS:
        raise InvalidRange(f"At most {MAX_DAYS} days per report.", "to", reason="range_too_long", n=MAX_DAYS)
    return jalali.days(first, last)
METRICS = ("requests", "prompt_tokens", "cached_tokens", "completion_tokens", "cost")


def month_days(month: str) -> list[str]:
    """A Jalali month's Tehran days up to today (all of them for a past month; the first for a
    month not begun): the days a dashboard or console chart of that month shows."""
    first, last = jalali.parse_month(month)
    today = jalali.day_key()
    return [d for d in jalali.days(first, last) if d <= today] or [jalali.days(first, last)[0]]


def by_day(days: list[str], report: dict) -> list[dict]:
    """A `group_by=day` report's rows (days without requests are left out) on every day given."""
    rows = {r["day"]: r for r in report["rows"]}
    blank = {"requests": 0, "prompt_tokens": 0, "completion_tokens": 0, "cost_toman": "0.000000"}
    return [{"day": d, **rows.get(d, blank)} for d in days]


def _blank() -> dict:
    return {m: 0 for m in METRICS}


def _render(counts: dict) -> dict:
    return {"requests": counts["requests"], "prompt_tokens": counts["prompt_tokens"],
            "cached_tokens": counts["cached_tokens"], "completion_tokens": counts["completion_tokens"], "cost_toman": money.fmt(counts["cost"])}


def _fields(raw: dict | None):
    """(dimension, name, metric, value) of each well-formed field of a raw day hash."""
    for raw_field, raw_value in (raw or {}).items():
        dim, _, rest = store.text(raw_field).partition("|")
        name, _, metric = rest.rpartition("|")
        if metric not in METRICS:
            continue
        try:
            yield dim, name, metric, int(store.text(raw_value))
        except ValueError:
            continue


def totals(raw: dict | None) -> dict[str, int]:
    """One day's totals from its raw hash: every metric summed over the day's models."""
    out = _blank()
    for dim, _name, metric, value in _fields(raw):
        if dim == "model":
            out[metric] += value
    return out


def report(days: dict[str, dict], group_by: str) -> dict:
    """days: Tehran day "YYYY-MM-DD" → that day's raw usage hash (bytes or str). Returns
    ``{"rows": [{<key_id|model|day>, requests, prompt_tokens, cached_tokens, completion_tokens,
    cost_toman}],
    "totals": {...}}`` with amounts as six-fractional-digit strings. Rows by key or model are
    sorted by cost (highest first), rows by day by date; days without requests are left out."""
    if group_by not in GROUPS:
        raise InvalidRange(f"group_by must be one of {', '.join(GROUPS)}", "group_by", reason="invalid")
    groups: dict[str, dict] = {}
    sums = _blank()
    for day in sorted(days):
        for dim, name, metric, value in _fields(days[day]):
            if dim == "model":
                sums[metric] += value
                if group_by == "day":
                    groups.setdefault(day, _blank())[metric] += value
            if dim == group_by:
                groups.setdefault(name, _blank())[metric] += value
    label = GROUPS[group_by]
    rows = [{label: name, **_render(c)} for name, c in groups.items() if c["requests"] or c["cost"]]
    if group_by == "day":
        rows.sort(key=lambda r: r["day"])
    else:
        rows.sort(key=lambda r: (-groups[r[label]]["cost"], r[label]))
    return {"rows": rows, "totals": _render(sums)}


def fetch(client, account_id: str, days: list[str]) -> dict[str, dict]:
    """The raw daily hashes, one pipeline of HGETALLs (sync client: the operator CLI)."""
    pipe = client.pipeline(transaction=False)
    for day in days:
        pipe.hgetall(keyspace.usage(account_id, day))
    return dict(zip(days, pipe.execute()))


def account_report(client, account_id: str, days: list[str], group_by: str) -> dict:
    """GET /v1/svc/usage's and /admin/v1/accounts/{id}/usage's body (sync client, run on the
    admin read pool: a year of an account with many keys and models is ~10^5 fields to sum,
    which must not happen on the event loop)."""
    out = report(fetch(client, account_id, days), group_by)
    out.update({"account_id": account_id, "from": days[0], "to": days[-1], "group_by": group_by})
    return out


async def afetch(client, account_id: str, days: list[str]) -> dict[str, dict]:
    """The raw daily hashes, one pipeline of HGETALLs (async client: the usage endpoint)."""
    pipe = client.pipeline(transaction=False)
    for day in days:
        pipe.hgetall(keyspace.usage(account_id, day))
    return dict(zip(days, await pipe.execute()))


def overview(client, days: list[str], batch: int = 200) -> dict[str, dict]:
    """Requests and charges (micro-toman) per day over every account: Tehran day →
    ``{"requests", "charges"}``. Reads each account's daily hashes, one pipelined HGETALL per
    account and day, `batch` accounts per round trip: N accounts × D days commands, no write and
    no aggregate kept anywhere (the client path stays untouched)."""
    out = {day: {"requests": 0, "charges": 0} for day in days}
    ids = [store.text(a) for a in client.sscan_iter(keyspace.ACCOUNTS, count=1000)]
    for start in range(0, len(ids), batch):
        pipe = client.pipeline(transaction=False)
        for acct in ids[start:start + batch]:
            for day in days:
                pipe.hgetall(keyspace.usage(acct, day))
        for i, raw in enumerate(pipe.execute()):
            if raw:
                t, day = totals(raw), out[days[i % len(days)]]
                day["requests"] += t["requests"]
                day["charges"] += t["cost"]
    return out
