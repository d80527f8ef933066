"""The console read at a glance, in Chromium: every page at 390, 768 and 1280 px in English and
Persian is measured element by element (nothing beyond the viewport, nothing whose content is
wider than its box, except ids cut on purpose with their whole value in text and tooltip);
`lang`/`dir` follow the operator's choice, remembered in a cookie; the accounts list pages
and searches; what cannot be undone asks first, on a page that needs no script.
Screenshots go to tests/.screenshots/layout-PAGE-LANG-WIDTH.png: look at them."""
from __future__ import annotations

import re

import pytest

from tests.console.test_console_browser import CHROMIUM, SHOTS, browser, chat  # noqa: F401  (fixture)
from tests.console_kit import admin_token
from tests.gateway import PEPPER, seed
from upgate.billing import money
from upgate.services import accounts, keys, transactions
from upgate.store import connection as store

WIDTHS = (390, 768, 1280)

# every element whose content is wider than its box, or that reaches past the viewport; ids cut
# on purpose (.trunc, whole id in its text and title) and form fields (they scroll by design)
# are not defects; a table's header row is visually hidden where rows become cards
OVERFLOW = """() => {
  const vw = document.documentElement.clientWidth, bad = [];
  const name = el => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') +
    (typeof el.className === 'string' && el.className.trim() ? '.' + el.className.trim().split(/\\s+/).join('.') : '');
  for (const el of document.querySelectorAll('body *')) {
    if (el.closest('svg') && el.tagName.toLowerCase() !== 'svg') continue;
    if (el.closest('.skip') || ['input', 'textarea', 'select', 'option'].includes(el.tagName.toLowerCase())) continue;
    const head = el.closest('thead');
    if (head && head.getBoundingClientRect().width <= 1) continue;
    const cs = getComputedStyle(el);
    if (cs.display === 'none' || cs.visibility === 'hidden') continue;
    const r = el.getBoundingClientRect();
    if (r.width === 0 && r.height === 0) continue;
    if (r.right > vw + 1 || r.left < -1)
      bad.push(`${name(el)} reaches ${Math.round(r.left)}..${Math.round(r.right)} of ${vw}`);
    const onPurpose = el.classList.contains('trunc') && el.title === el.textContent;
    if (!onPurpose && el.clientWidth > 0 && el.scrollWidth > el.clientWidth + 1)
      bad.push(`${name(el)} holds ${el.scrollWidth}px in ${el.clientWidth}px: ${el.textContent.trim().slice(0, 40)}`);
  }
  return bad;
}"""


PERSIAN_DIGIT_SEPARATORS = re.compile(r"[۰-۹]\s*['’·]\s*[۰-۹]")
ISO_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:")


def persian_checks(page, name: str) -> None:
    """A Persian page draws with a Persian-capable face first (never system-ui: it drew the
    thousands separator as an apostrophe), shows no apostrophe or "·" between digits (a middle
    dot reads as a Persian zero) and no ISO time."""
    font = page.evaluate("getComputedStyle(document.body).fontFamily")
    assert "system-ui" not in font.lower() and "-apple-system" not in font.lower(), (name, font)
    text = page.evaluate("document.body.innerText")
    assert not PERSIAN_DIGIT_SEPARATORS.search(text), (name, PERSIAN_DIGIT_SEPARATORS.search(text).group(0))
    assert not ISO_TIME.search(text), (name, ISO_TIME.search(text).group(0))
    assert "·" not in text, name


@pytest.fixture
def busy(node, redis_url):
    """An account with what clipped before: a six-decimal balance in the hundreds of thousands,
    long refs and notes, a key with many models and a long name, a request of record; and 30
    other accounts for the list's pages."""
    client = store.connect_sync(redis_url)
    key, account_id, kid = seed(redis_url, phone="09127654321", balance="751987.088625")
    assert chat(node, key).status_code == 200
    transactions.topup(client, account_id, "1250000.5", ref="zarinpal-A00000000000000000000000012345678",
                       note="Payment for the winter quarter, invoice 1405/09/0042, paid by card", actor="ops")
    transactions.adjust(client, account_id, "-1234.567891", note="Refund of a duplicated charge", actor="ops")
    keys.create_key(client, PEPPER, account_id, name="A rather long key name for the reporting pipeline",
                    allowed_models=["mock/chat-1", "mock/chat-big", "openai/gpt-4o-mini-2024-07-18",
                                    "anthropic/claude-3-5-sonnet-20241022"], monthly_limit_micro=money.parse_toman("2500000"))
    others = [accounts.create_account(client, f"0912000{i:04d}", money.parse_toman(str(1000 * i))) for i in range(30)]
    return {"key": key, "account_id": account_id, "key_id": kid, "others": others, "client": client}


class Shots:
    def __init__(self, browser, node, token: str, width: int, lang: str):  # noqa: F811
        self.width, self.lang = width, lang
        self.context = browser.new_context(viewport={"width": width, "height": 900}, base_url=node.url)
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.goto("/admin/login?lang=" + lang)  # the choice, remembered from here on
        self.page.locator("#token").fill(token)
        self.page.locator("form.stack button[type=submit]").click()
        self.page.wait_for_url(re.compile(r".*/admin/(?!login).*"))

    def check(self, name: str) -> None:
        page = self.page
        assert page.evaluate("document.documentElement.lang") == self.lang, name
        assert page.evaluate("document.documentElement.dir") == ("rtl" if self.lang == "fa" else "ltr"), name
        SHOTS.mkdir(exist_ok=True)
        page.screenshot(path=str(SHOTS / f"layout-{name}-{self.lang}-{self.width}.png"), full_page=True)
        assert page.evaluate(OVERFLOW) == [], f"{name} ({self.lang}, {self.width} px)"
        if self.lang == "fa":
            persian_checks(page, name)

    def close(self) -> None:
        self.context.close()
        assert not self.errors, self.errors


@pytest.mark.parametrize("lang", ["en", "fa"])
def test_no_page_clips_at_any_width_in_either_language(browser, node, redis_url, busy, lang):  # noqa: F811
    token = admin_token(redis_url)
    for width in WIDTHS:
        s = Shots(browser, node, token, width, lang)
        page = s.page
        page.goto("/admin/")
        s.check("overview")
        page.goto("/admin/accounts")
        s.check("accounts")
        page.goto("/admin/accounts?q=0912000")
        s.check("accounts-search")
        page.goto(f"/admin/accounts/{busy['account_id']}")
        for d in page.locator("details").all():  # the key forms open: they must fit too
            d.locator("summary").click()
        s.check("account")
        page.locator(f"form[action$='/keys/{busy['key_id']}/revoke'] button").click()
        s.check("confirm-revoke")
        page.goto("/admin/models")
        s.check("models")
        for name in ("payments", "audit", "webhooks"):  # the pages other issues added
            page.goto("/admin/" + name)
            s.check(name)
        r = page.goto("/admin/no/such/page")
        assert r.status == 404
        s.check("not-found")
        page.goto("/admin/login")
        s.check("login")
        s.close()


def test_amounts_read_at_a_glance_with_every_digit_on_hover(browser, node, redis_url, busy):  # noqa: F811
    s = Shots(browser, node, admin_token(redis_url), 1280, "fa")
    page = s.page
    page.goto(f"/admin/accounts/{busy['account_id']}")
    balance = page.locator("#wallet dd .amt").first
    assert re.fullmatch(r"[۰-۹٬−]+", balance.inner_text()), balance.inner_text()  # whole toman, Persian digits
    assert "٫" in balance.get_attribute("title")  # the exact amount, decimals and all
    assert page.locator("text=Wallet").count() == 0 and page.get_by_role("heading", name="کیف پول").count() == 1
    page.goto("/admin/accounts?lang=en")  # the switch is remembered for the next page
    page.goto(f"/admin/accounts/{busy['account_id']}")
    assert page.evaluate("document.documentElement.dir") == "ltr"
    ids = page.locator("td .trunc").first
    assert ids.get_attribute("title") == ids.text_content()  # cut for the eye, whole on copy
    s.close()


def test_the_accounts_list_pages_and_searches(browser, node, redis_url, busy):  # noqa: F811
    s = Shots(browser, node, admin_token(redis_url), 390, "en")
    page = s.page
    page.goto("/admin/accounts")
    seen = []
    while True:
        rows = page.locator("table.accounts tbody tr")
        seen += [rows.nth(i).locator(".trunc").first.get_attribute("title") for i in range(rows.count())]
        nxt = page.get_by_role("link", name="Next page")
        if not nxt.count():
            break
        nxt.click()
    assert len(seen) == len(set(seen)) == 31  # each account once
    created = [accounts.show(busy["client"], a)["created_at"] for a in seen]
    assert created == sorted(created, reverse=True)  # newest first
    page.goto("/admin/accounts")
    page.get_by_role("link", name="Highest balance").click()
    assert page.locator("table.accounts tbody tr").first.locator(".trunc").first.get_attribute("title") == busy["account_id"]
    page.get_by_label("Phone (any part), account id, key prefix or request id").fill("۰۹۱۲۰۰۰۰۰۱")  # Persian digits, part
    page.get_by_role("button", name="Find").click()
    found = {page.locator("table.accounts tbody tr").nth(i).locator(".trunc").first.get_attribute("title")
             for i in range(page.locator("table.accounts tbody tr").count())}
    assert found == set(busy["others"][10:20])
    page.get_by_label("Phone (any part), account id, key prefix or request id").fill(busy["key"][:10])
    page.get_by_role("button", name="Find").click()  # one account has that key prefix: it opens (OPERATORS.md)
    page.wait_for_url(re.compile(rf".*/admin/accounts/{busy['account_id']}\?op=.*"))
    s.close()


def test_what_cannot_be_undone_asks_first_without_a_script(browser, node, redis_url, busy):  # noqa: F811
    s = Shots(browser, node, admin_token(redis_url), 390, "en")
    page = s.page
    account_id, key = busy["account_id"], busy["key"]
    revoke = f"form[action$='/keys/{busy['key_id']}/revoke'] button"
    page.goto(f"/admin/accounts/{account_id}")
    page.locator("details", has=page.locator(revoke)).locator("summary").click()
    page.locator(revoke).click()
    assert page.get_by_role("heading", name=re.compile("Revoke this key")).is_visible()
    page.get_by_role("link", name="No, go back").click()
    assert chat(node, key).status_code == 200  # not revoked
    page.locator("details", has=page.locator(revoke)).locator("summary").click()
    page.locator(revoke).click()
    page.get_by_role("button", name="Yes, revoke the key").click()
    assert "revoked" in page.locator(".flash").inner_text()
    assert chat(node, key).status_code == 401

    page.get_by_role("button", name="Suspend account").click()
    assert page.get_by_role("heading", name=re.compile("Suspend this account")).is_visible()
    page.get_by_role("button", name="Yes, suspend the account").click()
    assert accounts.show(busy["client"], account_id)["suspended"]

    before = accounts.show(busy["client"], account_id)["balance_micro"]
    page.locator("#adjust-amount").fill("2000000")
    page.locator("#adjust-note").fill("goodwill")
    page.get_by_role("button", name="Record adjustment").click()
    assert page.get_by_role("heading", name=re.compile("large adjustment")).is_visible()
    assert accounts.show(busy["client"], account_id)["balance_micro"] == before  # nothing yet
    form = page.locator("form[action$='/adjustments']")
    fields = form.evaluate("f => Object.fromEntries(new FormData(f))")  # the confirmed form as sent
    assert fields["confirmed"] == "1" and fields["ref"].startswith("console-")
    page.get_by_role("button", name="Yes, record the adjustment").click()
    assert "recorded" in page.locator(".flash").first.inner_text()
    again = page.request.post(form_action(page, account_id), form=fields)  # the same confirmation twice
    assert again.ok and "already recorded" in again.text()
    assert accounts.show(busy["client"], account_id)["balance_micro"] == before + money.parse_toman("2000000")
    s.close()


def form_action(page, account_id: str) -> str:
    return f"/admin/accounts/{account_id}/adjustments"
