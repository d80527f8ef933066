"""Route health on the console, in a real headless Chromium at desktop and phone widths: the
models page lists every route with its state, the overview names the cold ones. Screenshots
go to tests/.screenshots/ (routes-*)."""
from __future__ import annotations

import pytest

from tests.console_kit import admin_token
from tests.routes.route_kit import chat, configure, route_mocks, routed  # noqa: F401

pytest.importorskip("playwright.sync_api")
from tests.console.test_console_browser import DESKTOP, PHONE, Console, browser  # noqa: E402,F401


@pytest.mark.parametrize("width", [DESKTOP, PHONE])
def test_models_page_and_overview_show_route_health(routed, browser, width):  # noqa: F811
    node = routed.node(route_failures=1)
    configure(routed.mocks["two"], status=500)
    assert chat(node, routed.key, "mock/r-pair").status_code == 200  # two is cold now
    c = Console(browser, node, width)
    c.sign_in(admin_token(routed.redis_url))
    c.page.goto("/admin/models")
    routes = c.page.locator("section", has=c.page.get_by_role("heading", name="Routes"))
    row = routes.locator("tr", has_text="mock/r-pair").filter(has_text="two")
    assert "cold" in row.inner_text() and "1" in row.inner_text()
    assert "healthy" in routes.locator("tr", has_text="mock/r-pair").filter(has_text="one").inner_text()
    c.shoot("routes-models")
    c.page.goto("/admin/")
    cold = c.page.locator("section", has=c.page.get_by_role("heading", name="Cold models"))
    assert "mock/r-pair via two · m" in cold.inner_text()
    assert "mock/r-pair —" not in cold.inner_text()  # the model itself is warm: `one` serves it
    c.shoot("routes-overview")
    assert not c.errors, c.errors
    c.context.close()
