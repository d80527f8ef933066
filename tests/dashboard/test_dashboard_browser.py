"""The dashboard in a real headless Chromium (Debian's `chromium`, driven by Playwright) against a
real gateway node with the mock provider, in Persian and English at phone and desktop widths:
sign in with the code the `log` driver wrote, create a key and use it with the openai client,
change its monthly limit and see /v1/svc/me follow, revoke it and see 401, look up a request,
download a statement. Screenshots of every page go to tests/.screenshots/dashboard-* (not
committed): look at them after a change to the pages. No page may scroll sideways, log a
console error or fail a request."""
from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import pytest

from tests.dashboard_kit import SmsLog
from tests.gateway import seed
from tests.browser_kit import CHROMIUM, SHOTS, browser, need_browser  # noqa: F401 (browser: a fixture)

sync_api = need_browser()
openai = pytest.importorskip("openai")

PAGES = ("", "keys", "usage", "requests", "billing", "topup")



class Visitor:
    """One browser context (its own cookies) collecting console errors, page errors and failed
    requests of every page it shows."""

    def __init__(self, browser, node, width: int, lang: str):
        self.context = browser.new_context(viewport={"width": width, "height": 900}, base_url=node.url,
                                           accept_downloads=True)
        self.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=node.url)
        self.page = self.context.new_page()
        self.width, self.lang = width, lang
        self.errors: list[str] = []
        self.page.on("pageerror", lambda e: self.errors.append(f"{self.page.url}: {e}"))
        self.page.on("requestfailed", lambda r: self.errors.append(f"failed {r.url}: {r.failure}"))
        self.page.on("console", lambda m: m.type == "error" and not m.text.startswith("Failed to load resource")
                     and self.errors.append(f"{self.page.url}: {m.text}"))

    def shoot(self, name: str) -> None:
        SHOTS.mkdir(exist_ok=True)
        self.page.screenshot(path=str(SHOTS / f"dashboard-{name}-{self.lang}-{self.width}.png"), full_page=True)
        # nothing may push the page sideways on a phone: wide tables scroll inside their box
        assert self.page.evaluate("document.documentElement.scrollWidth") <= self.width, name

    def close(self) -> None:
        self.context.close()
        assert not self.errors, self.errors


@pytest.mark.parametrize("width", [390, 1280])
@pytest.mark.parametrize("lang", ["fa", "en"])
def test_a_customer_from_sign_in_to_statement(browser, node, redis_url, mock, lang, width):
    phone = {("fa", 390): "09121110390", ("fa", 1280): "09121111280",
             ("en", 390): "09122220390", ("en", 1280): "09122221280"}[lang, width]
    canonical = "+98" + phone[1:]
    _key, account_id, _kid = seed(redis_url, phone=phone, balance="250000")
    v = Visitor(browser, node, width, lang)
    page = v.page
    try:
        # --- sign in: the form, the code from the log driver -------------------------------------
        with SmsLog() as sms:
            page.goto("/dashboard/keys" + ("?lang=en" if lang == "en" else ""))
            assert "/dashboard/login" in page.url
            assert page.locator("html").get_attribute("lang") == lang
            assert page.locator("html").get_attribute("dir") == ("rtl" if lang == "fa" else "ltr")
            v.shoot("login")
            page.locator("input[name=phone]").fill(phone if lang == "en" else phone.translate(str.maketrans("0123456789", "۰۱۲۳۴۵۶۷۸۹")))
            page.locator("form[action='/dashboard/login'] button[type=submit]").click()
            page.locator("input[name=code]").wait_for()
            v.shoot("code")
            page.locator("input[name=code]").fill(sms.code_for(canonical))
            page.locator("form[action='/dashboard/login/verify'] button[type=submit]").click()
            page.wait_for_url(re.compile(r".*/dashboard/keys(\?lang=en)?$"))  # where it was going

        # --- create a key: shown once, with a copy button and ready lines ------------------------
        form = page.locator("#create form")
        form.locator("input[name=name]").fill("browser " + lang)
        form.locator("input[name=rate_limit_rpm]").fill("120" if lang == "en" else "۱۲۰")
        # an expiry: one day, typed as a Jalali date in Persian digits, or as a Gregorian one (what
        # a date picker sends): either way the key works through all of it, Tehran time
        form.locator("input[name=expires_at]").fill("2031-03-21" if lang == "en" else "۱۴۱۰/۰۱/۰۱")
        form.locator("button[type=submit]").click()
        new_key = page.locator("#newkey").input_value()
        assert new_key.startswith("sk-up-") and len(new_key) == 46
        assert new_key in page.locator("#curl").inner_text() and new_key in page.locator("#python").inner_text()
        assert f"{node.url}/v1" in page.locator("#python").inner_text()
        page.locator("button.copy").click()
        assert page.evaluate("navigator.clipboard.readText()") == new_key
        v.shoot("key-created")

        client = openai.OpenAI(base_url=node.base, api_key=new_key, max_retries=0)
        raw = client.chat.completions.with_raw_response.create(
            model="mock/chat-1", messages=[{"role": "user", "content": "Hello from the dashboard"}], max_tokens=8)
        request_id = raw.headers["x-svc-request-id"]
        assert raw.parse().choices[0].message.content

        # --- change its monthly limit: /v1/svc/me follows ----------------------------------------
        page.goto("/dashboard/keys")
        assert new_key not in page.content()  # never again
        mine = page.locator("details", has_text=new_key[:10])
        mine.locator("summary").click()
        v.shoot("key-edit")
        # a refused setting: the service's own message, the form as typed, nothing written
        mine.locator("input[name=rate_limit_rpm]").fill("6000")
        mine.locator("form[action$='/update'] button[type=submit]").click()
        said = page.locator(".flash.error").inner_text()  # the catalogue's sentence, never a field id
        assert ("Requests per minute must be a whole number from 1 to 600." if lang == "en" else
                "شمار درخواست در دقیقه باید عددی صحیح از ۱ تا ۶۰۰ باشد.") in said and "rate_limit" not in said
        mine = page.locator("details", has_text=new_key[:10])
        assert mine.locator("input[name=rate_limit_rpm]").input_value() == "6000"  # shown open, as typed
        v.shoot("key-refused")
        mine.locator("input[name=rate_limit_rpm]").fill("120")
        mine.locator("input[name=monthly_limit_toman]").fill("5000" if lang == "en" else "۵۰۰۰")
        mine.locator("form[action$='/update'] button[type=submit]").click()
        page.wait_for_url("**/dashboard/keys?done=updated")
        me = client.with_options().get("/svc/me", cast_to=object)
        assert me["key"]["monthly_limit_toman"] == "5000.000000" and me["key"]["rate_limit_rpm"] == 120
        row = page.locator("tr", has_text="browser " + lang)
        assert ("5,000" if lang == "en" else "۵٬۰۰۰") in row.inner_text()
        assert ("1410/01/01" if lang == "en" else "۱۴۱۰/۰۱/۰۱") in row.inner_text()  # Jalali, Tehran time
        v.shoot("keys")

        # --- look up the request ------------------------------------------------------------------
        page.goto("/dashboard/requests")
        page.locator("input[name=id]").fill(request_id)
        page.locator("input[name=id]").press("Enter")
        page.wait_for_url(re.compile(r".*/dashboard/requests\?id=.*"))
        record = page.locator("dl.record").inner_text()
        assert request_id in record and "mock/chat-1" in record
        assert "Hello from the dashboard" not in page.content()  # numbers only, never content
        assert "mock" not in page.locator("dl.record").inner_text().replace("mock/chat-1", "")  # no provider
        v.shoot("requests")

        # --- every page, in this language, without sideways scrolling -----------------------------
        for name in PAGES:
            page.goto(f"/dashboard/{name}")
            assert page.locator("html").get_attribute("lang") == lang  # remembered
            v.shoot(name or "wallet")
        if lang == "fa":
            assert "۲۵۰٬۰۰۰" in page.goto("/dashboard/").text() or "۲۴۹٬" in page.content()

        # --- download the month's statement -------------------------------------------------------
        page.goto("/dashboard/billing")
        with page.expect_download() as info:
            page.locator("a[href^='/dashboard/billing/statement.csv']").click()
        text = Path(info.value.path()).read_text(encoding="utf-8-sig")  # (a BOM, for spreadsheets)
        rows = list(csv.reader(io.StringIO(text)))
        opening = "موجودی اول دوره" if lang == "fa" else "Opening balance"  # in the reader's words
        assert len(rows) >= 3 and any(opening in ",".join(r) for r in rows), rows

        # --- revoke it: 401 from the next request on ----------------------------------------------
        page.goto("/dashboard/keys")
        mine = page.locator("details", has_text=new_key[:10])
        mine.locator("summary").click()
        mine.locator("form[action$='/revoke'] button[type=submit]").click()
        page.locator("input[name=confirmed]").wait_for(state="attached")  # it asks first
        v.shoot("revoke-confirm")
        page.locator("form[action$='/revoke'] button[type=submit]").click()
        page.wait_for_url("**/dashboard/keys?done=revoked")
        with pytest.raises(openai.AuthenticationError):
            client.chat.completions.create(model="mock/chat-1", messages=[{"role": "user", "content": "hi"}])

        # --- sign out: the pages are closed again -------------------------------------------------
        page.locator("form[action='/dashboard/logout'] button").click()
        page.wait_for_url("**/dashboard/login")
        page.goto("/dashboard/keys")
        assert "/dashboard/login" in page.url
    finally:
        v.close()
