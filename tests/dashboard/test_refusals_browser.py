"""The refusals issue 36 added, as a customer reads them in Chromium (fa at 390 px, en at
1280 px) with the layout measure: "SMS is unavailable" on the sign-in form, the pending
top-ups bound on the top-up form, and a GET on a key's write route. Screenshots go to
tests/.screenshots/refusals-*.png."""
from __future__ import annotations

import time

import pytest

from tests.browser_kit import SHOTS, browser, layout_problems, need_browser  # noqa: F401 (browser: a fixture)
from tests.dashboard_kit import SmsLog
from tests.gateway import seed
from upgate.payments import bounds, orders
from upgate.store import connection as store, keyspace

sync_api = need_browser()
CASES = [("fa", 390, "+989121234567"), ("en", 1280, "+989351234567")]
SAID = {"fa": ("پیامک در دسترس نیست", "منتظر پرداخت", "فقط فرم"),
        "en": ("SMS is unavailable", "waiting for payment", "only takes a form")}


@pytest.mark.parametrize("lang,width,phone", CASES)
def test_the_new_refusals_read_well(browser, make_node, redis_url, lang, width, phone):
    SHOTS.mkdir(exist_ok=True)
    node = make_node(payments="fake")
    _key, acct, key_id = seed(redis_url, phone=phone, balance="0")
    client = store.connect_sync(redis_url)
    context = browser.new_context(viewport={"width": width, "height": 860})
    page = context.new_page()

    def look(name: str, said: str) -> None:
        assert said in page.inner_text("main"), page.inner_text("main")[:300]
        assert layout_problems(page, width) == [], name
        page.screenshot(path=str(SHOTS / f"refusals-{name}-{lang}-{width}.png"), full_page=True)

    client.hset(keyspace.sms_health(), "until_ms", int(time.time() * 1000) + 60_000)  # the provider is failing
    page.goto(node.url + f"/dashboard/login?lang={lang}")
    page.fill("#phone", phone)
    page.click("form button[type=submit]")
    look("sms-unavailable", SAID[lang][0])

    client.delete(keyspace.sms_health())
    with SmsLog() as sms:
        page.goto(node.url + f"/dashboard/login?lang={lang}")
        page.fill("#phone", phone)
        page.click("form button[type=submit]")
        page.fill("#code", sms.code_for(phone))
        page.click("form button[type=submit]")
    for _ in range(bounds.PENDING_PER_ACCOUNT):
        orders.create(client, acct, 50_000 * 10**6, "fake")
    page.goto(node.url + f"/dashboard/topup?lang={lang}")
    page.fill("#amount_toman", "50000")
    page.click("main form button[type=submit]")
    look("topup-pending", SAID[lang][1])

    page.goto(node.url + f"/dashboard/keys/{key_id}/update?lang={lang}")
    look("get-on-a-form", SAID[lang][2])
    context.close()
