"""Route health on the console, in a real headless Chromium at desktop and phone widths, in
English and Persian: the models page lists every route with its state, the overview names the
cold ones. Screenshots go to tests/.screenshots/ (routes-*)."""
from __future__ import annotations

import pytest

from tests.console_kit import admin_token
from tests.routes.route_kit import chat, configure, route_mocks, routed  # noqa: F401

pytest.importorskip("playwright.sync_api")
from tests.console.test_console_browser import DESKTOP, PHONE, Console, browser  # noqa: E402,F401

TEXT = {"en": {"routes": "Routes", "cold": "cold", "healthy": "healthy", "cold_models": "Cold models", "via": "via"},
        "fa": {"routes": "مسیرها", "cold": "سرد", "healthy": "سالم", "cold_models": "مدل‌های سرد", "via": "از راه"}}


@pytest.mark.parametrize("lang", ["en", "fa"])
@pytest.mark.parametrize("width", [DESKTOP, PHONE])
def test_models_page_and_overview_show_route_health(routed, browser, width, lang):  # noqa: F811
    t = TEXT[lang]
    node = routed.node(route_failures=1)
    configure(routed.mocks["two"], status=500)
    assert chat(node, routed.key, "mock/r-pair").status_code == 200  # two is cold now
    c = Console(browser, node, width)
    c.sign_in(admin_token(routed.redis_url))
    c.page.goto(f"/admin/models?lang={lang}")
    routes = c.page.locator("section", has=c.page.get_by_role("heading", name=t["routes"], exact=True))
    rows = routes.locator("tbody tr", has_text="mock/r-pair")
    assert rows.count() == 2
    assert t["cold"] in rows.filter(has_text="two").inner_text()
    assert t["healthy"] in rows.filter(has_text="one").inner_text()
    c.shoot(f"routes-models-{lang}")
    from tests.console.test_console_browser import SHOTS  # the card and a routed model's row, close up
    rows.filter(has_text="two").screenshot(path=str(SHOTS / f"routes-row-{lang}-{width}.png"))
    c.page.locator("tr", has_text="mock/r-order").first.screenshot(path=str(SHOTS / f"routes-price-row-{lang}-{width}.png"))
    c.page.goto("/admin/")
    cold = c.page.locator("section", has=c.page.get_by_role("heading", name=t["cold_models"]))
    text = cold.inner_text()
    assert "mock/r-pair" in text and t["via"] in text and "two / m" in text
    c.shoot(f"routes-overview-{lang}")
    cold.screenshot(path=str(SHOTS / f"routes-cold-{lang}-{width}.png"))
    assert not c.errors, c.errors
    c.context.close()
