"""The console's parity pages in headless Chromium against a real node (OPERATORS.md, "Added for
that parity"): the search box opens a request's record from its X-Svc-Request-Id and an account
from a key's prefix; an account is created; the settings form sets the low-balance alert; the
audit and the admin log; a failed webhook delivery sent again; a price sync planned from an
upstream list over HTTP. Screenshots at desktop and phone width go to tests/.screenshots/."""
from __future__ import annotations

import http.server
import re
import threading

import orjson
import pytest

from tests.console.test_console_browser import DESKTOP, PHONE, browser, chat, console  # noqa: F401
from tests.console_kit import admin_token
from tests.gateway import seed
from upgate.store import connection as store, keyspace

SOURCE = orjson.dumps({"data": [{"id": "mock-chat-1", "name": "Mock chat",
                                  "pricing": {"prompt": "0.0000015", "completion": "0.000002"}}]})


@pytest.fixture
def source_url():
    """An upstream model list in OpenRouter's shape, served on loopback."""
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(SOURCE)))
            self.end_headers()
            self.wfile.write(SOURCE)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/api/v1/models"
    server.shutdown()


def failed_delivery(redis_url: str, account_id: str) -> str:
    event = {"id": "evt_0a1b2c3d4e5f0197b3c2d1e0a1", "type": "wallet.topup", "created": 1795600000,
             "data": {"account_id": account_id, "balance_toman": "1000.000000"}}
    store.connect_sync(redis_url).lpush(keyspace.WEBHOOK_FAILED, orjson.dumps({
        "event": event, "reason": "expired", "attempts": 14, "first_attempt_at": "2026-11-24T10:00:00Z",
        "last_attempt_at": "2026-11-25T10:00:00Z", "last_status": 503, "last_error": None}))
    return event["id"]


@pytest.mark.parametrize("width", [DESKTOP, PHONE])
def test_parity_pages(console, node, redis_url, source_url, width):  # noqa: F811
    key, account_id, _kid = seed(redis_url, phone="09120001122", name="billing-bot")
    answer = chat(node, key)
    request_id = answer.headers["X-Svc-Request-Id"]
    event_id = failed_delivery(redis_url, account_id)
    c = console(width)
    c.sign_in(admin_token(redis_url))
    page = c.page

    # the search box: a request id opens its record; a key's prefix opens its account
    page.goto("/admin/accounts")
    page.get_by_label("Phone (any part), account id, key prefix or request id").fill(request_id)
    page.get_by_role("button", name="Find").click()
    page.wait_for_url(f"**/admin/requests/{request_id}")
    assert request_id in page.get_by_role("heading", level=1).inner_text()
    assert "mock/chat-1" in page.locator("main").inner_text()
    c.shoot("request")
    page.goto("/admin/accounts")
    page.get_by_label("Phone (any part), account id, key prefix or request id").fill(key[:10])
    page.get_by_role("button", name="Find").click()
    page.wait_for_url(f"**/admin/accounts/{account_id}?op=*")

    # the settings form: the low-balance alert (the API's low_balance_toman)
    page.get_by_label("Low-balance alert below (toman, blank = off)").fill("20000")
    page.get_by_role("button", name="Save settings").click()
    page.wait_for_url("**#settings")
    assert "low-balance alert below 20,000" in page.locator(".flash").first.inner_text()
    assert page.locator("#wallet dt:text-is('Low-balance alert below') + dd").inner_text() == "20,000"
    c.shoot("account-settings")

    # create an account: phone only
    page.goto("/admin/accounts")
    c.shoot("accounts-create")
    page.get_by_label("Phone", exact=True).fill("09125550000")
    page.get_by_role("button", name="Create account").click()
    page.wait_for_url("**#topup")
    assert "created" in page.locator(".flash").first.inner_text()

    # the audit and the admin log (the settings change above, under the API's field names)
    page.get_by_role("link", name="Audit").click()
    assert "accounts add up" in page.locator("#balances").inner_text()
    log = page.locator("#log").inner_text()
    assert "changed the settings of account" in log and "/admin" not in log  # a verb, never a route
    assert re.search(r"low-balance alert: — → 20,000", log), log
    c.shoot("audit")

    # a failed webhook delivery, sent again
    page.get_by_role("link", name="Webhooks").click()
    assert event_id in page.locator("#failed").inner_text()
    c.shoot("webhooks")
    page.get_by_role("button", name="Resend", exact=True).click()
    page.wait_for_url("**/admin/webhooks")
    assert "1 event(s) back on the delivery stream" in page.locator(".flash").first.inner_text()
    assert "No failed deliveries" in page.locator("#failed").inner_text()

    # a price sync, planned (dry run) from an upstream list over HTTP
    page.get_by_role("link", name="Models").click()
    page.get_by_label("Source URL").fill(source_url)
    page.get_by_label("Provider").fill("mock")
    page.get_by_label("Toman per US dollar").fill("100000")
    page.get_by_role("button", name="Sync prices").click()
    result = page.locator("#price-sync").inner_text()
    assert "dry run: nothing written" in result and "mock/chat-1" in result
    c.shoot("models-sync")

    # the same pages in Persian (right to left): nothing pushes a phone's page sideways
    page.goto(f"/admin/requests/{request_id}?lang=fa")
    assert page.locator("html").get_attribute("dir") == "rtl" and "سابقه" in page.locator("main").inner_text()
    c.shoot("request-fa")
    for path, name in ((f"/admin/accounts/{account_id}", "account-settings-fa"), ("/admin/accounts", "accounts-create-fa"),
                       ("/admin/audit", "audit-fa"), ("/admin/webhooks", "webhooks-fa"), ("/admin/models", "models-sync-fa")):
        page.goto(path)
        c.shoot(name)
    assert "همگام‌سازی قیمت‌ها" in page.locator("main").inner_text()
