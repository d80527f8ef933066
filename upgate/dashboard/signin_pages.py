"""Signing in and out: the phone form, the code form, sign-out (services/signin.py does the
work; these handlers only parse, call and render)."""
from __future__ import annotations

from upgate.dashboard.base import PREFIX, DashboardHandler, safe_next
from upgate.services import dash_sessions, signin


class SignInPage(DashboardHandler):
    public = True

    def address(self) -> str:
        return self.ctx.client_address(self.request)

    def refusal(self, e: signin.SignInError) -> str:
        """The refusal's sentence (seconds to wait, tries left) in the page's language."""
        return self.said(e)


class LoginHandler(SignInPage):
    async def get(self) -> None:
        self.render("login.html", next=safe_next(self.get_query_argument("next", None)), error=None, phone="")

    async def submit(self) -> None:
        target = safe_next(self.arg("next"))
        _ = self.locale.translate
        try:
            phone = await self.ctx.signin.ask(self.call, self.arg("phone"), self.address(),
                                              lambda code: _("Your upgate sign-in code: {code}").format(code=code))
        except signin.SignInError as e:
            self.set_status(503 if isinstance(e, signin.SmsUnavailable) else 429 if e.wait_s else 400)
            self.render("login.html", next=target, error=self.refusal(e), phone=self.arg("phone"))
            return
        self.render("code.html", next=target, phone=phone, error=None)


class VerifyHandler(SignInPage):
    async def get(self) -> None:
        self.redirect(PREFIX + "/login", status=303)

    async def submit(self) -> None:
        target = safe_next(self.arg("next"))
        try:
            account_id, phone = await self.ctx.signin.verify(self.call, self.arg("phone"), self.arg("code"))
        except signin.SignInError as e:
            self.set_status(400)
            self.render("code.html", next=target, phone=self.arg("phone"), error=self.refusal(e))
            return
        self.start_session(await self.call(dash_sessions.open_session, account_id, phone, self.address(),
                                           self.request.headers.get("User-Agent", "")))
        self.redirect(target, status=303)


class LogoutHandler(DashboardHandler):
    public = True  # signing out works with an already dead session too

    async def submit(self) -> None:
        await self.call(dash_sessions.close, self.session_id())
        self.end_session()
        self.redirect(PREFIX + "/login", status=303)
