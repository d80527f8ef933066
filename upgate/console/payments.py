"""The console's payments page (/admin/payments: orders, filter by status, verify one now) and
its verify form. The rules are upgate/payments/'s; this parses and renders."""
from __future__ import annotations

import urllib.parse

import tornado.web

from upgate.console.base import PREFIX, ConsoleHandler
from upgate.i18n import N_
from upgate.payments import orders, service
from upgate.services import admin_log

STATUSES = orders.STATUSES
OUTCOMES = {"paid": N_("paid and credited"), "already_paid": N_("already paid"), "not_paid": N_("not paid"),
            "amount_mismatch": N_("another amount was paid: not credited"),
            "unavailable": N_("the gateway did not answer"), "refused": N_("the gateway refused the call"),
            "off": N_("that gateway is not set up here"),
            "conflict": N_("its ref was used for another transaction: not credited")}


def _page(client, status, cursor):
    return orders.list_orders(client, status=status, cursor=cursor, limit=50)


class PaymentsHandler(ConsoleHandler):
    async def get(self) -> None:
        status = self.get_query_argument("status", None) or None
        if status not in (None, *STATUSES):
            status = None
        try:
            page = await self.call(_page, status, self.get_query_argument("cursor", None) or None)
        except orders.InvalidCursor:
            raise tornado.web.HTTPError(400, "That page address is malformed.") from None
        self.render("payments.html", nav="payments", status=status, statuses=STATUSES, **page,
                    quote=urllib.parse.quote)


class PaymentVerifyHandler(ConsoleHandler):
    """POST /admin/payments/{id}/verify: ask the gateway now, credit when paid (exactly once)."""

    SUPPORTED_METHODS = ("POST",)
    writes = True

    async def post(self, order_id: str) -> None:
        try:
            result = await self.call(service.verify_id, self.ctx.settings, order_id)
        except orders.UnknownOrder as e:
            raise tornado.web.HTTPError(404, str(e)) from None
        o = result["order"]
        self.ctx.metrics.count_payment(o["gateway"], result["outcome"])
        await self.call(admin_log.record, self.who.name, "POST /admin/payments/{id}/verify", order_id,
                        {"outcome": result["outcome"]})
        _ = self.locale.translate
        self.flash(_("Order %(id)s: %(outcome)s (now %(status)s).") % {
            "id": o["id"], "outcome": _(OUTCOMES.get(result["outcome"], result["outcome"])), "status": _(o["status"])},
                   "ok" if o["status"] == "paid" else "warn")
        back = self.get_body_argument("next", "")
        self.redirect(back if back.startswith(PREFIX + "/") and "//" not in back[1:] else PREFIX + "/payments",
                      status=303)
