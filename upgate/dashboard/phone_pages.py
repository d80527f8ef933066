"""/dashboard/phone: the customer changes their own phone. A code goes to the new number and
one to the old (services/phone_verify.py), both are typed in, then the one phone-change
primitive runs (services/phone_change.py: unique, recorded in the admin log as `dashboard`).
Suspended accounts see the page and change nothing."""
from __future__ import annotations

from upgate.dashboard.base import PREFIX, DashboardHandler
from upgate.services import phone_verify, signin
from upgate.services.account_rules import AccountError, PhoneInUse
from upgate.sms import SmsFailed


class PhonePage(DashboardHandler):
    nav = "account"
    writes = True

    def refusal(self, e: Exception) -> str:
        _ = self.locale.translate
        if isinstance(e, PhoneInUse):  # said only to whoever proved they hold the number
            return _("That number belongs to another account. Ask support if it should be yours.")
        return self.said(e)

    def show(self, step: str, *, new: str = "", message: str | None = None, status: int = 200) -> None:
        self.set_status(status)
        self.render("phone.html", section="phone", step=step, new=new, message=message,
                    typed=self.arg("phone") if message and step == "ask" else "",
                    done=self.get_query_argument("done", "") == "1")


class PhoneHandler(PhonePage):
    """GET: the form. POST (`phone`): a code to each number, then the codes' form."""

    async def get(self) -> None:
        self.show("ask")

    async def submit(self) -> None:
        _ = self.locale.translate
        current, ctx = self.account["phone"], self.ctx
        try:
            new, codes = await self.call(phone_verify.issue, ctx.signin.secret, self.account_id, current,
                                         self.arg("phone"), ctx.client_address(self.request))
        except signin.SignInError as e:
            return self.show("ask", message=self.refusal(e), status=429 if e.wait_s else 400)
        try:
            await ctx.signin.sender.send_code(new, codes["new"], _("Your upgate code to add this number: {code}").format(code=codes["new"]))
            await ctx.signin.sender.send_code(current, codes["old"], _("Your upgate code to change your number: {code}. If you did not ask for it, sign in and sign out everywhere.").format(code=codes["old"]))
        except SmsFailed:
            await self.call(phone_verify.withdraw, current, new)
            return self.show("ask", message=self.refusal(signin.NotSent()), status=503)
        self.show("codes", new=new)


class PhoneVerifyHandler(PhonePage):
    """POST (`phone`, `code_new`, `code_old`): both codes, then the change."""

    async def get(self) -> None:
        self.redirect(PREFIX + "/phone", status=303)

    async def submit(self) -> None:
        ctx = self.ctx
        try:
            new = await self.call(phone_verify.check, ctx.signin.secret, self.account_id, self.account["phone"],
                                  self.arg("phone"), self.arg("code_new"), self.arg("code_old"))
        except signin.SignInError as e:
            return self.show("codes", new=self.arg("phone"), message=self.refusal(e), status=400)
        try:
            await self.call(phone_verify.change, self.account_id, new)
        except AccountError as e:  # another account's number (proved held by this customer), or a race
            return self.show("ask", message=self.refusal(e), status=409)
        self.redirect(PREFIX + "/phone?done=1", status=303)


def routes(d: dict) -> list:
    return [(PREFIX + r"/phone", PhoneHandler, d), (PREFIX + r"/phone/verify", PhoneVerifyHandler, d)]
