"""Prices in toman: `/pricing` (public, no sign-in: the page a reseller links from its home page)
and `/dashboard/models` (the same list inside the dashboard). Both read the catalog this node
has in force (no Redis round trip), through services/pricing.py."""
from __future__ import annotations

from upgate.dashboard.base import PREFIX, DashboardHandler
from upgate.services import pricing


class PricingHandler(DashboardHandler):
    """The public price list. A signed-in visitor's session is not looked at: the page is the
    same for everyone."""

    public = True

    async def get(self) -> None:
        self.render("pricing.html", prices=pricing.price_list(self.ctx.catalog), public_page=True)


class ModelsHandler(DashboardHandler):
    nav = "models"

    async def get(self) -> None:
        self.render("pricing.html", prices=pricing.price_list(self.ctx.catalog), public_page=False)


def routes(d: dict) -> list:
    return [(r"/pricing/?", PricingHandler, d), (PREFIX + r"/models", ModelsHandler, d)]
