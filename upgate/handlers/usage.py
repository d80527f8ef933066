"""GET /v1/svc/usage?group_by=key|model|day&from=YYYY-MM-DD&to=YYYY-MM-DD (Jalali, Tehran days).

Read from the aggregates that settle.lua keeps per account and day; no per-request log and no
content exist to read. Defaults to the current Jalali month. Not counted toward rpm.
"""
from __future__ import annotations

from upgate.services import usage
from upgate.errors import GatewayError
from upgate.handlers.base import BaseHandler

MAX_DAYS = usage.MAX_DAYS


def parse_range(start: str | None, end: str | None) -> list[str]:
    """The report's days (usage.day_range), a refusal as the client API's 400."""
    try:
        return usage.day_range(start, end)
    except usage.InvalidRange as e:
        raise GatewayError("invalid_request", str(e), param=e.field) from None


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
