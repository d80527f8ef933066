"""/dashboard/topup: how to add money. Until a payment gateway is configured (the payments
work replaces this handler's body with its form, callback and receipt), it says how to pay
the operator. This address, absolute, is the `topup_url` of every 402."""
from __future__ import annotations

from upgate.dashboard.base import PREFIX, DashboardHandler


class TopupHandler(DashboardHandler):
    nav = "topup"

    async def get(self) -> None:
        self.render("topup.html")


def routes(d: dict) -> list:
    return [(PREFIX + r"/topup", TopupHandler, d)]
