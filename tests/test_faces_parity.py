"""One object per noun, on every face (OPERATORS.md): an account, a key and a top-up made
through the CLI (Click's runner), the management API (HTTP) and the console (its forms, signed in
as a browser is) come back as the same objects, field by field; the same refusal reads the same
on the three faces. Against one running node and its private redis-server."""
from __future__ import annotations

import html
import json
import re

import pytest
from click.testing import CliRunner

from admin_cli.main import cli
from tests.admin_kit import Admin, make_token
from tests.console_kit import signed_in, xsrf
from tests.gateway import PEPPER

OBJECTS = re.compile(r'<script type="application/json" id="objects">(.*?)</script>', re.S)
REFUSAL = re.compile(r'<p class="flash error" role="alert">(.*?)</p>', re.S)
# what differs between two objects made apart: their ids, phones, times, secrets and authors
OWN = {"id", "account_id", "key_id", "phone", "created_at", "time", "key", "prefix", "last4", "actor", "ref"}
# the CLI's older names, beside the API's (OPERATORS.md): never instead
OLD_ACCOUNT = {"account_id", "phone_masked", "suspended", "free_quota", "free_quota_is_default",
               "free_used_today", "key_count"}


@pytest.fixture
def faces(node, redis_url):
    env = {"UPGATE_REDIS_URL": redis_url, "UPGATE_KEY_PEPPER": PEPPER, "COLUMNS": "200"}

    def cli_json(*args):
        res = CliRunner().invoke(cli, [*args, "--json"], env=env, catch_exceptions=False)
        assert res.exit_code == 0, res.output
        return json.loads(res.stdout)

    def cli_refusal(*args):
        res = CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)
        assert res.exit_code == 1 and res.stdout == "", res.output
        return res.stderr.strip().removeprefix("error: ")

    token = make_token(redis_url)
    return cli_json, cli_refusal, Admin(node, token), signed_in(node, token)


def page_objects(browser, location: str) -> dict:
    page = browser.get(location)
    assert page.status_code in (200, 201), page.text
    return json.loads(html.unescape(OBJECTS.search(page.text).group(1)))


def console_form(browser, account_url: str, action: str, fields: dict):
    page = browser.get(account_url)
    op = re.search(r'name="op" value="([0-9a-f]{16})"', page.text).group(1)
    return browser.post(action, data={**fields, "op": op, "_xsrf": xsrf(page.text)})


def same(a: dict, b: dict, where: str) -> None:
    assert list(a) == list(b), f"{where}: fields differ: {list(a)} vs {list(b)}"
    for name in a:
        if isinstance(a[name], dict) and isinstance(b[name], dict):
            same(a[name], b[name], f"{where}.{name}")
        elif name not in OWN:
            assert a[name] == b[name], f"{where}: {name}: {a[name]!r} vs {b[name]!r}"


def test_account_key_and_topup_are_one_object_on_every_face(faces):
    cli_json, _refusal, api, browser = faces
    settings = {"name": "ci", "rate_limit_rpm": "30", "monthly_limit_toman": "100.5",
                "allowed_models": "mock/fast,mock/fast:free"}

    # ---- the CLI
    c_acct = cli_json("account", "create", "--phone", "09120000001")
    c_key = cli_json("key", "create", c_acct["id"], "--name", "ci", "--rpm", "30", "--monthly-limit", "100.5",
                     "--allowed-models", "mock/fast,mock/fast:free")
    c_top = cli_json("account", "topup", c_acct["id"], "500", "--ref", "pay-1", "--note", "card")
    c_after = cli_json("account", "show", c_acct["id"])
    assert c_acct["account_id"] == c_acct["id"] and c_acct["suspended"] is False  # old names beside

    # ---- the management API
    a_acct = api.post("/accounts", json={"phone": "09120000002"}).json()
    made = api.post(f"/accounts/{a_acct['id']}/keys", json={
        "name": "ci", "rate_limit_rpm": 30, "monthly_limit_toman": "100.5",
        "allowed_models": ["mock/fast", "mock/fast:free"]})
    assert made.status_code == 201, made.text
    a_key = made.json()
    a_top = api.post(f"/accounts/{a_acct['id']}/topups", json={"amount_toman": "500", "ref": "pay-1",
                                                               "note": "card"}).json()
    a_after = api.get(f"/accounts/{a_acct['id']}").json()

    # ---- the console
    form = browser.get("/admin/accounts")
    created = browser.post("/admin/accounts", data={"phone": "09120000003", "_xsrf": xsrf(form.text)})
    assert created.status_code == 303, created.text
    page_url = created.headers["location"].split("#")[0]
    k_acct = page_objects(browser, page_url)["account"]
    base = f"/admin/accounts/{k_acct['id']}"
    key_page = console_form(browser, page_url, base + "/keys", settings)
    assert key_page.status_code == 201, key_page.text
    new_key = re.search(r"(sk-up-[A-Za-z0-9]{40})", key_page.text).group(1)
    k_key = json.loads(html.unescape(OBJECTS.search(key_page.text).group(1)))["keys"][0]
    top = console_form(browser, page_url, base + "/topups", {"amount_toman": "500", "ref": "pay-1", "note": "card"})
    assert top.status_code == 303, top.text
    seen = page_objects(browser, page_url)
    k_after, k_txn = seen["account"], seen["transactions"][0]

    # ---- the account: one object (the CLI's old names beside it, nothing else)
    assert set(c_acct) - set(a_acct) == OLD_ACCOUNT
    same({k: c_acct[k] for k in a_acct}, a_acct, "account (CLI vs API)")
    same(k_acct, a_acct, "account (console vs API)")
    same({k: c_after[k] for k in a_after}, a_after, "account after the top-up (CLI vs API)")
    same(k_after, a_after, "account after the top-up (console vs API)")
    assert a_after["balance_toman"] == "500.000000"

    # ---- the key: one object; the full key only in the answer that created it
    assert a_key.pop("key").startswith("sk-up-") and c_key.pop("key").startswith("sk-up-")
    assert new_key not in json.dumps(k_key)
    same(c_key, a_key, "key (CLI vs API)")
    same(k_key, a_key, "key (console vs API)")
    assert a_key["rate_limit_rpm"] == a_key["rpm"] == 30 and a_key["status"] == "active"
    assert a_key["monthly_limit_toman"] == "100.500000"
    assert api.get(f"/keys/{a_key['key_id']}").json() == a_key
    assert cli_json("key", "show", c_key["key_id"]) == c_key

    # ---- the top-up's transaction: one object
    same(c_top, a_top, "top-up result (CLI vs API)")
    same(k_txn, a_top["transaction"], "transaction (console vs API)")
    assert (c_top["transaction"]["actor"], a_top["transaction"]["actor"], k_txn["actor"]) == ("cli", "ops", "ops")


def test_the_same_refusal_reads_the_same_on_every_face(faces):
    cli_json, cli_refusal, api, browser = faces
    acct = cli_json("account", "create", "--phone", "09120000001")["id"]
    page_url = f"/admin/accounts/{acct}"
    cases = [  # (CLI args, API call, console form action and fields, code, field)
        (("key", "create", acct, "--rpm", "0"),
         lambda: api.post(f"/accounts/{acct}/keys", json={"rate_limit_rpm": 0}),
         (page_url + "/keys", {"rate_limit_rpm": "0"}), "invalid_request", "rate_limit_rpm"),
        (("account", "topup", acct, "abc"),
         lambda: api.post(f"/accounts/{acct}/topups", json={"amount_toman": "abc"}),
         (page_url + "/topups", {"amount_toman": "abc"}), "invalid_request", "amount_toman"),
        (("key", "create", acct, "--monthly-limit", "1e5"),
         lambda: api.post(f"/accounts/{acct}/keys", json={"monthly_limit_toman": "1e5"}),
         (page_url + "/keys", {"monthly_limit_toman": "1e5"}), "invalid_request", "monthly_limit_toman"),
        (("account", "set-low-balance", acct, "-5"),
         lambda: api.patch(f"/accounts/{acct}", json={"low_balance_toman": "-5"}),
         (page_url + "/settings", {"low_balance_toman": "-5"}), "invalid_request", "low_balance_toman"),
    ]
    for cli_args, api_call, (action, fields), code, field in cases:
        said = cli_refusal(*cli_args)
        err = api_call().json()["error"]
        assert (err["code"], err["param"]) == (code, field), err
        answer = console_form(browser, page_url + "?op=0123456789abcdef", action, fields)
        assert answer.status_code == 400, answer.text
        shown = html.unescape(REFUSAL.search(answer.text).group(1))
        assert said == err["message"] == shown, (said, err["message"], shown)
        assert field in said


def test_a_phone_change_is_one_action_on_every_face(faces):
    """`account set-phone`, PATCH {"phone"} and the console's phone form: the same account object
    after it, the same audit entry (verb, object, before and after), the same refusal for a phone
    another account has (409 phone_in_use on the API and the console)."""
    cli_json, cli_refusal, api, browser = faces
    ids = [cli_json("account", "create", "--phone", f"0912000000{i}")["id"] for i in range(4)]
    c_obj = cli_json("account", "set-phone", ids[0], "09350000001")
    a_obj = api.patch(f"/accounts/{ids[1]}", json={"phone": "+98 935 000 0002"}).json()
    page_url = f"/admin/accounts/{ids[2]}?op=0123456789abcdef"
    done = console_form(browser, page_url, f"/admin/accounts/{ids[2]}/phone", {"phone": "۰۹۳۵۰۰۰۰۰۰۳"})
    assert done.status_code == 303, done.text
    k_obj = page_objects(browser, page_url)["account"]
    assert (c_obj["phone"], a_obj["phone"], k_obj["phone"]) == ("+989350000001", "+989350000002", "+989350000003")
    assert c_obj["changed"] is True and c_obj["before_phone"] == "+989120000000"
    same({k: c_obj[k] for k in a_obj}, a_obj, "account after a phone change (CLI vs API)")
    same(k_obj, a_obj, "account after a phone change (console vs API)")
    log = api.get("/audit-log", params={"limit": 3}).json()["data"]
    assert [(e["action"], e["object"]["id"], e["before"], e["after"]) for e in log] == [
        ("account.set_phone", ids[i], {"phone": f"+98912000000{i}"}, {"phone": f"+98935000000{i + 1}"})
        for i in (2, 1, 0)]
    assert [e["actor"] for e in log] == ["ops", "ops", "cli"]
    # a phone another account has: the same refusal on the three faces, nothing written
    said = cli_refusal("account", "set-phone", ids[3], "09350000001")
    err = api.patch(f"/accounts/{ids[3]}", json={"phone": "09350000001"})
    assert err.status_code == 409 and err.json()["error"]["code"] == "phone_in_use"
    answer = console_form(browser, f"/admin/accounts/{ids[3]}?op=0123456789abcdef",
                          f"/admin/accounts/{ids[3]}/phone", {"phone": "09350000001"})
    assert answer.status_code == 409, answer.text
    shown = html.unescape(REFUSAL.search(answer.text).group(1))
    assert said == err.json()["error"]["message"] == shown
    assert api.get(f"/accounts/{ids[3]}").json()["phone"] == "+989120000003"
    assert len(api.get("/audit-log").json()["data"]) == 3 + 4  # the creations and the three changes


def _outbox(redis_url: str, acct: str) -> list[dict]:
    """The account's webhook events as their receiver gets them (events.body)."""
    from upgate.store import connection as store, keyspace
    from upgate.webhooks import events

    client = store.connect_sync(redis_url)
    return [json.loads(events.body(events.split_entry(e)[1])) for e in client.lrange(keyspace.outbox(acct), 0, -1)]


def test_notes_reasons_and_the_account_csv_on_every_face(faces, redis_url):
    cli_json, cli_refusal, api, browser = faces
    ids = [cli_json("account", "create", "--phone", f"0912100000{i}")["id"] for i in range(3)]
    # a note: one object on every face, who and when kept
    c_note = cli_json("account", "note", ids[0], "called about a charge")
    a_note = api.post(f"/accounts/{ids[0]}/notes", json={"text": "refunded ۵۰۰ تومان"})
    assert a_note.status_code == 201, a_note.text
    page_url = f"/admin/accounts/{ids[0]}?op=0123456789abcdef"
    done = console_form(browser, page_url, f"/admin/accounts/{ids[0]}/notes", {"text": "follow up 1405-10-01"})
    assert done.status_code == 303, done.text
    listed = api.get(f"/accounts/{ids[0]}/notes").json()["data"]
    assert [n["text"] for n in listed] == ["follow up 1405-10-01", "refunded ۵۰۰ تومان", "called about a charge"]
    assert [n["actor"] for n in listed] == ["ops", "ops", "cli"] and listed[2] == c_note
    same(a_note.json(), listed[1], "note (API answer vs list)")
    assert cli_json("account", "notes", ids[0])["notes"] == listed
    page = browser.get(page_url).text
    assert all(html.escape(n["text"]) in page for n in listed)
    assert cli_refusal("account", "note", ids[0], "   ") == api.post(
        f"/accounts/{ids[0]}/notes", json={"text": " "}).json()["error"]["message"]

    # a reason on suspend and resume: in the account.suspended/resumed webhooks and the audit
    cli_json("account", "suspend", ids[0], "--reason", "chargeback")
    api.post(f"/accounts/{ids[1]}/suspend", json={"reason": "fraud check"})
    form = console_form(browser, f"/admin/accounts/{ids[2]}?op=0123456789abcdef", f"/admin/accounts/{ids[2]}/suspend",
                        {"reason": "asked by the owner", "confirmed": "1"})
    assert form.status_code == 303, form.text
    cli_json("account", "resume", ids[0], "--reason", "paid")
    for acct, reasons in ((ids[0], ["chargeback", "paid"]), (ids[1], ["fraud check"]), (ids[2], ["asked by the owner"])):
        assert [(e["type"], e["data"]) for e in _outbox(redis_url, acct)] == [
            (t, {"account_id": acct, "reason": why}) for t, why in zip(("account.suspended", "account.resumed"), reasons)]
    log = api.get("/audit-log", params={"limit": 4}).json()["data"]
    assert [(e["action"], e["object"]["id"], e["note"], e["actor"], e["before"], e["after"]) for e in log] == [
        ("account.resume", ids[0], "paid", "cli", {"status": "suspended"}, {"status": "active"}),
        ("account.suspend", ids[2], "asked by the owner", "ops", {"status": "active"}, {"status": "suspended"}),
        ("account.suspend", ids[1], "fraud check", "ops", {"status": "active"}, {"status": "suspended"}),
        ("account.suspend", ids[0], "chargeback", "cli", {"status": "active"}, {"status": "suspended"})]

    # the accounts list as CSV: the same rows on the three faces, with the filter given
    c_csv = CliRunner().invoke(cli, ["account", "list", "--csv"], env={"UPGATE_REDIS_URL": redis_url,
                                                                        "UPGATE_KEY_PEPPER": PEPPER}).stdout
    a_csv = api.get("/accounts", params={"format": "csv"})
    k_csv = browser.get("/admin/accounts.csv")
    assert a_csv.headers["content-type"].startswith("text/csv") and k_csv.headers["content-type"].startswith("text/csv")
    assert c_csv.replace("\r\n", "\n") == a_csv.text.replace("\r\n", "\n") == k_csv.text.replace("\r\n", "\n")
    rows = c_csv.splitlines()
    assert rows[0].startswith("id,phone,status,balance_toman") and len(rows) == 4
    one = api.get("/accounts", params={"format": "csv", "phone": "۰۹۱۲۱۰۰۰۰۰۱"}).text.splitlines()
    assert len(one) == 2 and one[1].startswith(ids[1] + ",'+989121000001,suspended,")  # "+…" neutralised
    assert browser.get("/admin/accounts.csv", params={"q": "09121000001"}).text == api.get(
        "/accounts", params={"format": "csv", "phone": "09121000001"}).text


def test_request_search_and_the_audit_log_filters_are_one_answer_on_every_face(faces, node, redis_url):
    import httpx

    from tests.gateway import seed

    cli_json, cli_refusal, api, browser = faces
    k1, a1, kid1 = seed(redis_url, balance="100000")
    _k2, a2, _ = seed(redis_url, balance="100000")
    for _ in range(3):
        httpx.post(node.base + "/chat/completions", json={"model": "mock/chat-1", "messages": [
            {"role": "user", "content": "hi"}]}, headers={"Authorization": f"Bearer {k1}"}, timeout=30)
    query = {"key": kid1, "status": "200", "code": "ok"}
    c_found = cli_json("request", "search", "--key", kid1, "--status", "200", "--code", "ok")
    a_found = api.get("/requests", params=query).json()
    k_found = page_objects(browser, "/admin/requests?" + "&".join(f"{k}={v}" for k, v in query.items()))["requests"]
    assert len(a_found["data"]) == 3 and {r["account_id"] for r in a_found["data"]} == {a1}
    assert c_found == a_found == k_found
    a_csv = api.get("/requests", params={**query, "format": "csv"}).text
    assert a_csv.splitlines()[0].startswith("request_id,time,account_id") and len(a_csv.splitlines()) == 4
    assert browser.get("/admin/requests", params={**query, "format": "csv"}).text == a_csv
    said = cli_refusal("request", "search", "--status", "abc")
    err = api.get("/requests", params={"status": "abc"}).json()["error"]
    shown = browser.get("/admin/requests", params={"status": "abc"})
    assert err["param"] == "status" and shown.status_code == 400
    assert said == err["message"] == html.unescape(REFUSAL.search(shown.text).group(1))

    # the audit log, filtered: a replayed top-up is marked as one, not a second top-up
    api.post(f"/accounts/{a2}/topups", json={"amount_toman": "70", "ref": "pay-77"})
    api.post(f"/accounts/{a2}/topups", json={"amount_toman": "70", "ref": "pay-77"})
    cli_json("account", "note", a2, "asked about pay-77")
    c_log = cli_json("admin-token", "log", "--account", a2, "--action", "account.topup")["entries"]
    a_log = api.get("/audit-log", params={"account": a2, "action": "account.topup"}).json()["data"]
    k_log = page_objects(browser, f"/admin/audit?account={a2}&action=account.topup")["audit_log"]
    assert c_log == a_log == k_log and [e["replay"] for e in a_log] == [True, False]
    assert a_log[1]["after"] == {"balance_toman": "100070.000000"} and a_log[0]["after"] is None
    assert [e["action"] for e in api.get("/audit-log", params={"account": a2}).json()["data"]] == [
        "account.note", "account.topup", "account.topup"]
    assert len(api.get("/audit-log", params={"actor": "cli", "account": a2}).json()["data"]) == 1
    assert api.get("/audit-log", params={"account": a2, "format": "csv"}).text == browser.get(
        "/admin/audit", params={"account": a2, "format": "csv"}).text
    assert api.get("/audit-log", params={"from": "1405-13-01"}).json()["error"]["param"] == "from"
