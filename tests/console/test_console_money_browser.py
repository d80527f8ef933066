"""No sequence of browser actions moves money twice: each one of them, in a real Chromium,
against a real node, with the wallet and the transaction list read from the store after each.

A money form's idempotency ref is bound to its page's address (`?op=`), so whatever brings
the same page back (Back, a reload, a restored tab, the same link opened in two tabs) brings
the same ref, and the money layer answers a second submission with the first transaction. An
operator who means a second identical top-up says so: "Make another top-up" opens a fresh form.
"""
from __future__ import annotations

import re
from decimal import Decimal

from tests.console_kit import admin_token
from tests.gateway import seed
from tests.load_kit import sync_client, wallet
from tests.console.test_console_browser import Console, browser, console, sync_api  # noqa: F401 (fixtures)
from upgate.services import transactions
from upgate.store import connection as store

expect = sync_api.expect
OPENING = "1000"


def assert_money(redis_url: str, account_id: str, *credits: tuple[str, str]) -> None:
    """The account holds its opening and exactly these (kind, amount) transactions, oldest
    first, and its balance is their sum: nothing more was credited."""
    listed = transactions.list_transactions(store.connect_sync(redis_url), account_id)
    expected = [("opening", OPENING), *credits]
    assert [(t["kind"], Decimal(t["amount_toman"])) for t in reversed(listed)] == [
        (k, Decimal(a)) for k, a in expected]
    balance, _held = wallet(sync_client(redis_url), account_id)
    assert Decimal(balance) / 10**6 == sum(Decimal(a) for _, a in expected)


def open_account(console, redis_url: str, phone: str = "09121234567"):
    _key, account_id, _kid = seed(redis_url, balance=OPENING, phone=phone)
    c = console()
    c.sign_in(admin_token(redis_url), then=f"/admin/accounts/{account_id}")
    return c, account_id


def top_up(page, amount: str, outcome: str = "recorded") -> None:
    """Fill the amount (unless the browser restored it) and submit the top-up form."""
    form = page.locator("#topup form")
    field = form.get_by_label("Amount (toman)")
    if field.input_value() != amount:
        field.fill(amount)
    with page.expect_navigation():
        form.get_by_role("button", name="Record top-up").click()
    expect(page.locator(".flash").first).to_contain_text(outcome)


def first_topup(redis_url: str, account_id: str) -> dict:
    return next(t for t in transactions.list_transactions(store.connect_sync(redis_url), account_id)
                if t["kind"] == "topup")


def test_back_and_submitting_the_refilled_form_again_credits_once(console, redis_url):
    c, account_id = open_account(console, redis_url)
    page = c.page
    top_up(page, "2500")
    assert_money(redis_url, account_id, ("topup", "2500"))

    page.go_back()  # the page before the top-up, its form as the browser restores it
    top_up(page, "2500", outcome="already recorded")
    tx = first_topup(redis_url, account_id)
    expect(page.locator("#topup .flash")).to_contain_text(tx["id"])  # which transaction, and when
    assert_money(redis_url, account_id, ("topup", "2500"))

    page.go_back()  # and once more, from the replay's answer
    top_up(page, "2500", outcome="already recorded")
    assert_money(redis_url, account_id, ("topup", "2500"))


def test_a_deliberate_second_identical_top_up_is_made_knowingly(console, redis_url):
    c, account_id = open_account(console, redis_url)
    page = c.page
    top_up(page, "2500")
    page.go_back()
    top_up(page, "2500", outcome="already recorded")
    assert_money(redis_url, account_id, ("topup", "2500"))
    c.shoot("account-replayed")  # tests/.screenshots/: the replay's answer at its form

    with page.expect_navigation():
        page.get_by_role("link", name="Make another top-up").click()
    assert page.locator("#topup").get_by_label("Amount (toman)").input_value() == ""  # a fresh form
    top_up(page, "2500")
    assert_money(redis_url, account_id, ("topup", "2500"), ("topup", "2500"))
    assert c.balance() == Decimal(OPENING) + 5000
    assert page.locator("#statement tbody tr", has_text="topup").count() == 2


def test_reload_after_the_post_credits_once(console, redis_url):
    c, account_id = open_account(console, redis_url)
    page = c.page
    top_up(page, "2500")
    page.reload()  # the answer to the POST (its redirect's page)
    page.reload()
    assert_money(redis_url, account_id, ("topup", "2500"))
    assert c.balance() == Decimal(OPENING) + 2500

    # Back, and the form refused (a page that is itself the answer to a POST): reloading it
    # sends that POST again where the browser does, and a corrected form is still a replay
    page.go_back()
    form = page.locator("#topup form")
    form.get_by_label("Amount (toman)").fill("2500")
    form.get_by_label("Note (optional)").fill("bad\tnote")  # refused: a control character
    with page.expect_navigation():
        form.get_by_role("button", name="Record top-up").click()
    expect(page.locator("#topup .flash.error")).to_contain_text("note")
    posts: list[str] = []
    page.on("request", lambda r: r.method == "POST" and posts.append(r.url))
    page.reload()
    expect(page.locator("#topup .flash.error")).to_contain_text("note")
    assert posts  # (headless Chromium resubmits a POST on reload without asking)
    assert_money(redis_url, account_id, ("topup", "2500"))
    page.locator("#topup form").get_by_label("Note (optional)").fill("")
    top_up(page, "2500", outcome="already recorded")
    assert_money(redis_url, account_id, ("topup", "2500"))


def test_a_restored_tab_credits_once(console, browser, redis_url, node):
    c, account_id = open_account(console, redis_url)
    page = c.page
    address = page.url  # the tab's address while its form is filled in
    top_up(page, "2500")
    assert_money(redis_url, account_id, ("topup", "2500"))

    # the tab is closed and opened again at that address (a restored tab, or the address
    # taken from the history): its form is the same form
    page.close()
    again = c.page = c.context.new_page()
    again.goto(address)
    top_up(again, "2500", outcome="already recorded")
    assert_money(redis_url, account_id, ("topup", "2500"))

    # the browser restarted, restoring its session (cookies and the tab's address)
    restored = Console(browser, node)
    restored.context.add_cookies(c.context.cookies())
    try:
        restored.page.goto(address)
        top_up(restored.page, "2500", outcome="already recorded")
    finally:
        restored.close()
    assert_money(redis_url, account_id, ("topup", "2500"))


def test_two_tabs_opened_from_one_page_credit_once(console, redis_url):
    c, account_id = open_account(console, redis_url, phone="09125550101")
    page = c.page
    page.goto("/admin/accounts?q=09125550101")
    tabs = []
    for _ in range(2):  # the search result opened in two new tabs (a middle click each)
        with c.context.expect_page() as opened:
            page.get_by_role("link", name=account_id).click(modifiers=["Control"])
        tabs.append(opened.value)
        tabs[-1].wait_for_load_state()
    top_up(tabs[0], "2500")
    top_up(tabs[1], "2500", outcome="already recorded")
    assert_money(redis_url, account_id, ("topup", "2500"))

    # the account page itself, its address opened in a second tab (a duplicated tab)
    page.goto(f"/admin/accounts/{account_id}")
    twin = c.context.new_page()
    twin.goto(page.url)
    top_up(page, "700")
    top_up(twin, "700", outcome="already recorded")
    assert_money(redis_url, account_id, ("topup", "2500"), ("topup", "700"))


def test_a_double_click_credits_once(console, redis_url):
    c, account_id = open_account(console, redis_url)
    page = c.page
    form = page.locator("#topup form")
    form.get_by_label("Amount (toman)").fill("2500")
    form.get_by_role("button", name="Record top-up").dblclick()
    page.wait_for_url(re.compile(r".*#topup$"))
    page.wait_for_load_state()
    # the second click sends the form again and the browser may abort the first POST's
    # navigation for it (how soon depends on the machine): that is the double click, not a fault
    assert_money(redis_url, account_id, ("topup", "2500"))
    # ... or the navigation to the account page the first POST redirected to (checked last: the
    # abort may be reported while the money is read)
    c.errors[:] = [e for e in c.errors if not (("/topups: " in e or f"/admin/accounts/{account_id}?op=" in e)
                                               and e.endswith("net::ERR_ABORTED"))]


def test_the_adjustment_form_survives_back_and_resubmit(console, redis_url):
    c, account_id = open_account(console, redis_url)
    page = c.page
    form = page.locator("#adjust form")
    form.get_by_label("Amount (toman)").fill("-300")
    form.get_by_label("Note").fill("refund of a double charge")
    with page.expect_navigation():
        form.get_by_role("button", name="Record adjustment").click()
    expect(page.locator(".flash").first).to_contain_text("recorded")
    page.go_back()
    form = page.locator("#adjust form")
    form.get_by_label("Amount (toman)").fill("-300")
    form.get_by_label("Note").fill("refund of a double charge")
    with page.expect_navigation():
        form.get_by_role("button", name="Record adjustment").click()
    expect(page.locator("#adjust .flash")).to_contain_text("already recorded")
    assert_money(redis_url, account_id, ("adjustment", "-300"))
    with page.expect_navigation():
        page.get_by_role("link", name="Make another adjustment").click()
    assert page.locator("#adjust").get_by_label("Amount (toman)").input_value() == ""

