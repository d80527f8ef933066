"""The console's pages for what is not one account's: a request's record (the id a client quotes
from X-Svc-Request-Id), the audit with the admin log, failed webhook deliveries (resend, test),
and the price sync form. Each calls the service function the management API and the CLI call;
a refusal shows its one line from the shared vocabulary (upgate/services/refusals.py)."""
from __future__ import annotations

import functools
import urllib.parse

import tornado.web

from upgate.catalog import store as catalog_store
from upgate.console import data, view
from upgate.console.base import PREFIX, ConsoleHandler
from upgate.console.pages import log_console_write, refusal_status
from upgate.services import admin_log, audit, prices, records, request_search
from upgate.webhooks import service as webhooks

AUDIT_LOG_SHOWN = 100
REQUESTS_SHOWN = 50
FAILED_SHOWN = 100


class RequestHandler(ConsoleHandler):
    async def get(self, request_id: str) -> None:
        try:
            record = await self.call(records.find, request_id)
        except records.UnknownRequest as e:
            raise tornado.web.HTTPError(404, str(e)) from None
        await self.render_page("request.html", nav="accounts", record=record)


class RequestsHandler(ConsoleHandler):
    """GET /admin/requests: requests across accounts (services/request_search.py) by Jalali
    days, model, key, status and code; a request id opens its record; CSV of the same page."""

    FIELDS = ("from", "to", "model", "key", "status", "code")

    async def get(self) -> None:
        typed = {k: self.get_query_argument(k, "").strip() for k in (*self.FIELDS, "id")}
        if typed["id"]:
            self.redirect(f"{PREFIX}/requests/{urllib.parse.quote(typed['id'], safe='')}", status=303)
            return
        cursor = self.get_query_argument("cursor", None)
        found, message = None, None
        try:
            found = await self.call(request_search.search, start=typed["from"], end=typed["to"], model=typed["model"],
                                    key=typed["key"], status=typed["status"], code=typed["code"], cursor=cursor,
                                    limit=REQUESTS_SHOWN)
        except ValueError as e:
            message = self.said(e)
            self.set_status(400)
        query = {k: v for k, v in typed.items() if v and k != "id"}
        if self.get_query_argument("format", "") == "csv" and found is not None:
            self.set_header("Content-Type", "text/csv; charset=UTF-8")
            self.set_header("Content-Disposition", 'attachment; filename="requests.csv"')
            self.finish(request_search.to_csv(found))
            return
        base = f"{PREFIX}/requests?" + urllib.parse.urlencode(query)
        await self.render_page("requests.html", nav="requests", typed=typed, found=found, message=message,
                               csv_url=base + ("&" if query else "") + "format=csv" + (f"&cursor={cursor}" if cursor else ""),
                               next_url=base + ("&" if query else "") + urllib.parse.urlencode(
                                   {"cursor": found["next_cursor"] or ""}) if found else "")


class AuditHandler(ConsoleHandler):
    """The money audit (every balance against its records) and the admin log as sentences in
    the reader's language, filtered by actor, account, action and Jalali days; CSV of the same."""

    FILTERS = ("actor", "account", "action", "from", "to")

    def filters(self) -> dict:
        return {k: self.get_query_argument(k, "").strip() for k in self.FILTERS}

    def search(self, client, f: dict) -> list[dict]:
        return admin_log.search(client, actor=f["actor"] or None, account=f["account"] or None,
                                action=f["action"] or None, start=f["from"] or None, end=f["to"] or None,
                                limit=AUDIT_LOG_SHOWN)

    async def get(self) -> None:
        f = self.filters()
        message, entries = None, []
        try:
            entries = await self.call(self.search, f)
        except ValueError as e:
            message = self.said(e)
            self.set_status(400)
        if self.get_query_argument("format", "") == "csv" and message is None:
            self.set_header("Content-Type", "text/csv; charset=UTF-8")
            self.set_header("Content-Disposition", 'attachment; filename="audit-log.csv"')
            self.finish(admin_log.to_csv(entries))
            return
        result = await self.call(audit.run)
        verbs = [(v, self.locale.translate(words).replace(" %(object)s", "").replace("%(object)s", "").strip())
                 for v, (_kind, words) in admin_log.VERBS.items()]
        query = urllib.parse.urlencode({k: v for k, v in f.items() if v})
        await self.render_page("audit.html", nav="audit", result=result, entries=entries, filters=f, verbs=verbs,
                               message=message, csv_url=f"{PREFIX}/audit?{query}&format=csv".replace("?&", "?"),
                               said=functools.partial(view.audit_sentence, self.fmt, self.locale.translate),
                               change=functools.partial(view.audit_change, self.fmt, self.locale.translate))


class WebhooksHandler(ConsoleHandler):
    async def get(self) -> None:
        failed = await self.call(webhooks.list_failed, FAILED_SHOWN)
        self.render("webhooks.html", nav="webhooks", failed=failed, on=self.ctx.settings.webhooks_on)


class WebhookWriteHandler(ConsoleHandler):
    SUPPORTED_METHODS = ("POST",)
    writes = True

    async def post(self, verb: str) -> None:
        try:
            text, detail = await self.call(self.resend if verb == "resend" else self.ping)
        except ValueError as e:
            self.flash(self.said(e), kind="error")
        else:
            await log_console_write(self, f"POST {PREFIX}/webhooks/{verb}", None, detail)
            self.flash(text)
        self.redirect(PREFIX + "/webhooks", status=303)

    def resend(self, client) -> tuple[str, dict]:
        event_id = self.get_body_argument("event_id", "").strip() or None
        every = self.get_body_argument("all", "") == "true"
        if (event_id is None) == (not every):
            raise webhooks.UnknownEvent("give one event, or resend all")
        sent = webhooks.resend(client, event_id)
        return (self.locale.translate("%(n)s event(s) back on the delivery stream.") % {"n": self.fmt.count(len(sent))},
                {"all": True} if every else {"event_id": event_id})

    def ping(self, _client) -> tuple[str, dict]:
        out = webhooks.send_test(self.ctx.settings)
        args = {"id": out["event_id"], "why": f"HTTP {out['status']}" if out["status"] is not None else out["error"]}
        if not out["ok"]:
            return self.locale.translate("The receiver did not accept the ping %(id)s (%(why)s).") % args, {}
        return self.locale.translate("Ping %(id)s delivered: %(why)s.") % args, {}


SYNC_FIELDS = ("source", "provider", "usd_toman", "markup", "include", "max_change")
SYNC_FLAGS = ("prune", "dry_run", "yes")


class PriceSyncHandler(ConsoleHandler):
    """POST: the models page's price sync form → the sync's outcome on the models page."""

    SUPPORTED_METHODS = ("POST",)
    writes = True

    async def post(self) -> None:
        typed = {k: self.get_body_argument(k, "").strip() for k in SYNC_FIELDS}
        flags = {k: self.get_body_argument(k, "") == "true" for k in SYNC_FLAGS}
        args = {k: v for k, v in typed.items() if v and k != "include"}
        include = [g for g in typed["include"].replace(",", " ").split() if g]
        status, outcome, message = 200, None, None
        try:
            outcome = await self.call(prices.sync, **args, include=include, **flags,
                                      provider_names=set(self.ctx.providers), remote=True)
        except catalog_store.ChangeTooLarge as e:
            status, outcome, message = 422, e.outcome.to_json(), str(e)
        except ValueError as e:
            status, message = refusal_status(e), self.said(e)
        if outcome is not None and status == 200 and not flags["dry_run"]:
            await log_console_write(self, f"POST {PREFIX}/models/sync", None,
                                    {**{k: v for k, v in args.items() if k != "source"},
                                     "source": prices.shown_source(typed["source"]), "include": include,
                                     **{k: True for k, v in flags.items() if v}})
        page = await self.call(data.models_page)
        self.set_status(status)
        await self.render_page("models.html", nav="models", cold={}, sync={
            "typed": {**typed, **flags}, "outcome": outcome, "message": message,
            "providers": sorted(self.ctx.providers)}, **page)


__all__ = ["RequestHandler", "RequestsHandler", "AuditHandler", "WebhooksHandler", "WebhookWriteHandler", "PriceSyncHandler"]
