"""Every dashboard page and state as a customer sees it, in Chromium (Debian's chromium, with
the fonts a Persian reader has) at 390 and 1280 px, in Persian and English, measured element by
element as the console is: nothing past the screen's edge or cut inside its box, every button,
field and link of the menu at least 40 px, chart labels at least 12 px on screen; on a Persian
page no Latin digit and, on either, no field id outside the Latin islands (key, model and
request ids). And what issue 38 found, each where it was seen: tables that hid spend, limit and
expiry behind a sideways swipe (cards on a phone), revoke in one tap, `۵۰٬۰۰۰` refused,
`openai/gpt-9` accepted, a date meaning two things, a 402 "not yours", no word that a smaller
max_tokens fits, «فعال» keys and a live-looking Pay while suspended, a 30×24 px sign-out, 8 px
chart labels and ticks at ۰٫۵ requests, Latin digits in the header and the fields, no tries
left after a wrong code, a billing note and a CSV in the gateway's English.
Screenshots: tests/.screenshots/dash-PAGE-LANG-WIDTH.png (look at them)."""
from __future__ import annotations

import csv
import io
import re
import time
from pathlib import Path

import httpx
import pytest

from tests.browser_kit import SHOTS, browser, need_browser  # noqa: F401 (browser: a fixture)
from tests.console.test_console_layout_browser import OVERFLOW
from tests.dashboard_kit import SmsLog
from tests.gateway import seed
from upgate.services import accounts, dash_sessions, keys, records
from upgate.settings import from_env
from upgate.store import connection as store

sync_api = need_browser()

HELLO = [{"role": "user", "content": "Hello from a customer"}]
# the page's own words: every visible text node outside a Latin island (dir=ltr, code, pre,
# fields), for the digit and field-id checks
WORDS = """() => {
  const out = [], walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  while (walk.nextNode()) {
    const n = walk.currentNode, el = n.parentElement;
    if (!n.textContent.trim() || el.closest('[dir=ltr], code, pre, script, style, textarea, select, svg, .skip')) continue;
    const cs = getComputedStyle(el);
    if (cs.display === 'none' || cs.visibility === 'hidden') continue;
    out.push(n.textContent.trim());
  }
  return out;
}"""
# everything a thumb presses: at least 40 × 40 px
TARGETS = """() => {
  const bad = [];
  for (const el of document.querySelectorAll('button, a.button, header a, summary, input:not([type=hidden]), select')) {
    const r = el.getBoundingClientRect(), cs = getComputedStyle(el);
    if (cs.display === 'none' || cs.visibility === 'hidden' || (r.width === 0 && r.height === 0)) continue;
    if (el.closest('.skip')) continue;
    if (r.height < 40 || r.width < 40) bad.push(`${el.tagName} "${el.textContent.trim().slice(0, 30)}" ${Math.round(r.width)}×${Math.round(r.height)}`);
  }
  return bad;
}"""
# a chart label's size on screen: its font size in the viewBox times the chart's scale
TICKS = """() => Array.from(document.querySelectorAll('svg.chart')).map(svg => {
  const scale = svg.getBoundingClientRect().width / svg.viewBox.baseVal.width;
  return Array.from(svg.querySelectorAll('text.tick')).map(t => [t.textContent, parseFloat(getComputedStyle(t).fontSize) * scale]);
})"""
FIELD_ID = re.compile(r"\b[a-z]+_[a-z_]+\b|\d{4}-\d\d-\d\dT")


@pytest.fixture
def shop(make_node, monkeypatch):
    """A node with the built-in test bank, whose public address is its own."""
    import tests.gateway
    from tests.procs import free_port

    port = free_port()
    monkeypatch.setattr(tests.gateway, "free_port", lambda: port)
    public = f"http://127.0.0.1:{port}"
    return make_node(payments="fake", public_url=public, topup_url=from_env({"UPGATE_PUBLIC_URL": public}).topup_url)


class Customer:
    """One signed-in browser context (a session opened through the service, as sign-in does)."""

    def __init__(self, browser, node, redis_url, account_id: str, phone: str, lang: str, width: int):  # noqa: F811
        self.lang, self.width, self.node = lang, width, node
        self.context = browser.new_context(viewport={"width": width, "height": 900}, base_url=node.url,
                                           accept_downloads=True)
        sid = dash_sessions.open_session(store.connect_sync(redis_url), account_id, phone)
        self.context.add_cookies([{"name": dash_sessions.COOKIE, "value": sid, "url": node.url + "/dashboard/"}])
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.goto(f"/dashboard/?lang={lang}")  # the choice, remembered from here on

    def check(self, name: str) -> None:
        page, lang = self.page, self.lang
        assert page.evaluate("document.documentElement.lang") == lang, name
        SHOTS.mkdir(exist_ok=True)
        page.screenshot(path=str(SHOTS / f"dash-{name}-{lang}-{self.width}.png"), full_page=True)
        where = f"{name} ({lang}, {self.width} px)"
        assert page.evaluate(OVERFLOW) == [], where
        assert page.evaluate(TARGETS) == [], where
        for chart in page.evaluate(TICKS):
            assert all(px >= 11.9 for _, px in chart), (where, chart)
        words = " ".join(page.evaluate(WORDS)).replace("max_tokens", "")  # (the API's own word for it)
        words = words.replace("openai/gpt-9", "")  # what the customer typed comes back as typed
        assert not FIELD_ID.search(words), (where, FIELD_ID.search(words))
        if lang == "fa":
            assert not re.search(r"[0-9]", words), (where, re.findall(r".{0,20}[0-9].{0,20}", words)[:3])

    def close(self) -> None:
        self.context.close()
        assert not self.errors, self.errors


def _chat(node, key, **body):
    return httpx.post(node.base + "/chat/completions", headers={"Authorization": f"Bearer {key}"},
                      json={"model": "mock/chat-1", "messages": HELLO, "max_tokens": 8, **body}, timeout=30)


@pytest.mark.parametrize("width", [390, 1280])
@pytest.mark.parametrize("lang", ["fa", "en"])
def test_every_page_and_state_reads_right(browser, shop, redis_url, lang, width):  # noqa: F811
    node = shop
    phone = {("fa", 390): "09121230390", ("fa", 1280): "09121231280",
             ("en", 390): "09122230390", ("en", 1280): "09122231280"}[lang, width]
    key, account_id, key_id = seed(redis_url, phone=phone, balance="9000", name="A long name for the reporting pipeline",
                                   allowed_models=["mock/chat-1", "mock/chat-big", "mock/chat-1:free"],
                                   monthly_limit_micro=2_500_000_000_000)
    client = store.connect_sync(redis_url)
    for _ in range(3):
        assert _chat(node, key).status_code == 200
    refused = _chat(node, key, model="mock/chat-big", max_tokens=4096)  # its hold is past the balance
    assert refused.status_code == 402 and refused.json()["error"]["svc"]["max_tokens_that_fit"] > 0
    rid = refused.headers["x-svc-request-id"]
    c = Customer(browser, node, redis_url, account_id, "+98" + phone[1:], lang, width)
    page, fa = c.page, lang == "fa"
    try:
        # --- wallet: the low-balance note says a smaller max_tokens may fit; whole-number ticks
        page.goto("/dashboard/")
        assert "max_tokens" in page.locator(".note").inner_text()
        counts = page.evaluate(TICKS)[1]
        assert all(not re.search(r"[.٫]", label) for label, _ in counts), counts
        phone_shown = page.locator("header .phone").inner_text()
        assert re.fullmatch(r"[+۰-۹*]+" if fa else r"[+0-9*]+", phone_shown), phone_shown
        c.check("wallet")

        # --- keys: cards on a phone with every column in view; values in the page's digits
        page.goto("/dashboard/keys")
        row = page.locator("table.keys tbody tr").first
        text = row.inner_text()
        assert ("۲٬۵۰۰٬۰۰۰" if fa else "2,500,000") in text  # the limit, not behind a swipe
        if width == 390:
            assert page.locator("table.keys thead").bounding_box()["width"] <= 1  # read as cards
        page.locator("details.keyedit summary").first.click()
        edit = page.locator("details.keyedit").first
        assert edit.locator("input[name=monthly_limit_toman]").input_value() == ("۲٬۵۰۰٬۰۰۰" if fa else "2,500,000")
        assert edit.locator("input[name=rate_limit_rpm]").input_value() == ("۶۰" if fa else "60")
        if fa:
            for field in page.locator("input[placeholder]").all():
                assert not re.search(r"[0-9]", field.get_attribute("placeholder")) or \
                    field.get_attribute("name") in ("allowed_models", "id"), field.get_attribute("name")
        c.check("keys-open")

        # `openai/gpt-9` is no model we offer: refused in the page's words, nothing written
        edit.locator("input[name=allowed_models]").fill("openai/gpt-9")
        edit.locator("form[action$='/update'] button[type=submit]").click()
        said = page.locator(".flash.error").inner_text()
        assert "openai/gpt-9" in said and ("در فهرست مدل‌های ما نیست" if fa else "is not a model we offer") in said
        assert keys.find_key(client, key_id)["allowed_models"] == ["mock/chat-1", "mock/chat-big", "mock/chat-1:free"]
        c.check("keys-refused")

        # the amount as the page prints it, and a Jalali day that means the end of that Tehran day
        edit = page.locator("details.keyedit").first
        edit.locator("input[name=allowed_models]").fill("mock/chat-1, mock/chat-big")
        edit.locator("input[name=monthly_limit_toman]").fill("۵۰٬۰۰۰" if fa else "50,000")
        edit.locator("input[name=expires_at]").fill("۱۴۱۰/۰۱/۰۱" if fa else "1410/01/01")
        assert ("پایان همان روز" if fa else "end of that day") in edit.inner_text()
        edit.locator("form[action$='/update'] button[type=submit]").click()
        page.wait_for_url("**/dashboard/keys?done=updated")
        saved = keys.get(client, key_id)
        assert saved["monthly_limit_toman"] == "50000.000000"
        assert saved["expires_at"] == "2031-03-21T20:30:00Z"  # 1410/01/02 00:00 in Tehran: all of 1410/01/01
        assert ("۱۴۱۰/۰۱/۰۱" if fa else "1410/01/01") in page.locator("table.keys tbody tr").first.inner_text()

        # revoke asks first, on a page of its own; "no" leaves the key working
        page.locator("details.keyedit summary").first.click()
        page.locator("form[action$='/revoke'] button").first.click()
        assert page.get_by_role("heading", name="این کلید باطل شود؟" if fa else "Revoke this key?").is_visible()
        c.check("revoke-confirm")
        page.get_by_role("link", name="نه، بازگرد" if fa else "No, go back").click()
        assert _chat(node, key).status_code == 200

        # --- requests: the lookup fits the screen; a 402's id is found, in words
        page.goto(f"/dashboard/requests?id={rid}")
        record = page.locator("dl.record").inner_text()
        assert ("موجودی کافی نبود" if fa else "Not enough balance") in record and "max_tokens" in record
        assert "insufficient_balance" not in page.content().split("<main")[1]
        c.check("requests")

        # --- usage, billing after a payment at the test bank, and the statement file --------------
        page.goto("/dashboard/usage")
        c.check("usage")
        page.goto("/dashboard/topup")
        page.fill("#amount_toman", "۵۰٬۰۰۰" if fa else "50,000")
        page.click("main form button[type=submit]")
        page.wait_for_url("**/dashboard/topup/fake-bank/**")
        page.click("button[value=pay]")
        page.wait_for_url("**/dashboard/topup/ord_*")
        page.goto("/dashboard/billing")
        notes = page.locator("table.rows tbody").inner_text()
        assert ("پرداخت اینترنتی" if fa else "Paid online") in notes and "payment, bank ref" not in notes
        c.check("billing")
        with page.expect_download() as info:
            page.locator("a[href^='/dashboard/billing/statement.csv']").click()
        text = Path(info.value.path()).read_text(encoding="utf-8-sig")
        rows = list(csv.reader(io.StringIO(text)))
        assert rows[0] == (["روز", "زمان", "شرح", "درخواست‌ها", "توضیح", "مبلغ (تومان)"] if fa else
                           ["Day", "Time", "Description", "Requests", "Note", "Amount (toman)"]), rows[0]
        body = "\n".join(",".join(r) for r in rows[1:])
        assert not re.search(r"\.\d{6}\b|\d{4}-\d\d-\d\dT|Z\b", body), body  # no six decimals, no ISO times
        assert re.search(r"\b14\d\d/\d\d/\d\d\b", body) and ("پرداخت اینترنتی" if fa else "Paid online") in body

        # --- suspended: keys do not say active, Pay is plainly off ----------------------------
        accounts.suspend(client, account_id)
        page.goto("/dashboard/keys")
        status = page.locator("table.keys tbody tr").first.locator(".badge").inner_text()
        assert status == ("معلق همراه حساب" if fa else "suspended with the account")
        c.check("keys-suspended")
        page.goto("/dashboard/topup")
        pay = page.locator("main form button[type=submit]")
        assert pay.is_disabled()
        assert pay.evaluate("b => getComputedStyle(b).cursor") == "not-allowed"
        assert pay.evaluate("b => getComputedStyle(b).backgroundColor") != "rgb(15, 107, 92)"  # not the live accent
        c.check("topup-suspended")
    finally:
        c.close()


@pytest.mark.parametrize("width", [390, 1280])
@pytest.mark.parametrize("lang", ["fa", "en"])
def test_sign_in_says_how_many_tries_are_left(browser, node, redis_url, lang, width):  # noqa: F811
    phone = {("fa", 390): "09123330390", ("fa", 1280): "09123331280",
             ("en", 390): "09124440390", ("en", 1280): "09124441280"}[lang, width]
    seed(redis_url, phone=phone)
    context = browser.new_context(viewport={"width": width, "height": 900}, base_url=node.url)
    page = context.new_page()
    try:
        with SmsLog() as sms:
            page.goto(f"/dashboard/login?lang={lang}")
            assert not re.search(r"[0-9]", page.locator("#phone").get_attribute("placeholder")) or lang == "en"
            page.locator("#phone").fill(phone)
            page.locator("form[action='/dashboard/login'] button").click()
            page.locator("#code").wait_for()
            code = sms.code_for("+98" + phone[1:])
        wrong = f"{(int(code) + 1) % 10 ** 6:06d}"
        for left in (4, 3):
            page.locator("#code").fill(wrong)
            page.locator("form[action='/dashboard/login/verify'] button").click()
            said = page.locator(".flash.error").inner_text()
            assert (f"{str(left).translate(str.maketrans('0123456789', '۰۱۲۳۴۵۶۷۸۹'))} بار دیگر" if lang == "fa"
                    else f"{left} tries left") in said, said
        shot = SHOTS / f"dash-code-refused-{lang}-{width}.png"
        SHOTS.mkdir(exist_ok=True)
        page.screenshot(path=str(shot), full_page=True)
        assert page.evaluate(OVERFLOW) == [] and page.evaluate(TARGETS) == []
    finally:
        context.close()
