"""The account page's support-desk forms that move no money: the phone change (and the notes,
the suspension's reason). Each calls the one service function the CLI and the API call, and
renders the account page again with the refusal when it refuses (pages.WriteHandler)."""
from __future__ import annotations

import tornado.web

from upgate.console.base import ConsoleHandler
from upgate.console.pages import WriteHandler
from upgate.services import account_list, notes, phone_change


class PhoneHandler(WriteHandler):
    """POST /admin/accounts/{id}/phone: the account's phone (canonical and unique). The service
    records the change in the admin log itself, with the old phone (admin_log.SELF_AUDITED)."""

    form = "profile"

    def act(self, client, account_id: str) -> str:
        done = phone_change.set_phone(client, account_id, self.arg("phone"), actor=self.who.name)
        _ = self.locale.translate
        if not done["changed"]:
            return _("The account already has this phone.")
        return _("Phone changed to %(phone)s.") % {"phone": done["after"]}


class NoteHandler(WriteHandler):
    """POST /admin/accounts/{id}/notes: a note on the account (who and when kept). The service
    records the admin log's entry (admin_log.SELF_AUDITED)."""

    form = "profile"

    def act(self, client, account_id: str) -> str:
        notes.add(client, account_id, self.get_body_argument("text", ""), actor=self.who.name)
        return self.locale.translate("Note added.")


class AccountsCsvHandler(ConsoleHandler):
    """GET /admin/accounts.csv?q=&sort=: the accounts list as CSV, with the list's current
    search and order (every page, at most account_list.SCAN_MAX accounts)."""

    async def get(self) -> None:
        q, sort = self.get_query_argument("q", "").strip(), self.get_query_argument("sort", "newest")
        try:
            text = await self.call(account_list.export_csv, self.ctx.settings.free_quota_default, q=q, sort=sort)
        except ValueError as e:
            raise tornado.web.HTTPError(400, str(e)) from None
        self.set_header("Content-Type", "text/csv; charset=UTF-8")
        self.set_header("Content-Disposition", 'attachment; filename="accounts.csv"')
        self.finish(text)
