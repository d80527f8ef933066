"""A customer changing their own phone on /dashboard/phone (CUSTOMERS.md: a code to the new
number and a code to the old one, both required; unique as always; recorded in the audit), over
HTTP against a real gateway node, with the codes the `log` driver wrote."""
from __future__ import annotations

import httpx
import pytest

from tests.dashboard_kit import SmsLog, ask_code, signed_in, xsrf
from tests.gateway import seed
from upgate.services import accounts, admin_log, phone_index
from upgate.store import connection as store, keyspace

A, B, N = "+989121234567", "+989351234567", "+989361112233"
N_TYPED = "۰۹۳۶ ۱۱۱ ۲۲۳۳"  # as a Persian phone keyboard types it


@pytest.fixture
def sms():
    with SmsLog() as log:
        yield log


def _ask(c, sms, new: str):
    page = c.get("/dashboard/phone")
    seen = len(sms.lines)
    r = c.post("/dashboard/phone", data={"phone": new, "_xsrf": xsrf(page.text)})
    return r, seen


def _verify(c, r, phone: str, code_new: str, code_old: str):
    return c.post("/dashboard/phone/verify", data={"phone": phone, "code_new": code_new, "code_old": code_old,
                                                   "_xsrf": xsrf(r.text)})


def test_both_codes_change_the_phone_and_the_audit_says_so(node, sms):
    client = store.connect_sync(node.settings.redis_url)
    _k, acct, _ = seed(node.settings.redis_url, phone=A)
    c = signed_in(node, sms, A)
    r, seen = _ask(c, sms, N_TYPED)
    assert r.status_code == 200 and 'name="code_new"' in r.text and 'name="code_old"' in r.text
    code_new, code_old = sms.code_for(N, after=seen), sms.code_for(A, after=seen)
    wrong = f"{(int(code_old) + 1) % 10 ** 6:06d}"
    for attempt in ((code_new, wrong), (code_old, code_new), (code_new, "")):  # a wrong one, swapped, missing
        refused = _verify(c, r, N, *attempt)
        assert refused.status_code == 400 and "flash error" in refused.text, attempt
        assert accounts.show(client, acct)["phone"] == A
    done = _verify(c, r, N, code_new, code_old)
    assert done.status_code == 303 and done.headers["location"] == "/dashboard/phone?done=1"
    assert accounts.show(client, acct)["phone"] == N
    assert phone_index.owner(client, N) == acct and phone_index.owner(client, A) is None
    logged = [e for e in admin_log.read(client, 100) if e["action"] == "account.set_phone"]
    assert len(logged) == 1 and logged[0]["actor"] == "dashboard"
    assert logged[0]["before"] == {"phone": A} and logged[0]["after"] == {"phone": N}
    assert signed_in(node, sms, N).get("/dashboard/").status_code == 200  # the new number signs in
    seen = len(sms.lines)
    client.delete(keyspace.signin_sent(A))  # not a minute's wait since the first sign-in
    assert ask_code(httpx.Client(base_url=node.url, follow_redirects=False), A).status_code == 200
    assert not any(line["to"] == A for line in sms.lines[seen:])  # no account: nothing texted to the old number


def test_a_number_of_another_account_is_refused_after_its_code(node, sms):
    client = store.connect_sync(node.settings.redis_url)
    _k, acct, _ = seed(node.settings.redis_url, phone=A)
    _k, other, _ = seed(node.settings.redis_url, phone=B)
    c = signed_in(node, sms, A)
    r, seen = _ask(c, sms, B)
    assert r.status_code == 200  # nothing said yet about B: only its holder learns it
    refused = _verify(c, r, B, sms.code_for(B, after=seen), sms.code_for(A, after=seen))
    assert refused.status_code == 409 and "حساب دیگری" in refused.text
    assert accounts.show(client, acct)["phone"] == A and accounts.show(client, other)["phone"] == B
    assert phone_index.owner(client, B) == other


def test_same_number_xsrf_and_suspended(node, sms):
    client = store.connect_sync(node.settings.redis_url)
    _k, acct, _ = seed(node.settings.redis_url, phone=A)
    c = signed_in(node, sms, A)
    same, _ = _ask(c, sms, "09121234567")
    assert same.status_code == 400 and 'name="code_new"' not in same.text
    assert c.post("/dashboard/phone", data={"phone": N}).status_code == 403
    assert c.post("/dashboard/phone/verify", data={"phone": N, "code_new": "1", "code_old": "2"}).status_code == 403
    accounts.suspend(client, acct)
    page = c.get("/dashboard/phone")
    assert page.status_code == 200 and 'name="phone"' not in page.text
    r = c.post("/dashboard/phone", data={"phone": N, "_xsrf": xsrf(page.text)})
    assert r.status_code == 403 and accounts.show(client, acct)["phone"] == A
