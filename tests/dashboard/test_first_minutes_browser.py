"""The first five minutes' pages (issue 39) in a real headless Chromium (Debian's), in Persian and
English at phone and desktop widths, against a real gateway node with the mock provider and the
fake bank: the public price list, the models page, keys with their sparklines, the requests'
filters typed in Persian digits, the usage CSV links, the low-balance alert, signed-in devices,
a top-up's printable receipt with VAT, and "sign out everywhere". Every page passes the layout
measure (tests/browser_kit.py: no sideways scroll, no cut text, 40 px targets) and logs no
console error; screenshots go to tests/.screenshots/first-*."""
from __future__ import annotations

import re

import pytest

from tests.browser_kit import SHOTS, browser, layout_problems, need_browser  # noqa: F401 (browser: a fixture)
from tests.dashboard_kit import SmsLog
from tests.gateway import seed
from upgate.billing import jalali
from upgate.services import accounts
from upgate.store import connection as store

sync_api = need_browser()
openai = pytest.importorskip("openai")
FA = str.maketrans("0123456789", "۰۱۲۳۴۵۶۷۸۹")

class Visitor:
    def __init__(self, browser, node, width: int, lang: str):
        self.context = browser.new_context(viewport={"width": width, "height": 900}, base_url=node.url,
                                           accept_downloads=True)
        self.page = self.context.new_page()
        self.width, self.lang = width, lang
        self.errors: list[str] = []
        self.page.on("pageerror", lambda e: self.errors.append(f"{self.page.url}: {e}"))
        self.page.on("console", lambda m: m.type == "error" and not m.text.startswith("Failed to load resource")
                     and self.errors.append(f"{self.page.url}: {m.text}"))

    def shoot(self, name: str) -> None:
        SHOTS.mkdir(exist_ok=True)
        self.page.screenshot(path=str(SHOTS / f"first-{name}-{self.lang}-{self.width}.png"), full_page=True)
        assert layout_problems(self.page, self.width) == [], name
        assert self.page.locator("html").get_attribute("lang") == self.lang, name

    def close(self) -> None:
        self.context.close()
        assert not self.errors, self.errors

@pytest.mark.parametrize("width", [390, 1280])
@pytest.mark.parametrize("lang", ["fa", "en"])
def test_first_five_minutes(browser, make_node, redis_url, mock, lang, width):
    node = make_node(payments="fake", business_name="شرکت هوش نمونه",
                     business_address="تهران، خیابان ولیعصر، پلاک ۱۲", vat_percent="10", tax_id="14001234567")
    phone = {("fa", 390): "09121110390", ("fa", 1280): "09121111280",
             ("en", 390): "09122220390", ("en", 1280): "09122221280"}[lang, width]
    canonical = "+98" + phone[1:]
    key, acct, kid = seed(redis_url, phone=phone, balance="250000", name="ربات پشتیبانی" if lang == "fa" else "support bot")
    client = openai.OpenAI(base_url=node.base, api_key=key, max_retries=0)
    for model in ("mock/chat-1", "mock/chat-1", "mock/chat-big"):
        client.chat.completions.create(model=model, messages=[{"role": "user", "content": "سلام"}], max_tokens=6)
    v = Visitor(browser, node, width, lang)
    page = v.page
    q = "?lang=en" if lang == "en" else "?lang=fa"
    try:
        # --- the public price list, before signing in ---------------------------------------------
        page.goto("/pricing" + q)
        assert page.locator("tr[data-model='mock/chat-1']").count() == 1
        assert page.locator("tr[data-model='mock/hidden']").count() == 0
        row = page.locator("tr[data-model='mock/chat-1']").inner_text()
        assert ("150,000" if lang == "en" else "۱۵۰٬۰۰۰") in row and "mock/chat-1:free" in row
        v.shoot("pricing")

        # --- sign in ------------------------------------------------------------------------------
        with SmsLog() as sms:
            page.goto("/dashboard/models" + q)
            page.locator("input[name=phone]").fill(phone)
            page.locator("form[action='/dashboard/login'] button[type=submit]").click()
            page.locator("input[name=code]").fill(sms.code_for(canonical))
            page.locator("form[action='/dashboard/login/verify'] button[type=submit]").click()
            page.wait_for_url(re.compile(r".*/dashboard/models"))
        v.shoot("models")

        # --- keys: last used, spent, the sparkline ------------------------------------------------
        page.goto("/dashboard/keys")
        row = page.locator("tr", has=page.locator("svg.spark"))
        assert row.count() == 1 and row.locator("svg.spark:visible").count() == 1  # a column, or under the name on a phone
        assert row.locator("svg.spark:visible rect").count() == 1  # one day of the 30 had spending
        assert row.locator("td:visible", has_text=jalali.day_key()[:4].translate(FA if lang == "fa" else {})).count() >= 1  # last used
        v.shoot("keys")

        # --- requests: filters typed in Persian digits, then the CSV ------------------------------
        page.goto("/dashboard/requests")
        today = jalali.day_key().replace("-", "/")
        form = page.locator("form.filters")
        form.locator("input[name=from]").fill(today.translate(FA) if lang == "fa" else today)
        form.locator("select[name=model]").select_option("mock/chat-big")
        form.locator("button[type=submit]").click()
        page.wait_for_url(re.compile(r".*model=mock%2Fchat-big.*"))
        assert page.locator("tr[data-request]").count() == 1
        v.shoot("requests-filtered")
        with page.expect_download() as info:
            page.locator("a[href*='format=csv']").first.click()
        assert "mock/chat-big" in open(info.value.path(), encoding="utf-8").read()

        page.goto("/dashboard/usage")
        assert page.locator("p.csvlinks a").count() == 3
        v.shoot("usage")

        # --- the low-balance alert ----------------------------------------------------------------
        page.goto("/dashboard/alerts")
        page.locator("input[name=low_balance_toman]").fill("۵۰٬۰۰۰" if lang == "fa" else "50,000")
        v.shoot("alerts")
        page.locator("form[action='/dashboard/alerts'] button[type=submit]").click()
        page.wait_for_url("**/dashboard/alerts?saved=1")
        assert accounts.show(store.connect_sync(redis_url), acct)["low_balance_micro"] == 50_000 * 10 ** 6
        page.locator("input[name=low_balance_toman]").fill("abc")
        page.locator("form[action='/dashboard/alerts'] button[type=submit]").click()
        assert ("مبلغ" if lang == "fa" else "Type an amount in toman") in page.locator(".flash.error").inner_text()
        v.shoot("alerts-refused")
        page.goto("/dashboard/")
        assert ("۵۰٬۰۰۰" if lang == "fa" else "50,000") in page.locator("#alert-line").inner_text()
        v.shoot("wallet")

        # --- a top-up and its printable receipt with VAT ------------------------------------------
        page.goto("/dashboard/topup")
        page.locator("input[name=amount_toman]").fill("110000")
        page.locator("form[action='/dashboard/topup'] button[type=submit]").click()
        page.wait_for_url("**/dashboard/topup/fake-bank/**")
        page.locator("button[value=pay]").click()
        page.wait_for_url(re.compile(r".*/dashboard/topup/ord_.*"))
        page.locator("a[href^='/dashboard/billing/receipts/']").click()
        page.wait_for_url(re.compile(r".*/dashboard/billing/receipts/ord_.*"))
        sums = page.locator("table.sums").inner_text()
        for amount in ("100,000", "10,000", "110,000"):
            assert (amount.translate(FA).replace(",", "٬") if lang == "fa" else amount) in sums, sums
        assert "شرکت هوش نمونه" in page.locator(".receipt").inner_text()
        v.shoot("receipt")
        page.emulate_media(media="print")
        assert not page.locator("header.top").is_visible() and not page.locator("button[data-print]").is_visible()
        page.screenshot(path=str(SHOTS / f"first-receipt-print-{lang}-{width}.png"), full_page=True)
        page.emulate_media(media="screen")

        # --- a new phone: a code to the new number and one to the old ------------------------------
        new_phone = "0936" + phone[4:]
        with SmsLog() as sms:
            page.goto("/dashboard/phone")
            v.shoot("phone")
            page.locator("input[name=phone]").fill(new_phone.translate(FA) if lang == "fa" else new_phone)
            page.locator("form[action='/dashboard/phone'] button[type=submit]").click()
            page.locator("input[name=code_new]").wait_for()
            v.shoot("phone-codes")
            page.locator("input[name=code_new]").fill(sms.code_for("+98" + new_phone[1:]))
            page.locator("input[name=code_old]").fill(sms.code_for(canonical))
            page.locator("form[action='/dashboard/phone/verify'] button[type=submit]").click()
            page.wait_for_url("**/dashboard/phone?done=1")
        assert accounts.show(store.connect_sync(redis_url), acct)["phone"] == "+98" + new_phone[1:]
        v.shoot("phone-done")

        # --- signed-in devices, then sign out everywhere ------------------------------------------
        page.goto("/dashboard/sessions")
        assert page.locator("ul.devices li").count() == 1
        assert ("همین دستگاه" if lang == "fa" else "this device") in page.locator("ul.devices").inner_text()
        v.shoot("sessions")
        page.locator("form[action='/dashboard/sessions/revoke-all'] button").click()
        page.wait_for_url(re.compile(r".*/dashboard/login.*"))
        page.goto("/dashboard/keys")
        assert "/dashboard/login" in page.url
    finally:
        v.close()
