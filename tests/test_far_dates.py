"""Dates far ahead (issue 36): `expires_at=9999-12-31` was accepted, then every keys page
answered 500 (jdatetime "year is out of range") in both languages, forever. Now an expiry is at
most MAX_EXPIRY_YEARS ahead on every face (CLI, management API, console, dashboard), and a date
stored before the bound renders on every face without raising."""
from __future__ import annotations

import json

import httpx
import pytest
from click.testing import CliRunner

from admin_cli.main import cli
from tests.admin_kit import Admin, make_token
from tests.console_kit import signed_in as console_signed_in
from tests.dashboard_kit import SmsLog, signed_in, xsrf
from tests.gateway import PEPPER, seed
from upgate.services import key_rules, keys
from upgate.store import connection as store, keyspace

A = "+989121234567"
FAR = ["9999-12-31", "10000-01-01", "2200-01-01", "1500/01/01"]  # (the last: a Jalali year 2121)
STORED = [253402214400000, 253402300799999, 10**17]  # 9999-12-31 Tehran, its last ms, beyond


@pytest.fixture
def sms():
    with SmsLog() as log:
        yield log


@pytest.fixture
def run(redis_url):
    def invoke(*args: str):
        env = {"UPGATE_REDIS_URL": redis_url, "UPGATE_KEY_PEPPER": PEPPER, "COLUMNS": "200"}
        return CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)
    return invoke


def test_the_bound_is_said(redis_url):
    with pytest.raises(keys.InvalidKeySetting, match=f"within {key_rules.MAX_EXPIRY_YEARS} years"):
        keys.parse_expires("9999-12-31")
    keys.parse_expires("2030-01-01")  # within the bound


def test_far_expiry_refused_on_the_cli(run, redis_url):
    _key, acct, key_id = seed(redis_url)
    for when in FAR[:3]:
        res = run("key", "create", acct, "--expires", when)
        assert res.exit_code != 0 and ("10 years" in res.output or "ISO 8601" in res.output), res.output
        res = run("key", "update", key_id, "--expires", when)
        assert res.exit_code != 0, res.output


def test_far_expiry_refused_on_the_management_api(node, redis_url):
    _key, acct, key_id = seed(redis_url)
    api = Admin(node, make_token(redis_url))
    for when in FAR[:3]:
        r = api.post(f"/accounts/{acct}/keys", json={"expires_at": when})
        assert r.status_code == 400 and r.json()["error"]["param"] == "expires_at", r.text
        r = api.patch(f"/keys/{key_id}", json={"expires_at": when})
        assert r.status_code == 400 and r.json()["error"]["param"] == "expires_at", r.text


def test_far_expiry_refused_on_the_console(node, redis_url):
    _key, acct, key_id = seed(redis_url)
    c = console_signed_in(node, make_token(redis_url))
    url = f"/admin/accounts/{acct}"
    for when in FAR:
        token = xsrf(c.get(url, follow_redirects=True).text)
        r = c.post(url + "/keys", data={"_xsrf": token, "name": "k", "expires_at": when})
        assert r.status_code == 400, (when, r.status_code)
        r = c.post(url + f"/keys/{key_id}/update", data={"_xsrf": token, "expires_at": when})
        assert r.status_code == 400, (when, r.status_code)


def test_far_expiry_refused_on_the_dashboard(node, redis_url, sms):
    _key, _acct, key_id = seed(redis_url, phone=A)
    c = signed_in(node, sms, A)
    for when in FAR:
        page = c.get("/dashboard/keys")
        r = c.post("/dashboard/keys", data={"_xsrf": xsrf(page.text), "name": "k", "expires_at": when})
        assert r.status_code == 400, (when, r.status_code)
        r = c.post(f"/dashboard/keys/{key_id}/update", data={"_xsrf": xsrf(page.text), "expires_at": when})
        assert r.status_code == 400, (when, r.status_code)


@pytest.mark.parametrize("stored_ms", STORED)
def test_a_stored_far_date_renders_on_every_face(node, redis_url, sms, run, stored_ms):
    _key, acct, key_id = seed(redis_url, phone=A)
    client = store.connect_sync(redis_url)
    client.hset(keyspace.key_record(acct, key_id), "expires_at", stored_ms)  # as the old bound let in
    c = signed_in(node, sms, A)
    for lang in ("fa", "en"):
        r = c.get(f"/dashboard/keys?lang={lang}")
        assert r.status_code == 200, (lang, r.status_code)
    console = console_signed_in(node, make_token(redis_url))
    assert console.get(f"/admin/accounts/{acct}", follow_redirects=True).status_code == 200
    api = Admin(node, make_token(redis_url, "api"))
    r = api.get(f"/keys/{key_id}")
    assert r.status_code == 200 and r.json()["expires_at"].startswith("9999-12-31"), r.text
    res = run("key", "list", acct, "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)
    res = run("key", "list", acct)
    assert res.exit_code == 0, res.output
    # and the key can still be changed and revoked
    page = c.get("/dashboard/keys")
    r = c.post(f"/dashboard/keys/{key_id}/update", data={"_xsrf": xsrf(page.text), "expires_at": "2030-01-01"})
    assert r.status_code == 303, r.status_code


@pytest.mark.parametrize("lang", ["fa", "en"])
def test_every_date_formatter_takes_any_stored_value(lang):
    """Whatever a page's formatter is asked to show (new ones too), a far or odd stored moment
    is shown, never raised: every one-argument method of i18n.Formatter over extreme values."""
    import inspect

    from upgate import i18n

    fmt = i18n.Formatter(lang)
    odd = [*STORED, STORED[0] / 1000, -1, 1, "9999-12-31T23:59:59Z", "0001-01-01", "10000-01-01", "x", ""]
    tried = 0
    for name, method in inspect.getmembers(fmt, inspect.ismethod):
        params = [p for p in inspect.signature(method).parameters.values() if p.default is p.empty]
        if name.startswith("_") or len(params) != 1:
            continue
        for value in odd:
            try:
                method(value)
            except (TypeError, AttributeError, ValueError) as e:  # not a date formatter: fine if it refuses plainly
                assert "out of range" not in str(e) and "year" not in str(e), (name, value, e)
            except OverflowError as e:
                raise AssertionError((name, value, e)) from None
        tried += 1
    assert tried >= 5
