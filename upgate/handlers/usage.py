"""GET /v1/svc/usage?group_by=key|model|day&from=YYYY-MM-DD&to=YYYY-MM-DD (Jalali, Tehran days).

Read from the aggregates that settle.lua keeps per account and day; no per-request log and no
content exist to read. Defaults to the current Jalali month. Not counted toward rpm.
"""
from __future__ import annotations

from upgate.billing import jalali
from upgate.services import usage
from upgate.errors import GatewayError
from upgate.handlers.base import BaseHandler

MAX_DAYS = 366


def parse_range(start: str | None, end: str | None) -> list[str]:
    first, last = jalali.this_month()
    for name, text in (("from", start), ("to", end)):
        try:
            if text and name == "from":
                first = jalali.parse_day(text)
            elif text:
                last = jalali.parse_day(text)
        except ValueError as e:
            raise GatewayError("invalid_request", str(e), param=name) from None
    if last < first:
        raise GatewayError("invalid_request", "`to` is before `from`.", param="to")
    # counted by date arithmetic before any day is listed: listing 0001-01-01..1500-01-01
    # one day at a time held the node's loop for 10 s
    if (last.togregorian() - first.togregorian()).days >= MAX_DAYS:
        raise GatewayError("invalid_request", f"At most {MAX_DAYS} days per report.", param="to")
    return jalali.days(first, last)


class UsageHandler(BaseHandler):
    needs_key = True

    async def get(self) -> None:
        ctx = self.ctx
        key = self.key  # (checked in prepare; the access log names it and its account)
        self.set_rate(await ctx.ledger.rate_peek(key.account_id, key.key_id))
        group_by = self.get_query_argument("group_by", "key")
        if group_by not in ("key", "model", "day"):
            raise GatewayError("invalid_request", "`group_by` must be key, model or day.")
        days = parse_range(self.get_query_argument("from", None), self.get_query_argument("to", None))
        self.write_json(await ctx.admin.read(usage.account_report, key.account_id, days, group_by))
