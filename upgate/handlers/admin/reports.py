"""/admin/v1/accounts/{id}/usage (the usage report, as GET /v1/svc/usage gives a key's own
account) and /admin/v1/overview (every account, per Jalali day)."""
from __future__ import annotations

from upgate.services import accounts, audit, usage
from upgate.errors import GatewayError
from upgate.handlers.admin.base import AdminHandler
from upgate.handlers.admin.spec import JDAY, MONEY, Op, obj
from upgate.handlers.usage import parse_range

_ROW = {"requests": {"type": "integer"}, "prompt_tokens": {"type": "integer"},
        "completion_tokens": {"type": "integer"}, "cost_toman": MONEY}


def _usage(client, account_id: str, days: list[str], group_by: str) -> dict:
    return usage.account_report(client, accounts.require_account(client, account_id), days, group_by)


class UsageHandler(AdminHandler):
    PATH = "/admin/v1/accounts/{id}/usage"
    OPS = {"get": Op("The usage report: requests, tokens and cost per key, model or day (Jalali days, "
                     "default the current month).",
                     obj({"rows": {"type": "array", "items": {"type": "object"}}, "totals": obj(_ROW),
                          "account_id": {"type": "string"}, "from": JDAY, "to": JDAY,
                          "group_by": {"enum": ["key", "model", "day"]}}),
                     query={"group_by": {"enum": ["key", "model", "day"]}, "from": JDAY, "to": JDAY})}

    async def get(self, account_id: str) -> None:
        group_by = self.get_query_argument("group_by", "key")
        if group_by not in usage.GROUPS:
            raise GatewayError("invalid_request", "group_by must be key, model or day.", param="group_by")
        days = parse_range(self.get_query_argument("from", None), self.get_query_argument("to", None))
        self.write_json(await self.call(_usage, account_id, days, group_by))


class OverviewHandler(AdminHandler):
    PATH = "/admin/v1/overview"
    _DAY = obj({"day": JDAY, "requests": {"type": "integer"}, "charges_toman": MONEY, "topups_toman": MONEY})
    OPS = {"get": Op("Every account together, per Jalali day: requests, charges and top-ups "
                     "(default the current month; cached 30 s per range on a node).",
                     obj({"from": JDAY, "to": JDAY, "days": {"type": "array", "items": _DAY},
                          "totals": obj({"requests": {"type": "integer"}, "charges_toman": MONEY,
                                         "topups_toman": MONEY})}),
                     query={"from": JDAY, "to": JDAY})}
    async def get(self) -> None:
        days = parse_range(self.get_query_argument("from", None), self.get_query_argument("to", None))
        self.write_json(await self.ctx.admin.overview(days))



class AuditHandler(AdminHandler):
    PATH = "/admin/v1/audit"
    OPS = {"get": Op("The audit, as `upgate-admin audit`: every account's balance against everything "
                     "recorded for it (transactions minus charges). 200 whatever it finds; "
                     "?deep=true also adds up every transaction log (slower).",
                     obj({"accounts": {"type": "integer"},
                          "mismatches": {"type": "array", "items": obj({
                              "account_id": {"type": "string"}, "balance_toman": MONEY,
                              "expected_toman": MONEY})}}),
                     query={"deep": {"type": "boolean"}})}

    async def get(self) -> None:
        deep = self.get_query_argument("deep", "false")
        if deep not in ("true", "false"):
            raise GatewayError("invalid_request", "deep must be true or false.", param="deep")
        self.write_json(await self.call(audit.run, deep=deep == "true"))


HANDLERS = [UsageHandler, OverviewHandler, AuditHandler]
