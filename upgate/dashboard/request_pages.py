"""/dashboard/requests (the lookup by X-Svc-Request-Id, and the records filtered by Jalali dates,
model, key and status, a page at a time or as CSV) and /dashboard/usage?format=csv. The records
come through services/account_requests.py; the account id from the session only."""
from __future__ import annotations

import urllib.parse

from upgate.dashboard.base import Refused
from upgate.dashboard.page import Page
from upgate.services import csv_safe, keys, phones, records, account_requests, statements, usage

FILTERS = ("from", "to", "model", "key", "status")


def _page(client, account_id: str, filters: dict) -> dict:
    return {"results": account_requests.search(client, account_id, filters),
            "models": account_requests.choices(client, account_id)["models"],
            "keys": keys.list_keys(client, account_id)}


def _csv(client, account_id: str, filters: dict) -> str:
    return account_requests.to_csv(account_requests.search(client, account_id, filters, limit=0)["rows"])


class RequestsHandler(Page):
    nav = "requests"

    def typed(self) -> dict:
        """The filters as typed; a date in Persian digits or with "/" is the same date."""
        out = {f: self.get_query_argument(f, "").strip() for f in FILTERS}
        for f in ("from", "to"):
            out[f] = phones.ascii_digits(out[f]).replace("/", "-")
        return out

    async def get(self) -> None:
        typed = self.typed()
        try:
            filters = account_requests.check(start=typed["from"], end=typed["to"], model=typed["model"],
                                           key=typed["key"], status=typed["status"],
                                           cursor=self.get_query_argument("cursor", "").strip())
        except account_requests.InvalidFilter as e:
            raise Refused(400, self.said(e)) from None
        if self.get_query_argument("format", "") == "csv":
            text = await self.call(_csv, self.account_id, filters)
            self.set_header("Content-Type", "text/csv; charset=UTF-8")
            self.set_header("Content-Disposition", 'attachment; filename="requests.csv"')
            return self.finish(text)
        rid = self.get_query_argument("id", "").strip()
        found_one, missing = None, False
        if rid:
            try:
                found_one = await self.call(records.find_own, self.account_id, rid)
            except records.UnknownRequest:  # another account's id too: the same answer
                missing = True
                self.set_status(404)
        page = await self.call(_page, self.account_id, filters)
        query = [(k, v) for k, v in typed.items() if v]
        self.render("requests.html", rid=rid, found=found_one, missing=missing, typed=typed, **page,
                    csv_url="/dashboard/requests?" + urllib.parse.urlencode(query + [("format", "csv")]),
                    next_url=("/dashboard/requests?" + urllib.parse.urlencode(
                        query + [("cursor", page["results"]["next_cursor"])])) if page["results"]["next_cursor"] else None)


USAGE_CSV_FIELDS = {"day": ("day",), "model": ("model",), "key": ("key_id", "key_name")}


def _usage_csv(client, account_id: str, month: str, by: str) -> str:
    days = usage.month_days(month)
    rows = usage.report(usage.fetch(client, account_id, days), by)["rows"]
    if by == "key":
        names = {k["key_id"]: k["name"] or "" for k in keys.list_keys(client, account_id)}
        rows = [{**r, "key_name": names.get(r["key_id"], "")} for r in rows]
    return csv_safe.write(USAGE_CSV_FIELDS[by] + ("requests", "prompt_tokens", "cached_tokens",
                                                  "completion_tokens", "cost_toman"), rows)


async def usage_csv(handler: Page) -> None:
    """GET /dashboard/usage?format=csv[&by=day|model|key]: the month's usage as CSV."""
    month = handler.month()
    by = handler.get_query_argument("by", "day")
    if by not in USAGE_CSV_FIELDS:
        raise Refused(400, handler.locale.translate("That report is not one the dashboard offers."))
    try:
        text = await handler.call(_usage_csv, handler.account_id, month, by)
    except statements.InvalidMonth:
        raise Refused(400, handler.locale.translate("That month is not one the dashboard can show.")) from None
    handler.set_header("Content-Type", "text/csv; charset=UTF-8")
    handler.set_header("Content-Disposition", f'attachment; filename="usage-{month}-by-{by}.csv"')
    handler.finish(text)

