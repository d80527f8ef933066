"""The whole top-up in a real headless Chromium (Debian's `chromium` via Playwright) with the
built-in `fake` gateway: a request refused with 402 → its topup_url → sign in → the top-up form →
the bank page → Pay → the receipt with the new balance → the same request now passes.
On a phone (390 px, Persian) and a desktop (1280 px, English); screenshots of every page go to
tests/.screenshots/ (not committed): look at them after a change to the pages."""
from __future__ import annotations


import pytest

from tests.dashboard_kit import SmsLog
from tests.gateway import seed
from tests.browser_kit import CHROMIUM, SHOTS, browser, need_browser  # noqa: F401 (browser: a fixture)
from upgate.settings import from_env

sync_api = need_browser()
openai = pytest.importorskip("openai")

PHONES = {("fa", 390): "+989121234567", ("en", 1280): "+989351234567"}
FA_DIGITS = str.maketrans("0123456789", "۰۱۲۳۴۵۶۷۸۹")



@pytest.fixture
def node(make_node, monkeypatch):
    """A node whose UPGATE_PUBLIC_URL is its own address (the port is chosen first)."""
    import tests.gateway
    from tests.procs import free_port

    port = free_port()
    monkeypatch.setattr(tests.gateway, "free_port", lambda: port)
    public = f"http://127.0.0.1:{port}"
    return make_node(payments="fake", public_url=public,
                     topup_url=from_env({"UPGATE_PUBLIC_URL": public}).topup_url)


def _chat(node, key):
    return openai.OpenAI(base_url=node.base, api_key=key, max_retries=0).chat.completions.create(
        model="mock/chat-1", messages=[{"role": "user", "content": "Hello"}], max_tokens=50)


@pytest.mark.parametrize("lang,width", list(PHONES))
def test_refused_then_top_up_in_the_browser_then_served(browser, node, redis_url, lang, width):
    SHOTS.mkdir(exist_ok=True)
    phone = PHONES[(lang, width)]
    key, _acct, _ = seed(redis_url, phone=phone, balance="0")
    with pytest.raises(openai.APIStatusError) as refused:
        _chat(node, key)
    assert refused.value.status_code == 402
    topup_url = refused.value.body["svc"]["topup_url"]
    assert topup_url == node.url + "/dashboard/topup"

    context = browser.new_context(viewport={"width": width, "height": 860})
    page, errors = context.new_page(), []
    page.on("pageerror", lambda e: errors.append(str(e)))
    # (Chromium logs the refused form's own 400 as an error: the test asserts that status itself)
    page.on("console", lambda m: m.type == "error" and "status of 400" not in m.text and errors.append(m.text))
    shot = lambda name: page.screenshot(path=str(SHOTS / f"payments-{name}-{lang}-{width}.png"), full_page=True)
    with SmsLog() as sms:
        page.goto(topup_url + f"?lang={lang}")
        assert "/dashboard/login" in page.url
        page.fill("#phone", phone)
        page.click("form button[type=submit]")
        page.fill("#code", sms.code_for(phone))
        page.click("form button[type=submit]")
    page.wait_for_url("**/dashboard/topup**")
    assert page.locator("html").get_attribute("lang") == lang
    assert page.locator("html").get_attribute("dir") == ("rtl" if lang == "fa" else "ltr")
    shot("form")
    page.fill("#amount_toman", "9000")  # below the minimum: refused with the form as typed
    page.click("main form button[type=submit]")
    assert page.locator("[role=alert]").count() == 1 and page.input_value("#amount_toman") == "9000"
    shot("refused")
    page.fill("#amount_toman", "50000")
    page.click("main form button[type=submit]")
    page.wait_for_url("**/dashboard/topup/fake-bank/FAKE*")
    shot("bank")
    page.click("button[value=pay]")
    page.wait_for_url("**/dashboard/topup/ord_*")
    shot("receipt")
    text = page.inner_text("main")
    amount, balance = ("۵۰٬۰۰۰", "۵۰٬۰۰۰") if lang == "fa" else ("50,000", "50,000")
    assert amount in text and ("کیف پول شما شارژ شد" if lang == "fa" else "Your wallet has been credited") in text
    assert page.locator("dl.record dd").count() >= 5  # amount, bank reference, card, date, order, new balance
    page.goto(node.url + "/dashboard/topup")
    shot("history")
    assert ("پرداخت‌شده" if lang == "fa" else "Paid") in page.inner_text("main table")
    assert not errors, errors
    context.close()
    answer = _chat(node, key)  # the request refused with 402 a minute ago now passes
    assert answer.choices[0].message.content


@pytest.mark.parametrize("width", [390, 1280])
def test_console_payments_page_in_the_browser(browser, node, redis_url, width):
    from tests.admin_kit import make_token
    from upgate.payments import service
    from upgate.store import connection as store

    SHOTS.mkdir(exist_ok=True)
    client = store.connect_sync(redis_url)
    _key, acct, _ = seed(redis_url, phone="+989121234567", balance="0")
    paid, _ = service.start(client, node.settings, acct, "30000")
    service.start(client, node.settings, acct, "15000")  # left pending: "Verify now" is offered
    from upgate.payments.gateways import build
    build(node.settings, client).decide(paid["authority"], True)
    context = browser.new_context(viewport={"width": width, "height": 860})
    page = context.new_page()
    page.goto(node.url + "/admin/login?lang=en")
    page.get_by_label("Admin token").fill(make_token(redis_url))
    page.get_by_role("button", name="Sign in").click()
    page.goto(node.url + "/admin/payments")
    assert page.get_by_role("button", name="Verify now").count() == 2
    page.locator("tr", has_text=paid["id"]).get_by_role("button", name="Verify now").click()
    page.wait_for_url("**/admin/payments")
    page.screenshot(path=str(SHOTS / f"payments-console-{width}.png"), full_page=True)
    assert "now paid" in page.inner_text("main") and page.get_by_role("button", name="Verify now").count() == 1
    page.goto(node.url + "/admin/payments?lang=fa")
    page.screenshot(path=str(SHOTS / f"payments-console-fa-{width}.png"), full_page=True)
    page.goto(node.url + "/admin/payments?lang=en")
    page.goto(node.url + f"/admin/accounts/{acct}")
    page.locator("#payments").screenshot(path=str(SHOTS / f"payments-console-account-{width}.png"))
    context.close()
