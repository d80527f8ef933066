"""The console over plain HTTP against a real gateway node: sign-in, the session cookie's
flags, XSRF on every form (and not on the Bearer-token APIs), sessions that end with the
token or with sign-out. The browser suite (test_console_browser.py) drives the pages."""
from __future__ import annotations

import re

import httpx

from tests.console_kit import admin_token, signed_in, xsrf
from tests.gateway import PEPPER, seed
from tests.load_kit import wait_for
from upgate import i18n
from upgate.services import admin_tokens
from upgate.store import connection as store


def _cookie_header(resp: httpx.Response, name: str) -> str:
    return next(h for h in resp.headers.get_list("set-cookie") if h.startswith(name + "="))


def test_a_page_without_a_session_redirects_to_the_sign_in_form(node):
    for path in ("/admin/", "/admin/accounts?q=0912", "/admin/models", "/admin/accounts/x"):
        r = httpx.get(node.url + path, follow_redirects=False)
        assert r.status_code == 303, path
        assert r.headers["location"].startswith("/admin/login?next=")
    login = httpx.get(node.url + "/admin/login")
    assert login.status_code == 200
    assert 'type="password"' in login.text and 'name="token"' in login.text


def test_session_cookie_flags_and_no_token_inside(node, redis_url):
    token = admin_token(redis_url)
    c = httpx.Client(base_url=node.url, follow_redirects=False)
    form = c.get("/admin/login")
    r = c.post("/admin/login", data={"token": token, "_xsrf": xsrf(form.text)})
    cookie = _cookie_header(r, "upgate_console")
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/admin" in cookie
    assert "Secure" not in cookie  # plain http: a Secure cookie would never come back
    assert token not in cookie and token[4:] not in cookie
    assert all(token.encode() not in v for v in store.connect_sync(redis_url).mget(
        store.connect_sync(redis_url).keys("console:*")))
    # 12 hours: Tornado writes the expiry as an HTTP date
    from email.utils import parsedate_to_datetime
    import time
    expires = parsedate_to_datetime(cookie.split("expires=")[1].split(";")[0]).timestamp()
    assert abs(expires - time.time() - 12 * 3600) < 120


def test_cookies_are_secure_behind_an_https_router(node, redis_url):
    token = admin_token(redis_url)
    https = {"X-Forwarded-Proto": "https"}
    c = httpx.Client(base_url=node.url, follow_redirects=False, headers=https)
    form = c.get("/admin/login")
    cookie = _cookie_header(form, "_xsrf")
    assert "Secure" in cookie
    # httpx keeps a Secure cookie off plain http, as a browser would: hand it over as the
    # browser behind the router (which speaks https to it) would send it
    r = c.post("/admin/login", data={"token": token, "_xsrf": xsrf(form.text)},
               headers={"Cookie": cookie.split(";")[0]})
    assert r.status_code == 303
    assert "Secure" in _cookie_header(r, "upgate_console")


def test_a_wrong_token_is_refused_without_a_session(node, redis_url):
    admin_token(redis_url)
    c = httpx.Client(base_url=node.url, follow_redirects=False)
    form = c.get("/admin/login")
    r = c.post("/admin/login", data={"token": "upa_" + "x" * 40, "_xsrf": xsrf(form.text)})
    assert r.status_code == 401 and "not accepted" in r.text
    assert not any(h.startswith("upgate_console=") for h in r.headers.get_list("set-cookie"))


def test_forged_posts_without_the_xsrf_token_are_refused(node, redis_url):
    _key, account_id, _kid = seed(redis_url)
    c = signed_in(node, admin_token(redis_url))
    before = len(c.get(f"/admin/accounts/{account_id}", follow_redirects=True).text)
    for path, form in ((f"/admin/accounts/{account_id}/keys", {"name": "forged"}),
                       (f"/admin/accounts/{account_id}/suspend", {}),
                       ("/admin/logout", {})):
        r = c.post(path, data=form)
        assert r.status_code == 403, path
        r = c.post(path, data={**form, "_xsrf": "2|00000000|" + "0" * 32 + "|1"})
        assert r.status_code == 403, path
    page = c.get(f"/admin/accounts/{account_id}", follow_redirects=True)
    assert page.status_code == 200 and "forged" not in page.text and "suspended" not in page.text
    assert abs(len(page.text) - before) < 200  # fresh refs and tokens only


def test_the_bearer_apis_take_no_xsrf_token(node, redis_url):
    """XSRF is the console's own check, not Tornado's application-wide one: a POST with a
    Bearer key (/v1) or admin token (/admin/v1) and no cookie at all still goes through."""
    key, _account_id, _kid = seed(redis_url)
    r = httpx.post(node.base + "/chat/completions", headers={"Authorization": f"Bearer {key}"},
                   json={"model": "mock/chat-1", "messages": [{"role": "user", "content": "hi"}],
                         "max_tokens": 4}, timeout=30)
    assert r.status_code == 200, r.text
    admin = admin_token(redis_url)
    r = httpx.post(node.url + "/admin/v1/accounts", headers={"Authorization": f"Bearer {admin}"},
                   json={"phone": "09121110000"}, timeout=30)
    assert r.status_code == 201, r.text


def test_sign_out_ends_the_session_even_for_a_copied_cookie(node, redis_url):
    c = signed_in(node, admin_token(redis_url))
    copied = dict(c.cookies)
    assert c.get("/admin/").status_code == 200
    r = c.post("/admin/logout", data={"_xsrf": xsrf(c.get("/admin/").text)})
    assert r.status_code == 303 and r.headers["location"] == "/admin/login"
    again = httpx.get(node.url + "/admin/", cookies=copied, follow_redirects=False)
    assert again.status_code == 303 and again.headers["location"].startswith("/admin/login")


def test_a_revoked_token_ends_its_session_on_the_next_request(node, redis_url):
    c = signed_in(node, admin_token(redis_url, "temp"))
    assert c.get("/admin/models").status_code == 200
    admin_tokens.revoke(store.connect_sync(redis_url), "temp")
    r = c.get("/admin/models")
    assert r.status_code == 303 and r.headers["location"].startswith("/admin/login")


def test_read_only_sessions_are_refused_every_write(node, redis_url):
    _key, account_id, key_id = seed(redis_url)
    c = signed_in(node, admin_token(redis_url, "viewer", read_only=True))
    page = c.get(f"/admin/accounts/{account_id}", follow_redirects=True)
    assert page.status_code == 200 and "read-only" in page.text
    assert "Record top-up" not in page.text and "Create key" not in page.text
    token = xsrf(page.text)
    for path, form in ((f"/admin/accounts/{account_id}/keys", {"name": "nope"}),
                       (f"/admin/accounts/{account_id}/keys/{key_id}/revoke", {}),
                       (f"/admin/accounts/{account_id}/topups", {"amount_toman": "5", "ref": "r1"}),
                       (f"/admin/accounts/{account_id}/suspend", {})):
        r = c.post(path, data={**form, "_xsrf": token})
        assert r.status_code == 403, path
    listed = c.get(f"/admin/accounts/{account_id}", follow_redirects=True).text
    assert "nope" not in listed and "revoked" not in listed


def test_next_never_leaves_the_console(node, redis_url):
    token = admin_token(redis_url)
    c = httpx.Client(base_url=node.url, follow_redirects=False)
    form = c.get("/admin/login")
    for target in ("https://evil.example/", "//evil.example/admin/", "/v1/models"):
        r = c.post("/admin/login", data={"token": token, "_xsrf": xsrf(form.text), "next": target})
        assert r.headers["location"] == "/admin/"


def test_a_hostile_next_lands_on_the_overview_and_a_console_path_is_kept(node, redis_url):
    """`next` is only a local /admin/ path: a CR or LF (a split Location header), a step out of
    /admin/ (also percent-encoded, which browsers resolve), a backslash or a space → /admin/."""
    token = admin_token(redis_url)
    c = httpx.Client(base_url=node.url, follow_redirects=False)
    for target, lands in (("/admin/\r\nSet-Cookie: evil=1", "/admin/"), ("/admin/x\nLocation: //evil", "/admin/"),
                          ("/admin/../v1/models", "/admin/"), ("/admin/%2e%2e/v1/models", "/admin/"),
                          ("/admin/\\evil.example", "/admin/"), ("/admin/a b", "/admin/"),
                          ("/admin/accounts?q=0912&x=%0d%0a", "/admin/accounts?q=0912&x=%0d%0a")):
        assert c.get("/admin/login", params={"next": target}).status_code == 200
        form = c.get("/admin/login")
        r = c.post("/admin/login", data={"token": token, "_xsrf": xsrf(form.text), "next": target})
        assert (r.status_code, r.headers.get("location")) == (303, lands), repr(target)
        assert "evil" not in str(r.headers)


def test_refused_money_forms_show_the_money_layers_message_and_write_nothing(node, redis_url):
    from upgate.services import transactions

    _key, account_id, _kid = seed(redis_url, balance="1000")
    c = signed_in(node, admin_token(redis_url))
    url = f"/admin/accounts/{account_id}"
    token = xsrf(c.get(url, follow_redirects=True).text)
    r = c.post(url + "/topups", data={"_xsrf": token, "amount_toman": "12.1234567", "ref": "pay-1", "note": "kept"})
    assert r.status_code == 400
    assert "six fractional digits" in r.text and 'value="kept"' in r.text and 'value="pay-1"' in r.text
    r = c.post(url + "/adjustments", data={"_xsrf": token, "amount_toman": "-5", "ref": "adj-1", "note": ""})
    assert r.status_code == 400
    assert transactions.list_transactions(store.connect_sync(redis_url), account_id)[0]["kind"] == "opening"

    assert c.post(url + "/topups", data={"_xsrf": token, "amount_toman": "50", "ref": "pay-2"}).status_code == 303
    r = c.post(url + "/topups", data={"_xsrf": token, "amount_toman": "60", "ref": "pay-2"})
    assert r.status_code == 409  # the ref is taken by another amount: the money layer's refusal
    done = transactions.list_transactions(store.connect_sync(redis_url), account_id)
    assert [(t["kind"], t["amount_toman"], t["actor"]) for t in done] == [
        ("topup", "50.000000", "ops"), ("opening", "1000.000000", "cli")]


def test_statement_csv_download(node, redis_url):
    from upgate.billing import jalali

    _key, account_id, _kid = seed(redis_url, balance="1000")
    c = signed_in(node, admin_token(redis_url))
    r = c.get(f"/admin/accounts/{account_id}/statement.csv")
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/csv")
    assert f'statement-{account_id}-{jalali.month_key()}.csv' in r.headers["Content-Disposition"]
    assert "1000.000000" in r.text
    assert c.get(f"/admin/accounts/{account_id}/statement.csv?month=1405-13").status_code == 400


def test_statement_csv_download_neutralises_cells_a_spreadsheet_would_run(node, redis_url):
    import csv
    import io

    _key, account_id, _kid = seed(redis_url, balance="1000")
    c = signed_in(node, admin_token(redis_url))
    url = f"/admin/accounts/{account_id}"
    token = xsrf(c.get(url, follow_redirects=True).text)  # the page answers at its ?op= address
    assert c.post(url + "/topups", data={"_xsrf": token, "amount_toman": "50", "ref": "=HYPERLINK(1)",
                                         "note": "+cmd"}).status_code == 303
    assert c.post(url + "/adjustments", data={"_xsrf": token, "amount_toman": "-5", "ref": "@x",
                                              "note": "-2+3"}).status_code == 303
    rows = {r["kind"]: r for r in csv.DictReader(io.StringIO(c.get(url + "/statement.csv").text))}
    assert (rows["topup"]["ref"], rows["topup"]["note"]) == ("'=HYPERLINK(1)", "'+cmd")
    assert (rows["adjustment"]["ref"], rows["adjustment"]["note"]) == ("'@x", "'-2+3")
    assert rows["adjustment"]["amount_toman"] == "-5.000000"


def test_console_writes_are_in_the_admin_log_under_the_tokens_name(node, redis_url):
    import json

    from upgate.services import admin_log

    _key, account_id, _kid = seed(redis_url)
    c = signed_in(node, admin_token(redis_url, "alice"))
    url = f"/admin/accounts/{account_id}"
    token = xsrf(c.get(url, follow_redirects=True).text)
    r = c.post(url + "/topups", data={"_xsrf": token, "amount_toman": "50", "ref": "pay-9", "note": "card"})
    assert r.status_code == 303
    r = c.post(url + "/keys", data={"_xsrf": token, "name": "k1"})
    assert r.status_code == 201
    full = r.text.split('id="newkey"')[1].split(">")[1].split("<")[0]
    assert full.startswith("sk-up-")
    entries = admin_log.read(store.connect_sync(redis_url), 10)
    assert [(e["actor"], e["action"], e["target"]) for e in entries[:2]] == [
        ("alice", "key.create", account_id),
        ("alice", "account.topup", account_id)]
    top = entries[1]  # recorded by the top-up itself: the balance before and after, the note
    assert {k: top["detail"][k] for k in ("amount_toman", "ref")} == {"amount_toman": "50.000000", "ref": "pay-9"}
    assert (top["note"], top["replay"], top["after"]) == ("card", False, {"balance_toman": "1050.000000"})
    assert top["before"] == {"balance_toman": "1000.000000"}
    assert full[6:] not in json.dumps(entries)  # the new key is in the page, never in the log


def test_failed_sign_ins_are_throttled_per_address(node, redis_url):
    token = admin_token(redis_url)
    c = httpx.Client(base_url=node.url, follow_redirects=False)
    form = xsrf(c.get("/admin/login").text)
    codes = [c.post("/admin/login", data={"token": "upa_" + "x" * 40, "_xsrf": form}).status_code
             for _ in range(11)]
    assert codes[:10] == [401] * 10 and codes[10] == 429
    r = c.post("/admin/login", data={"token": "upa_" + "x" * 40, "_xsrf": form})
    assert r.status_code == 429 and int(r.headers["Retry-After"]) > 0
    # failures are throttled, not owners: the right token signs in from the same address
    r = c.post("/admin/login", data={"token": token, "_xsrf": form, "next": "/admin/"})
    assert r.status_code == 303 and r.headers["location"] == "/admin/", r.text
    assert c.get("/admin/").status_code == 200


def test_the_overview_shows_the_management_apis_numbers(node, redis_url):
    key, _account_id, _kid = seed(redis_url, balance="1000")
    r = httpx.post(node.base + "/chat/completions", headers={"Authorization": f"Bearer {key}"},
                   json={"model": "mock/chat-1", "messages": [{"role": "user", "content": "hi"}],
                         "max_tokens": 4}, timeout=30)
    assert r.status_code == 200
    admin = admin_token(redis_url, "dash")
    api = httpx.get(node.url + "/admin/v1/overview", headers={"Authorization": f"Bearer {admin}"}).json()
    page = signed_in(node, admin).get("/admin/").text
    fmt = i18n.Formatter("en")  # the dashboard's and the console's one formatter
    totals = api["totals"]
    assert totals["requests"] == 1
    for label, value in (("Requests", fmt.count(totals["requests"])), ("Charges", fmt.toman(totals["charges_toman"])),
                         ("Top-ups", fmt.toman(totals["topups_toman"]))):
        assert re.search(f"<dt>{label}</dt><dd><span [^>]*>{re.escape(value)}</span></dd>", page), label


def test_cold_models_are_shown_on_the_overview_and_the_models_page(node, redis_url):
    for _ in range(node.settings.cooldown_strikes):  # the third throttle in a row makes it cold
        node.thread.run(node.ctx.ledger.cooldown_strike("mock/chat-big"))
    c = signed_in(node, admin_token(redis_url))
    overview = c.get("/admin/").text
    assert '<bdi dir="ltr">mock/chat-big</bdi> — cold for' in overview
    models = c.get("/admin/models").text
    # the model's badge in the prices table, and its one route's in the routes table
    assert "1 cold" in models and models.count('class="badge bad">cold') == 2


def test_console_and_admin_requests_are_logged_and_counted_by_route_not_path(node, redis_url):
    """Console pages and management API calls reach the access log and /metrics like client
    requests, labelled by their route (a handler, a path template), never by a path that
    carries an account id (that would grow the metric's labels without limit)."""
    from tests.admin_kit import Admin, make_token
    from tests.test_ops import sample, scrape

    _, acct, _ = seed(redis_url, balance="1000")
    lines = []
    node.ctx.access_log.write = lines.append
    c = signed_in(node, admin_token(redis_url))
    assert c.get(f"/admin/accounts/{acct}", follow_redirects=True).status_code == 200
    c.close()
    assert Admin(node, make_token(redis_url, "api")).get(f"/accounts/{acct}").status_code == 200
    # the line is written in on_finish, on the node's thread, just after the answer went out
    wait_for(lambda: any(x["route"] == "/admin/v1/accounts/{id}" for x in lines), 5, "the API's access line")
    routes = {(x["route"], x["status"]) for x in lines}
    assert ("console:AccountHandler", 200) in routes and ("/admin/v1/accounts/{id}", 200) in routes
    assert not any(acct in x["route"] for x in lines)
    m = scrape(node.url)
    assert sample(m, "upgate_requests_total", route="console:AccountHandler", status="200", code="") >= 1
    assert sample(m, "upgate_requests_total", route="/admin/v1/accounts/{id}", status="200", code="") == 1
    assert not [k for k in m if any(acct in v for _, v in k[1])]


def test_the_suspend_confirmation_counts_only_live_keys_and_carries_the_reason(node, redis_url):
    from upgate.services import keys

    _key, account_id, key_id = seed(redis_url)
    client = store.connect_sync(redis_url)
    keys.create_key(client, PEPPER, account_id, name="second")
    keys.revoke_key(client, key_id, account_id=account_id)  # one of two revoked
    c = signed_in(node, admin_token(redis_url))
    url = f"/admin/accounts/{account_id}?op=0123456789abcdef"
    page = c.get(url).text
    asked = c.post(f"/admin/accounts/{account_id}/suspend",
                   data={"_xsrf": xsrf(page), "op": "0123456789abcdef", "reason": "chargeback"})
    assert asked.status_code == 200
    rows = dict(re.findall(r"<dt>(.*?)</dt>\s*<dd><bdi[^>]*>(.*?)</bdi></dd>", asked.text))
    assert rows["Active keys"] == "1" and rows["Reason"] == "chargeback"
    assert 'name="reason" value="chargeback"' in asked.text  # posted again with the confirmation
