"""The support desk in Chromium, Persian and English at 390 and 1280 px: the account page (jump
links, phone and notes, the suspension's reason), the readable audit (sentences, before → after,
a replay marked), the request search across accounts. Every page passes the layout measure
(nothing past the viewport, no cut text), its controls are at least 40 px tall, and a Persian
page draws with a Persian-capable face first (never system-ui), its digits Persian, with no
apostrophe or "·" between digits and no ISO time shown.
Screenshots: tests/.screenshots/support-PAGE-LANG-WIDTH.png — look at them."""
from __future__ import annotations

import re

import httpx
import pytest

from tests.console.test_console_browser import browser  # noqa: F401  (fixture)
from tests.console.test_console_layout_browser import Shots
from tests.console_kit import admin_token
from tests.gateway import seed
from upgate.services import accounts, notes, phone_change, transactions
from upgate.store import connection as store

# controls a finger presses: at least 40 px tall
SMALL_TARGETS = """() => [...document.querySelectorAll(
    'nav.jump a, main button, main a.button, main input:not([type=hidden]), main select, main textarea')]
  .filter(el => getComputedStyle(el).display !== 'none' && el.getBoundingClientRect().height > 0)
  .filter(el => el.getBoundingClientRect().height < 40)
  .map(el => `${el.tagName.toLowerCase()}#${el.id}.${el.className} ${Math.round(el.getBoundingClientRect().height)}px`)"""
def chat(node, key: str, model: str = "mock/chat-1") -> None:
    httpx.post(node.base + "/chat/completions", json={"model": model, "messages": [{"role": "user", "content": "hi"}]},
               headers={"Authorization": f"Bearer {key}"}, timeout=30)


@pytest.fixture
def desk(node, redis_url):
    client = store.connect_sync(redis_url)
    key, acct, kid = seed(redis_url, phone="09127654321", balance="1000000")
    _k2, other, _ = seed(redis_url, phone="09351112233", balance="50000")
    for model in ("mock/chat-1", "mock/chat-big", "mock/chat-1"):
        chat(node, key, model)
    transactions.topup(client, acct, "100009", ref="zarinpal-A0000001234", note="پرداخت کارت", actor="ops")
    transactions.topup(client, acct, "100009", ref="zarinpal-A0000001234", actor="ops")  # a replay
    notes.add(client, acct, "مشتری دربارهٔ شارژ دوبل تماس گرفت؛ ref=zarinpal-A0000001234 بررسی شد", actor="ops")
    notes.add(client, acct, "Called back, all good.", actor="support-2")
    accounts.suspend(client, other, "چک برگشتی", actor="ops")
    phone_change.set_phone(client, other, "09351112244", actor="ops")
    return {"client": client, "account_id": acct, "key_id": kid, "other": other}


def drawn_with(page, selector: str) -> list[str]:
    """The faces Chromium actually drew an element's text with (DevTools' platform fonts)."""
    cdp = page.context.new_cdp_session(page)
    cdp.send("DOM.enable")
    cdp.send("CSS.enable")
    root = cdp.send("DOM.getDocument")["root"]["nodeId"]
    node = cdp.send("DOM.querySelector", {"nodeId": root, "selector": selector})["nodeId"]
    return [f["familyName"] for f in cdp.send("CSS.getPlatformFontsForNode", {"nodeId": node})["fonts"]]


def check(s: Shots, name: str) -> None:
    page = s.page
    s.check("support-" + name)  # lang, dir, the layout measure, the Persian checks, the screenshot
    assert page.evaluate(SMALL_TARGETS) == [], f"{name} ({s.lang}, {s.width} px)"


@pytest.mark.parametrize("lang", ["fa", "en"])
def test_support_desk_pages_read_well_at_both_widths(browser, node, redis_url, desk, lang):  # noqa: F811
    token = admin_token(redis_url)
    acct, other = desk["account_id"], desk["other"]
    for width in (390, 1280):
        s = Shots(browser, node, token, width, lang)
        page = s.page
        page.goto(f"/admin/accounts/{acct}")
        jump = page.locator("nav.jump a")
        assert jump.count() == 8
        check(s, "account")
        where = "document.querySelector('#requests').getBoundingClientRect().top"
        assert page.evaluate(where) > 900  # far below the first screen
        page.locator("nav.jump a[href='#requests']").click()  # the jump brings its section into view
        assert 0 <= page.evaluate(where) < 900 - 100
        notes_text = page.locator("#profile ul.notes").inner_text()
        assert "ref=zarinpal-A0000001234" in notes_text and "Called back" in notes_text
        page.goto(f"/admin/accounts/{other}")
        page.locator("#w-reason").fill("پرداخت شد" if lang == "fa" else "paid")
        page.locator("#wallet form button[type=submit]").click()
        assert not accounts.show(desk["client"], other)["suspended"]
        accounts.suspend(desk["client"], other, "again", actor="ops")  # for the next width
        page.goto("/admin/audit")
        check(s, "audit")
        log = page.locator("#log").inner_text()
        assert "/admin" not in log and "POST" not in log  # verbs in words, never a route
        replay = page.locator("table.log tr.replay")
        assert replay.count() == 1
        page.goto(f"/admin/audit?account={acct}&action=account.topup")
        check(s, "audit-filtered")
        assert page.locator("table.log tbody tr").count() == 2
        page.goto("/admin/requests")
        check(s, "requests")
        assert page.locator("#found table tbody tr").count() == 3
        page.goto(f"/admin/requests?model=mock/chat-big&key={desk['key_id']}")
        assert page.locator("#found table tbody tr").count() == 1
        check(s, "requests-filtered")
        page.goto("/admin/requests?from=1405-01-01&to=1405-06-01")  # refused: too long a period
        check(s, "requests-refused")
        assert page.locator(".flash.error").count() == 1
        s.close()


def test_persian_pages_say_it_in_persian(browser, node, redis_url, desk):  # noqa: F811
    s = Shots(browser, node, admin_token(redis_url), 390, "fa")
    page = s.page
    page.goto("/admin/audit")
    log = page.locator("#log").inner_text()
    assert "کیف پول حساب" in log and "را شارژ کرد" in log  # "topped up account …" in Persian
    assert "تکرار: چیزی تغییر نکرد" in log  # the replay, marked
    assert "شمارهٔ حساب" in log and "+989351112233" in log and "+989351112244" in log  # before → after
    assert re.search(r"[۰-۹]٬[۰-۹]", log)  # amounts with the Persian thousands separator
    faces = drawn_with(page, "table.log .amt")
    assert faces and faces[0] in ("Vazirmatn", "Noto Sans Arabic", "Noto Naskh Arabic"), faces
    page.goto(f"/admin/accounts/{desk['account_id']}")
    assert page.get_by_role("heading", name="شماره و یادداشت‌ها").count() == 1
    low = page.locator("#wallet dt").nth(4).inner_text()
    assert "زیر" not in low and "کمبود موجودی" in low
    page.locator(f"#keys details summary").first.click()
    assert page.locator(f"#e-{desk['key_id']}").get_attribute("placeholder") == "۱۴۰۵/۱۲/۲۹"  # Jalali expiry
    axis = page.locator("#usage .charts svg .tick").evaluate_all("els => els.map(e => e.textContent)")
    assert not [t for t in axis if re.search(r"[0-9]|k\b", t)], [t for t in axis if re.search(r"[0-9]|k\b", t)]
    page.goto("/admin/login")
    assert page.locator("main bdi code").count() == 2  # the Latin pieces of the help, isolated
    s.close()
