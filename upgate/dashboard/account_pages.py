"""The account's own settings: its signed-in devices and "sign out everywhere"
(/dashboard/sessions), its low-balance alert (/dashboard/alerts). The rules are the service
layer's (dash_sessions, accounts); these handlers parse, call and render."""
from __future__ import annotations

from upgate.dashboard.base import PREFIX, DashboardHandler
from upgate.services import accounts, dash_sessions


class SessionsHandler(DashboardHandler):
    nav = "account"

    async def get(self) -> None:
        listed = await self.call(dash_sessions.list_sessions, self.account_id, self.session_id())
        self.render("sessions.html", sessions=listed, section="sessions")


class SignOutEverywhereHandler(DashboardHandler):
    """POST /dashboard/sessions/revoke-all: every session of the account ends, this one too, on
    every node. Allowed to a suspended account: it changes nothing but its own sign-ins."""

    async def submit(self) -> None:
        await self.call(dash_sessions.close_all, self.account_id)
        self.end_session()
        self.redirect(PREFIX + "/login?signed_out=all", status=303)


class AlertsHandler(DashboardHandler):
    """The low-balance threshold (`low_balance_toman`, the management API's field): blank turns
    the alert off. The SMS goes out once per crossing (upgate/alerts/)."""

    nav = "account"
    writes = True

    async def get(self) -> None:
        await self.show()

    async def show(self, *, message: str | None = None, status: int = 200) -> None:
        self.set_status(status)
        self.render("alerts.html", section="alerts", message=message,
                    typed=self.arg("low_balance_toman") if message else None,
                    sms_on=self.ctx.alerts is not None and self.ctx.alerts.enabled,
                    saved=self.get_query_argument("saved", "") == "1")

    async def submit(self) -> None:
        try:  # Persian, Arabic-Indic or Latin digits, with or without separators (i18n/numbers.py)
            low = accounts.parse_low_balance(self.arg("low_balance_toman"))
            await self.call(accounts.update, self.account_id, low_balance_micro=low)
        except accounts.AccountError as e:
            return await self.show(status=400, message=self.said(e))
        self.redirect(PREFIX + "/alerts?saved=1", status=303)


def routes(d: dict) -> list:
    return [(PREFIX + r"/sessions", SessionsHandler, d),
            (PREFIX + r"/sessions/revoke-all", SignOutEverywhereHandler, d),
            (PREFIX + r"/alerts", AlertsHandler, d)]
