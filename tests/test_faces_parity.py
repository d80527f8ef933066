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
