"""Random and hostile values in every dashboard form field and every Messages field (issue 36):
no answer is a 5xx, and no money moves that should not (the wallets' money of record adds up,
no hold is left, and an account that can pay for nothing still has nothing held or charged).

The dashboard's forms are found on its pages (each <form method="post"> and its fields), so a
form added later is fuzzed too; the ones that end the session are left out."""
from __future__ import annotations

import re

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tests.dashboard_kit import SmsLog, signed_in, xsrf
from tests.gateway import seed
from upgate.services import accounts, audit
from upgate.store import connection as store, keyspace

pytestmark = pytest.mark.timeout(600)
A = "+989121234567"
PAGES = ("/dashboard/", "/dashboard/keys", "/dashboard/topup", "/dashboard/usage", "/dashboard/requests",
         "/dashboard/billing", "/dashboard/sessions", "/dashboard/phone", "/dashboard/account")
ENDS_THE_SESSION = ("logout", "revoke-all", "sessions", "/phone")
FORM = re.compile(r'<form[^>]*method="post"[^>]*action="([^"]+)"[^>]*>(.*?)</form>', re.S | re.I)
FIELD = re.compile(r'<(?:input|select|textarea)[^>]*name="([^"]+)"', re.I)
HOSTILE = ["", " ", "0", "-1", "¹⁰⁰⁰⁰", "①⓪⓪⓪⓪", "9" * 5000, "1e308", "NaN", "9999-12-31", "1500/01/01",
           "۱۴۰۵/۱۳/۴۰", "0001-01-01", "'\"><script>", "\x00", "\u202e", "%s%n", "{{7*7}}", "a" * 70_000,
           "١٢٬٠٠٠", "1,00,0", "+98 912 123 4567", "sk-up-" + "A" * 40, "../../etc/passwd"]
values = st.one_of(st.sampled_from(HOSTILE), st.text(max_size=200))
SUPPRESS = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]


def _forms(c: httpx.Client) -> list[tuple[str, list[str]]]:
    found = {}
    for page in PAGES:
        r = c.get(page)
        if r.status_code != 200:
            continue
        for action, inner in FORM.findall(r.text):
            if any(x in action for x in ENDS_THE_SESSION):
                continue
            found[action] = sorted(set(FIELD.findall(inner)) - {"_xsrf"})
    return sorted(found.items())


def _money(client, account_id: str) -> dict:
    w = client.hgetall(keyspace.wallet(account_id))
    return {k: w.get(k) for k in ("balance", "held", "credited", "charged")}


@pytest.fixture
def dash(make_node, redis_url):
    with SmsLog() as sms:
        node = make_node(payments="fake")
        _key, acct, _ = seed(redis_url, phone=A, balance="1000")
        c = signed_in(node, sms, A)
        yield node, c, acct, store.connect_sync(redis_url)


def test_every_dashboard_form_field(dash):
    node, c, acct, client = dash
    forms = _forms(c)
    assert any("/keys" in a for a, _ in forms) and any("topup" in a for a, _ in forms), forms
    before = _money(client, acct)
    token = xsrf(c.get("/dashboard/keys").text)

    def check(action: str, body: dict) -> None:
        r = c.post(action, data={**body, "_xsrf": token})
        assert r.status_code < 500, (action, {k: v[:40] for k, v in body.items()}, r.status_code)
        assert r.status_code != 303 or not r.headers["location"].startswith("/dashboard/login"), action

    for action, fields in forms:  # every hostile value in every field, the others blank
        for f in fields:
            for value in HOSTILE:
                check(action, {f: value})

    @settings(max_examples=60, deadline=None, suppress_health_check=SUPPRESS)
    @given(st.sampled_from(forms), st.data())
    def post(form, data):
        action, fields = form
        check(action, {f: data.draw(values, label=f) for f in fields})

    post()
    # no money moved: a top-up form opens an order at most, paid by nobody
    assert _money(client, acct) == before
    for lang in ("fa", "en"):
        for page in PAGES:
            assert c.get(f"{page}?lang={lang}").status_code < 500, page


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**63) | st.floats(allow_nan=False) | st.text(max_size=30)
    | st.sampled_from(HOSTILE[:12]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12)
block = st.fixed_dictionaries({"type": st.sampled_from(["text", "image", "document", "tool_use", "tool_result",
                                                        "thinking", "redacted_thinking", "weird"])},
                              optional={"text": json_values, "content": json_values, "id": json_values,
                                        "name": json_values, "input": json_values, "tool_use_id": json_values,
                                        "source": json_values, "is_error": json_values, "thinking": json_values,
                                        "signature": json_values, "data": json_values, "cache_control": json_values})
message = st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant"])},
                                optional={"content": st.lists(block, max_size=3) | json_values})
odd_message = st.fixed_dictionaries({}, optional={"role": st.sampled_from(["user", "system", "x"]) | json_values,
                                                  "content": st.lists(block, max_size=3) | json_values})
FIELDS = {"model": st.sampled_from(["mock/chat-1", "claude-sonnet-4-5", "nope/none"]) | json_values,
          "max_tokens": st.integers(-5, 2**40) | json_values,
          "messages": st.lists(message, max_size=4) | json_values,
          "system": json_values | st.lists(block, max_size=2), "tools": json_values,
          "tool_choice": json_values, "stop_sequences": json_values, "temperature": json_values,
          "top_p": json_values, "top_k": json_values, "stream": st.booleans() | json_values,
          "thinking": json_values, "metadata": json_values}
# mostly a body that reaches the translation (a model, max_tokens, turns), else anything at all
messages_body = st.one_of(
    st.fixed_dictionaries({"model": st.just("mock/chat-1"), "max_tokens": st.integers(1, 64),
                           "messages": st.lists(message | odd_message, min_size=1, max_size=4)},
                          optional={k: v for k, v in FIELDS.items() if k not in ("model", "max_tokens", "messages")}),
    st.fixed_dictionaries({}, optional=FIELDS))


def test_every_messages_field(node, redis_url):
    funded, rich, _ = seed(redis_url, balance="100000", rpm=600)
    broke, poor, _ = seed(redis_url, balance="0", rpm=600)
    client = store.connect_sync(redis_url)
    accounts.set_free_quota(client, poor, 0)
    poor_before = _money(client, poor)
    http = httpx.Client(base_url=node.base, timeout=30)

    @settings(max_examples=150, deadline=None, suppress_health_check=SUPPRESS)
    @given(messages_body, st.sampled_from(["/messages", "/messages/count_tokens"]), st.booleans())
    def post(body, path, paying):
        headers = {"x-api-key": funded if paying else broke, "anthropic-version": "2023-06-01",
                   "Content-Type": "application/json"}
        r = http.post(path, content=orjson.dumps(body, option=orjson.OPT_NON_STR_KEYS), headers=headers)
        assert r.status_code < 500 or r.status_code in (502, 503, 504) and body.get("model") == "mock/chat-1", \
            (path, r.status_code, r.text[:300])
        if r.status_code >= 400:
            err = r.json()
            assert err["type"] == "error" and isinstance(err["error"]["type"], str), err

    post()
    assert _money(client, poor) == poor_before  # an account that can pay for nothing: nothing moved
    assert int(client.hget(keyspace.wallet(rich), "held") or 0) == 0  # every hold settled or released
    assert audit.run(client, deep=True)["mismatches"] == []  # what moved adds up
