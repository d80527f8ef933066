"""The account page's support-desk forms that move no money: the phone change (and the notes,
the suspension's reason). Each calls the one service function the CLI and the API call, and
renders the account page again with the refusal when it refuses (pages.WriteHandler)."""
from __future__ import annotations

from upgate.console.pages import WriteHandler
from upgate.services import phone_change


class PhoneHandler(WriteHandler):
    """POST /admin/accounts/{id}/phone: the account's phone (canonical and unique). The service
    records the change in the admin log itself, with the old phone."""

    form = "profile"

    def act(self, client, account_id: str) -> str:
        done = phone_change.set_phone(client, account_id, self.arg("phone"), actor=self.who.name)
        _ = self.locale.translate
        if not done["changed"]:
            return _("The account already has this phone.")
        return _("Phone changed to %(phone)s.") % {"phone": done["after"]}

    async def log_write(self, account_id: str) -> None:
        """Recorded by phone_change.set_phone (with before and after): not twice."""
