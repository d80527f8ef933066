"""/dashboard/topup: the top-up form, the gateway's return (callback), the receipt, and the
built-in `fake` gateway's bank page. This address, absolute, is the `topup_url` of every 402.

Every rule is upgate/payments/'s; these handlers parse, call it on the service pool, render.
The callback proves nothing: it hands the gateway's query to `service.callback`, which verifies
the order with the gateway (and credits it once), then redirects to the order's receipt page
(a reload of the receipt asks nothing of anyone). Another account's order, an unknown or a
foreign authority: the same 404.
"""
from __future__ import annotations

import logging

from upgate.dashboard.base import PREFIX, DashboardHandler, Refused
from upgate.payments import bounds, errors, gateways, orders, service

log = logging.getLogger("upgate")

RECENT = 10  # orders listed under the form


def _recent(client, account_id: str) -> list[dict]:
    return orders.list_orders(client, account_id=account_id, limit=RECENT)["data"]


def _fake(client, settings):
    if settings.payments != "fake":
        return None
    return gateways.build(settings, client)


def _fake_payment(client, settings, authority: str):
    bank = _fake(client, settings)
    return bank.payment(authority) if bank else None


def _fake_decide(client, settings, authority: str, pay: bool):
    bank = _fake(client, settings)
    return bank.decide(authority, pay) if bank else None


class TopupHandler(DashboardHandler):
    """GET: the form and this account's recent orders. POST: a new order, then the bank page."""

    nav = "topup"
    writes = True

    async def get(self) -> None:
        await self.show()

    async def show(self, *, message: str | None = None, status: int = 200) -> None:
        s = self.ctx.settings
        self.set_status(status)
        self.render("topup.html", payments_on=s.payments != "off", message=message,
                    min_toman=s.topup_min_toman, max_toman=s.topup_max_toman,
                    typed=self.get_body_argument("amount_toman", "") if message else "",
                    recent=await self.call(_recent, self.account_id))

    async def submit(self) -> None:
        _ = self.locale.translate
        s = self.ctx.settings
        try:
            order, url = await self.call(service.start, s, self.account_id, self.arg("amount_toman"),
                                         address=self.ctx.client_address(self.request))
        except service.InvalidTopup as e:
            return await self.show(status=400, message=self.said(e))
        except bounds.TooManyPayments as e:  # (nothing was asked of the gateway)
            self.ctx.metrics.count_payment(s.payments, "throttled")
            return await self.show(status=429, message=self.said(e))
        except errors.PaymentsOff:
            raise Refused(404, _("Online payment is not available. Please contact support to top up."))
        except errors.PaymentError as e:
            self.ctx.metrics.count_payment(s.payments, e.outcome)
            # one literal on one line: the Persian catalog check reads each message whole
            raise Refused(503, _("The payment gateway did not answer. Nothing was charged; please try again in a few minutes."))
        self.ctx.metrics.count_payment(order["gateway"], "started")
        self.redirect(url, status=303)


class CallbackHandler(DashboardHandler):
    """The gateway sends the browser back here (Zarinpal: ?Authority=…&Status=OK|NOK; Zibal:
    ?trackId=…&success=…). Without a session the base sends it to sign in and back here."""

    nav = "topup"

    async def get(self) -> None:
        args = {k: self.get_query_argument(k) for k in self.request.query_arguments}
        try:
            done = await self.call(service.callback, self.ctx.settings, args, self.account_id,
                                   self.ctx.client_address(self.request))
        except bounds.TooManyPayments as e:
            self.ctx.metrics.count_payment(self.ctx.settings.payments, "throttled")
            raise Refused(429, self.said(e)) from None
        if done is None:
            raise Refused(404, self.locale.translate("We found no payment of yours with this reference."))
        self.ctx.metrics.count_payment(done.order["gateway"], done.outcome)
        self.redirect(f"{PREFIX}/topup/{done.order['id']}", status=303)


class OrderHandler(DashboardHandler):
    """One order of this account: the receipt when paid, else what happened and what to do."""

    nav = "topup"

    async def get(self, order_id: str) -> None:
        try:
            order = await self.call(orders.get, order_id, self.account_id)
        except orders.UnknownOrder:
            raise tornado_404(self) from None
        self.render("receipt.html", order=orders.public(order))


def tornado_404(handler) -> Refused:
    return Refused(404, handler.locale.translate("Not found."))


class FakeBankHandler(DashboardHandler):
    """The `fake` gateway's bank page (UPGATE_PAYMENTS=fake only): Pay or Cancel."""

    public = True

    async def get(self, authority: str) -> None:
        payment = await self.call(_fake_payment, self.ctx.settings, authority)
        if payment is None:
            raise tornado_404(self)
        self.render("fake_bank.html", authority=authority, payment=payment)

    async def submit(self, authority: str) -> None:
        back = await self.call(_fake_decide, self.ctx.settings, authority, self.arg("action") == "pay")
        if back is None:
            raise tornado_404(self)
        self.redirect(back, status=303)


def routes(d: dict) -> list:
    return [
        (PREFIX + r"/topup", TopupHandler, d),
        (PREFIX + r"/topup/callback", CallbackHandler, d),
        (PREFIX + r"/topup/fake-bank/([A-Za-z0-9_-]{1,64})", FakeBankHandler, d),
        (PREFIX + r"/topup/(ord_[0-9a-f]{1,40})", OrderHandler, d),
    ]
