"""/dashboard/billing/receipts/{order_id}: the printable receipt of a paid top-up (upgate/payments/
receipts.py computes it). Another account's order, an unpaid one and one that does not exist
are the same 404."""
from __future__ import annotations

from upgate.dashboard.base import PREFIX, DashboardHandler, Refused
from upgate.payments import orders, receipts


class ReceiptHandler(DashboardHandler):
    nav = "billing"

    async def get(self, order_id: str) -> None:
        try:
            page = await self.call(receipts.receipt, self.ctx.settings, order_id, self.account_id)
        except orders.UnknownOrder:
            raise Refused(404, self.locale.translate("Not found.")) from None
        self.render("receipt_print.html", **page)


def routes(d: dict) -> list:
    return [(PREFIX + r"/billing/receipts/(ord_[0-9a-f]{1,40})", ReceiptHandler, d)]
