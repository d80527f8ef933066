"""The dashboard's pages: one small handler per page and per form. Each takes the account id
from the session (never from the address or the form), calls the service layer in the
executor, and renders. A refusal from the service layer is shown with the form as typed
(nothing was written). The top-up page is upgate/dashboard/topup.py.
"""
from __future__ import annotations

import tornado.web

from upgate.dashboard import (account_pages, data, phone_pages, pricing, receipts, request_pages, signin_pages,
                              sparkline, topup)
from upgate.dashboard.page import Page
from upgate.dashboard.base import PREFIX, STATIC, Refused, StaticHandler
from upgate.i18n import dates, numbers
from upgate.services import csv_safe, keys, statements

_ID = r"([^/]+)"


def routes(ctx) -> list:
    d = {"ctx": ctx}
    return [
        (PREFIX + r"/?", HomeHandler, d),  # /dashboard too: a typed address lands here
        (PREFIX + r"/login", signin_pages.LoginHandler, d),
        (PREFIX + r"/login/verify", signin_pages.VerifyHandler, d),
        (PREFIX + r"/logout", signin_pages.LogoutHandler, d),
        (PREFIX + r"/keys", KeysHandler, d),
        (PREFIX + r"/keys/" + _ID + r"/update", KeyUpdateHandler, d),
        (PREFIX + r"/keys/" + _ID + r"/revoke", KeyRevokeHandler, d),
        (PREFIX + r"/usage", UsageHandler, d),
        (PREFIX + r"/requests", request_pages.RequestsHandler, d),
        (PREFIX + r"/billing", BillingHandler, d),
        (PREFIX + r"/billing/statement\.csv", StatementCsvHandler, d),
        *topup.routes(d),
        *pricing.routes(d),
        *receipts.routes(d),
        *account_pages.routes(d),
        *phone_pages.routes(d),
        (PREFIX + r"/static/(.*)", StaticHandler, {"path": STATIC}),
    ]


class HomeHandler(Page):
    nav = "home"

    async def get(self) -> None:
        page = await self.call(data.home, self.account_id)
        _ = self.locale.translate
        f = self.get_template_namespace()["fmt"]
        self.render("home.html", **page,
                    cost_chart=self.chart(page["days"], "cost_toman", _("Cost per day (toman)"), f.toman),
                    count_chart=self.chart(page["days"], "requests", _("Requests per day"), f.count))


# ---- keys ----------------------------------------------------------------------------------------

class KeysHandler(Page):
    """GET: the keys. POST: create one (the full key is in this response and nowhere else)."""

    nav = "keys"
    writes = True

    async def get(self) -> None:
        await self.show()

    async def show(self, *, message: str | None = None, form: str | None = None, target: str | None = None,
                   new_key: dict | None = None, status: int = 200) -> None:
        listed, figures = await self.call(data.key_list, self.account_id)
        typed = {k: self.get_body_argument(k, "") for k in self.request.body_arguments} if form else {}
        self.set_status(status)
        self.render("keys.html", keys=listed, message=message, form=form, target=target, typed=typed,
                    new_key=new_key, base_url=self.base_url(), model=self.example_model(new_key, listed),
                    figures=figures, spark=self.spark)

    def spark(self, fig: dict) -> str:
        """The key's 30-day sparkline, labelled with what it spent in those days."""
        f = self.get_template_namespace()["fmt"]
        label = self.locale.translate("Cost in the last 30 days: {amount} toman").format(
            amount=f.micro(sum(fig["daily_cost_micro"])))
        return sparkline.svg(fig["daily_cost_micro"], label)

    def example_model(self, new_key: dict | None, listed: list[dict]) -> str:
        """A model the new key may call, for its ready curl and Python lines."""
        mine = next((k for k in listed if new_key and k["key_id"] == new_key["key_id"]), None)
        if mine and mine["allowed_models"]:
            return mine["allowed_models"][0]
        visible = sorted(m.id for m in self.ctx.catalog.visible())
        return next((m for m in visible if not m.endswith(":free")), visible[0] if visible else "MODEL")

    def refusal(self, e: ValueError) -> str:
        """The field at fault in the page's language, then the refusal's sentence (the one
        catalogue, upgate/i18n/refusals.py)."""
        _ = self.locale.translate
        label = {"name": _("Name"), "rate_limit_rpm": _("Requests per minute"),
                 "monthly_limit_toman": _("Monthly limit"), "allowed_models": _("Allowed models"),
                 "expires_at": _("Expires")}.get(getattr(e, "field", None))
        lead = _("{field} was not accepted.").format(field=label) if label else _("Not saved:")
        return lead + "\n" + self.said(e)

    async def form(self, *, clearing: bool) -> dict:
        """The key form's settings; a customer names only models the catalog offers (an alias
        becomes its model's id)."""
        fields = {f: self.arg(f) for f in keys.FORM_FIELDS}
        return await self.call(keys.customer_form_settings, fields, clearing=clearing)

    def base_url(self) -> str:
        """The /v1 address the customer's code should call: UPGATE_PUBLIC_URL, else this host."""
        public = self.ctx.settings.public_url
        if public:
            return public + "/v1"
        return f"{'https' if self.is_https() else 'http'}://{self.request.host}/v1"

    async def submit(self) -> None:
        try:
            settings = await self.form(clearing=False)
            full, key_id, prefix = await self.call(keys.create_key, self.ctx.settings.key_pepper,
                                                   self.account_id, **settings)
        except ValueError as e:
            await self.show(message=self.refusal(e), form="create", status=400)
            return
        await self.show(new_key={"key": full, "key_id": key_id, "prefix": prefix}, status=201)


class KeyFormHandler(KeysHandler):
    """A form's target only: its page is /dashboard/keys, so a GET here is 405, not the list."""

    async def get(self, *args) -> None:
        raise Refused(405, self.locale.translate("This address only takes a form. Open the page it is on."))


class KeyUpdateHandler(KeyFormHandler):
    async def submit(self, key_id: str) -> None:
        try:
            settings = await self.form(clearing=True)
            await self.call(keys.update_key, key_id, account_id=self.account_id, **settings)
        except keys.UnknownKey:  # another account's key: the same 404 as a missing one
            raise tornado.web.HTTPError(404) from None
        except ValueError as e:
            await self.show(message=self.refusal(e), form="update", target=key_id, status=400)
            return
        self.redirect(PREFIX + "/keys?done=updated", status=303)


class KeyRevokeHandler(KeyFormHandler):
    """Revoking cannot be undone: the first POST shows what would stop working and asks (a page,
    no script); only the confirmed form (`confirmed=1`) revokes."""

    async def submit(self, key_id: str) -> None:
        if self.arg("confirmed") != "1":
            listed, _figures = await self.call(data.key_list, self.account_id)
            mine = next((k for k in listed if k["key_id"] == key_id and k["state"] != "revoked"), None)
            if mine is None:  # another account's key, or none: the same 404
                raise tornado.web.HTTPError(404)
            self.render("confirm_revoke.html", key=mine)
            return
        try:
            await self.call(keys.revoke_key, key_id, account_id=self.account_id)
        except keys.UnknownKey:
            raise tornado.web.HTTPError(404) from None
        self.redirect(PREFIX + "/keys?done=revoked", status=303)


# ---- usage, requests, billing -------------------------------------------------------------------

class UsageHandler(Page):
    nav = "usage"

    async def get(self) -> None:
        if self.get_query_argument("format", "") == "csv":
            return await request_pages.usage_csv(self)
        page = await self.call(data.usage_page, self.account_id, self.month())
        _ = self.locale.translate
        f = self.get_template_namespace()["fmt"]
        self.render("usage.html", **page, months=data.months_back(),
                    cost_chart=self.chart(page["days"], "cost_toman", _("Cost per day (toman)"), f.toman))


class BillingHandler(Page):
    nav = "billing"

    def get_template_namespace(self) -> dict:
        ns = super().get_template_namespace()
        ns.update(kinds=self.kind_words(), note=self.note)
        return ns

    async def get(self) -> None:
        month = self.month()
        try:
            page = await self.call(data.billing_page, self.account_id, month)
        except statements.InvalidMonth:  # before the account existed
            page = await self.call(data.billing_page, self.account_id, data.check_month(None))
        self.render("billing.html", **page, months=data.months_back())


class StatementCsvHandler(Page):
    """The month's statement as a file in the reader's words: the same rows as every face's
    (statements.rows), headed and told in the page's language, days and times Jalali (Tehran),
    amounts in toman as the pages round them, with ASCII digits and no separators so that a
    spreadsheet adds them up; a BOM so that Excel reads the Persian."""

    async def get(self) -> None:
        month = self.month()
        try:
            rows, refs = await self.call(data.statement_file, self.account_id, month)
        except statements.InvalidMonth:
            raise Refused(400, self.locale.translate("That month is not one the dashboard can show.")) from None
        self.set_header("Content-Type", "text/csv; charset=UTF-8")
        self.set_header("Content-Disposition", f'attachment; filename="statement-{month}.csv"')
        self.finish("\ufeff" + self.render_csv(rows, refs))

    def render_csv(self, rows: list[dict], refs: dict[str, str]) -> str:
        _ = self.locale.translate
        kinds = {"opening_balance": _("Opening balance"), "closing_balance": _("Closing balance"),
                 "charges": _("Requests of the day"), **self.kind_words()}
        fields = ("day", "time", "kind", "requests", "note", "amount_toman")
        out = []
        for r in rows:
            when = dates.jalali_text(r["time"]) if r.get("time") else ""
            out.append({
                "day": (r.get("day") or "").replace("-", "/"), "time": when[11:],
                "kind": kinds.get(r["kind"], r["kind"]), "requests": r.get("requests", ""),
                "note": self.note(r, refs), "amount_toman": numbers.toman(r["amount_toman"]).replace(",", "")})
        return csv_safe.write(fields, out, headers=[_("Day"), _("Time"), _("Description"), _("Requests"), _("Note"),
                                                    _("Amount (toman)")])
