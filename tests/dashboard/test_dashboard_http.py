"""The dashboard over plain HTTP against real gateway nodes: the attacks of issue 29 and the
cookie, XSRF and body rules of CUSTOMERS.md. The browser suite (test_dashboard_browser.py)
drives the pages themselves."""
from __future__ import annotations

import statistics
import time

import httpx
import pytest

from tests.dashboard_kit import SmsLog, ask_code, send_code, signed_in, xsrf
from tests.gateway import seed
from upgate.i18n import numbers
from upgate.services import accounts, keys
from upgate.store import connection as store

A, B = "+989121234567", "+989351234567"


@pytest.fixture
def sms():
    with SmsLog() as log:
        yield log


@pytest.fixture
def two(redis_url):
    """Two accounts, each with a key: (key, account id, key id) for A and for B."""
    return seed(redis_url, phone=A, balance="100000"), seed(redis_url, phone=B, balance="100000")


def _cookie(resp: httpx.Response, name: str) -> str:
    return next(h for h in resp.headers.get_list("set-cookie") if h.startswith(name + "="))


def test_pages_without_a_session_redirect_to_the_sign_in_form(node):
    for path in ("/dashboard/", "/dashboard/keys", "/dashboard/usage?month=1405-01", "/dashboard/requests",
                 "/dashboard/billing", "/dashboard/topup", "/dashboard/billing/statement.csv"):
        r = httpx.get(node.url + path, follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"].startswith("/dashboard/login?next="), path
    page = httpx.get(node.url + "/dashboard/login")
    assert page.status_code == 200 and 'lang="fa" dir="rtl"' in page.text and 'name="phone"' in page.text


@pytest.mark.serial  # it measures time: nothing else may run meanwhile (tests/parallel.py)
def test_enumeration_same_answer_and_similar_time(node, sms, redis_url):
    """Known and unknown phones get the same page; the unknown one waits as long as recent real
    sends took (here the log driver: both are quick), so time tells nothing either."""
    client = store.connect_sync(redis_url)
    known, unknown = [], []
    answers = set()
    for i in range(6):
        for phone, bucket in ((f"+98912100{i:04d}", known), (f"+98935100{i:04d}", unknown)):
            if bucket is known:
                accounts.create_account(client, phone)
            c = httpx.Client(base_url=node.url, follow_redirects=False, timeout=30)
            form = c.get("/dashboard/login")
            started = time.monotonic()
            r = c.post("/dashboard/login", data={"phone": phone, "_xsrf": xsrf(form.text)})
            bucket.append(time.monotonic() - started)
            answers.add((r.status_code, r.text.replace(phone, "PHONE").replace(numbers.localize(phone, "fa"), "PHONE").split("<main")[1]
                         .replace(xsrf(r.text), "X")))
    assert len(answers) == 1, answers  # the same page, whether the phone has an account or not
    assert abs(statistics.median(known) - statistics.median(unknown)) < 0.25


def test_brute_force_past_five_tries_and_code_reuse(node, sms, two):
    c = httpx.Client(base_url=node.url, follow_redirects=False, timeout=30)
    page = ask_code(c, A)
    code = sms.code_for(A)
    wrong = f"{(int(code) + 1) % 10 ** 6:06d}"
    for _ in range(5):
        r = send_code(c, A, wrong, page)
        assert r.status_code == 400 and "upgate_dash" not in r.headers.get("set-cookie", "")
    r = send_code(c, A, code, page)  # the right one, sixth: refused
    assert r.status_code == 400 and "upgate_dash" not in r.headers.get("set-cookie", "")

    c2 = httpx.Client(base_url=node.url, follow_redirects=False, timeout=30)
    page = ask_code(c2, B)
    code = sms.code_for(B)
    assert send_code(c2, B, code, page).status_code == 303
    again = httpx.Client(base_url=node.url, follow_redirects=False, timeout=30)
    form = again.get("/dashboard/login")
    assert send_code(again, B, code, form).status_code == 400  # used once, never again


def test_idor_another_accounts_key_and_request_are_plain_404s(node, sms, two, mock):
    (key_a, acct_a, kid_a), (key_b, acct_b, kid_b) = two
    import openai
    raw = openai.OpenAI(base_url=node.base, api_key=key_b).chat.completions.with_raw_response.create(
        model="mock/chat-1", messages=[{"role": "user", "content": "hi"}])
    rid_b = raw.headers["x-svc-request-id"]
    c = signed_in(node, sms, A)
    page = c.get("/dashboard/keys")
    token = xsrf(page.text)
    for target in (kid_b, "0123456789abcdef"):  # B's key, and a key that does not exist
        for verb in ("update", "revoke"):
            r = c.post(f"/dashboard/keys/{target}/{verb}", data={"_xsrf": token, "rate_limit_rpm": "7"})
            assert r.status_code == 404, (target, verb)
    other, missing = (c.get("/dashboard/requests", params={"id": rid}) for rid in (rid_b, "req_" + "0" * 24))
    assert other.status_code == missing.status_code == 404
    assert other.text.replace(rid_b, "ID").split("<main")[1] == \
        missing.text.replace("req_" + "0" * 24, "ID").split("<main")[1]
    b_key = keys.find_key(store.connect_sync(node.settings.redis_url), kid_b)
    assert b_key["state"] == "active" and b_key["rpm"] != 7  # untouched


def test_xsrf_on_every_form(node, sms, two):
    c = signed_in(node, sms, A)
    for path in ("/dashboard/keys", "/dashboard/logout", "/dashboard/login", "/dashboard/login/verify",
                 f"/dashboard/keys/{two[0][2]}/revoke"):
        r = c.post(path, data={"name": "x", "phone": A, "code": "123456"})
        assert r.status_code == 403, path
        r = c.post(path, data={"_xsrf": "2|00|forged|1", "name": "x"})
        assert r.status_code == 403, path
    assert c.get("/dashboard/keys").status_code == 200  # the session still stands; nothing changed
    assert len(keys.list_keys(store.connect_sync(node.settings.redis_url), two[0][1])) == 1


def test_credential_and_size_before_the_body(node, sms, two):
    """upgate/handlers/guard.py's rule: the session first, then the declared size, and only then
    any of the body."""
    big = "x" * (64 * 1024)
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    r = httpx.post(node.url + "/dashboard/keys", content=big, follow_redirects=False, headers=form)
    assert r.status_code == 303  # no session: sent to sign in, the body never read
    c = signed_in(node, sms, A)
    assert c.post("/dashboard/keys", content=big, headers=form).status_code == 413  # declared too large

    def chunks():
        for _ in range(64):
            yield b"name=" + b"x" * 1024 + b"&"
    r = c.post("/dashboard/keys", content=chunks(), headers=form)
    assert r.status_code == 413  # no Content-Length (chunked): counted as it arrives
    assert len(keys.list_keys(store.connect_sync(node.settings.redis_url), two[0][1])) == 1


def test_session_ends_on_every_node_at_sign_out(make_node, sms, two):
    a, b = make_node(), make_node()
    c = signed_in(a, sms, A)
    sid = c.cookies.get("upgate_dash")
    on_b = httpx.Client(base_url=b.url, follow_redirects=False, cookies={"upgate_dash": sid})
    assert on_b.get("/dashboard/keys").status_code == 200  # one session, any node
    page = c.get("/dashboard/")
    r = c.post("/dashboard/logout", data={"_xsrf": xsrf(page.text)})
    assert r.status_code == 303 and 'upgate_dash=""' in r.headers["set-cookie"]
    r = on_b.get("/dashboard/keys")
    assert r.status_code == 303 and r.headers["location"].startswith("/dashboard/login")


def test_cookies_httponly_lax_and_secure_behind_https(node, sms, two):
    c = httpx.Client(base_url=node.url, follow_redirects=False, headers={"X-Forwarded-Proto": "https"})
    seen = len(sms.lines)
    form = c.get("/dashboard/login")
    assert "Secure" in _cookie(form, "_xsrf") and "SameSite=Strict" in _cookie(form, "_xsrf")
    cookie = _cookie(form, "_xsrf").split(";")[0]
    page = c.post("/dashboard/login", data={"phone": A, "_xsrf": xsrf(form.text)}, headers={"Cookie": cookie})
    r = c.post("/dashboard/login/verify", data={"phone": A, "code": sms.code_for(A, after=seen),
                                                "_xsrf": xsrf(page.text)}, headers={"Cookie": cookie})
    assert r.status_code == 303
    session = _cookie(r, "upgate_dash")
    for flag in ("HttpOnly", "SameSite=Lax", "Secure", "Path=/dashboard"):
        assert flag in session, (flag, session)
    from email.utils import parsedate_to_datetime
    expires = parsedate_to_datetime(session.split("expires=")[1].split(";")[0]).timestamp()
    assert abs(expires - time.time() - 7 * 86400) < 120


def test_language_switch_is_remembered(node, sms, two):
    c = signed_in(node, sms, A)
    assert 'lang="fa" dir="rtl"' in c.get("/dashboard/").text
    r = c.get("/dashboard/keys?lang=en")
    assert 'lang="en" dir="ltr"' in r.text and "upgate_lang=en" in r.headers["set-cookie"]
    assert 'lang="en" dir="ltr"' in c.get("/dashboard/usage").text  # remembered
    assert 'lang="fa" dir="rtl"' in c.get("/dashboard/usage?lang=fa").text


def test_suspended_accounts_see_everything_and_change_nothing(node, sms, two):
    client = store.connect_sync(node.settings.redis_url)
    accounts.suspend(client, two[0][1])
    c = signed_in(node, sms, A)  # they can sign in
    for path in ("/dashboard/", "/dashboard/keys", "/dashboard/usage", "/dashboard/billing", "/dashboard/topup"):
        assert c.get(path).status_code == 200, path
    page = c.get("/dashboard/keys")
    token = xsrf(page.text)
    assert c.post("/dashboard/keys", data={"_xsrf": token, "name": "new"}).status_code == 403
    assert c.post(f"/dashboard/keys/{two[0][2]}/revoke", data={"_xsrf": token}).status_code == 403
    assert [k["state"] for k in keys.list_keys(client, two[0][1])] == ["active"]


def test_topup_url_is_the_dashboards_top_up_page_unless_the_operator_set_one():
    from upgate.settings import from_env

    env = {"UPGATE_PUBLIC_URL": "https://api.example.ir/", "UPGATE_KEY_PEPPER": "p"}
    assert from_env(env).topup_url == "https://api.example.ir/dashboard/topup"
    assert from_env({**env, "UPGATE_TOPUP_URL": "https://pay.example.ir"}).topup_url == "https://pay.example.ir"


def test_throttles_per_phone_and_per_address(make_node, sms, two):
    node = make_node(trusted_proxies="127.0.0.1")  # the address is X-Forwarded-For's, as behind a router
    c = httpx.Client(base_url=node.url, follow_redirects=False, timeout=30)

    def ask(phone: str, address: str) -> httpx.Response:
        form = c.get("/dashboard/login")
        return c.post("/dashboard/login", data={"phone": phone, "_xsrf": xsrf(form.text)},
                      headers={"X-Forwarded-For": address})

    assert ask(A, "198.51.100.1").status_code == 200
    again = ask(A, "198.51.100.2")  # the same phone from elsewhere, within the minute
    assert again.status_code == 429 and 'name="code"' not in again.text
    for i in range(19):  # the first address's other 19 asks (unknown phones: answered alike)
        assert ask(f"+98935200{i:04d}", "198.51.100.1").status_code == 200, i
    refused = ask("+989352009999", "198.51.100.1")
    assert refused.status_code == 429 and 'name="code"' not in refused.text
    assert ask("+989352009999", "198.51.100.3").status_code == 200  # another address may
