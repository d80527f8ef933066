"""The console's pages for what is not one account's: a request's record (the id a client quotes
from X-Svc-Request-Id), the audit with the admin log, failed webhook deliveries (resend, test),
and the price sync form. Each calls the service function the management API and the CLI call;
a refusal shows its one line from the shared vocabulary (upgate/services/refusals.py)."""
from __future__ import annotations

import tornado.web

from upgate.catalog import store as catalog_store
from upgate.console import data
from upgate.console.base import PREFIX, ConsoleHandler
from upgate.console.pages import log_console_write, refusal_status
from upgate.services import admin_log, audit, prices, records
from upgate.webhooks import service as webhooks

AUDIT_LOG_SHOWN = 100
FAILED_SHOWN = 100


class RequestHandler(ConsoleHandler):
    async def get(self, request_id: str) -> None:
        try:
            record = await self.call(records.find, request_id)
        except records.UnknownRequest as e:
            raise tornado.web.HTTPError(404, str(e)) from None
        await self.render_page("request.html", nav="accounts", record=record)


class AuditHandler(ConsoleHandler):
    async def get(self) -> None:
        result = await self.call(audit.run)
        entries = await self.call(admin_log.read, AUDIT_LOG_SHOWN)
        await self.render_page("audit.html", nav="audit", result=result, entries=entries)


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


__all__ = ["RequestHandler", "AuditHandler", "WebhooksHandler", "WebhookWriteHandler", "PriceSyncHandler"]
