"""Prices in toman: `/pricing` (public, no sign-in: the page a reseller links from its home page)
and `/dashboard/models` (the same list inside the dashboard). Both read the catalog this node
has in force (no Redis round trip), through services/pricing.py.

The table is rendered once per catalog version and language on a worker thread, then kept:
a catalog of thousands of models would otherwise hold the event loop for every visitor of a
public page (the same reason the catalog itself is built off the loop, catalog/cache.py)."""
from __future__ import annotations

import asyncio
import weakref
from concurrent.futures import ThreadPoolExecutor

import tornado.template

from upgate import i18n
from upgate.dashboard.base import PREFIX, TEMPLATES, DashboardHandler
from upgate.services import pricing

_LOADER = tornado.template.Loader(TEMPLATES)
_BUILDER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="upgate-pricing")
_TABLES: "weakref.WeakKeyDictionary[object, dict]" = weakref.WeakKeyDictionary()  # catalog → {(version, lang): html}


def _render(catalog, lang: str) -> str:
    return _LOADER.load("pricing_table.html").generate(
        prices=pricing.price_list(catalog), fmt=i18n.Formatter(lang), _=i18n.locale(lang).translate,
        lang=lang).decode()


async def table(catalog, lang: str) -> str:
    """The price table's HTML for the catalog version in force, in `lang`."""
    key = (catalog.version, lang)
    kept = _TABLES.setdefault(catalog, {})
    if key not in kept:
        html = await asyncio.get_running_loop().run_in_executor(_BUILDER, _render, catalog, lang)
        if catalog.version != key[0]:  # swapped while rendering: serve it, keep nothing
            return html
        for old in [k for k in kept if k[0] != key[0]]:
            del kept[old]
        kept[key] = html
    return kept[key]


class PricingHandler(DashboardHandler):
    """The public price list. A signed-in visitor's session is not looked at: the page is the
    same for everyone."""

    public = True
    public_page = True

    async def get(self) -> None:
        self.render("pricing.html", table=await table(self.ctx.catalog, self.lang),
                    updated_at=self.ctx.catalog.prices_updated_at, public_page=self.public_page)


class ModelsHandler(PricingHandler):
    nav = "models"
    public = False
    public_page = False


def routes(d: dict) -> list:
    return [(r"/pricing/?", PricingHandler, d), (PREFIX + r"/models", ModelsHandler, d)]
