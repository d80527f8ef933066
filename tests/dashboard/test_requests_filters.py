"""Per-key figures, the requests' filters, paging and CSV, and the usage CSV (issue 39), against
a known set of requests made with the real openai client through a real gateway node: every
filter's answer is exactly the requests made that match it; a key's spend and last use are its
records'."""
from __future__ import annotations

import csv
import io
import re
from decimal import Decimal

import httpx
import jdatetime
import pytest

from tests.dashboard_kit import SmsLog, signed_in
from tests.gateway import PEPPER, seed
from upgate.billing import jalali
from upgate.services import keys, records
from upgate.store import connection as store

openai = pytest.importorskip("openai")
A, B = "+989121234567", "+989351234567"


@pytest.fixture
def made(node, redis_url):
    """Account A with keys `bot` and `web` and a known set of requests; B with one of its own."""
    client = store.connect_sync(redis_url)
    key_bot, acct, kid_bot = seed(redis_url, phone=A, balance="100000", name="bot")
    key_web, kid_web, _ = keys.create_key(client, PEPPER, acct, name="web")
    key_b, _acct_b, _ = seed(redis_url, phone=B, balance="100000")
    said = []

    def chat(key, kid, model):
        c = openai.OpenAI(base_url=node.base, api_key=key, max_retries=0)
        try:
            raw = c.chat.completions.with_raw_response.create(model=model, messages=[{"role": "user", "content": "hi"}],
                                                             max_tokens=4)
            rid, status = raw.headers["x-svc-request-id"], raw.status_code
        except openai.APIStatusError as e:
            rid, status = e.response.headers["x-svc-request-id"], e.status_code
        said.append({"id": rid, "key": kid, "model": model, "status": status})

    for _ in range(3):
        chat(key_bot, kid_bot, "mock/chat-1")
    chat(key_web, kid_web, "mock/chat-big")
    chat(key_web, kid_web, "dead/chat")  # the provider is unreachable: a 5xx, charged nothing
    chat(key_b, "b", "mock/chat-1")  # another account's
    kept = {r["request_id"] for r in records.list_requests(client, acct, limit=1000)}
    mine = [s for s in said if s["id"] in kept]
    assert {s["model"] for s in mine} >= {"mock/chat-1", "mock/chat-big"}
    return {"acct": acct, "bot": kid_bot, "web": kid_web, "said": mine, "theirs": said[-1]["id"]}


@pytest.fixture
def sms():
    with SmsLog() as log:
        yield log


def _ids(html: str) -> set[str]:
    return set(re.findall(r'<tr data-request="([^"]+)"', html))


def test_filters_answer_exactly_the_matching_requests(node, sms, made):
    c = signed_in(node, sms, A)
    said = made["said"]
    everything = _ids(c.get("/dashboard/requests").text)
    assert everything == {s["id"] for s in said} and made["theirs"] not in everything
    assert _ids(c.get("/dashboard/requests", params={"key": made["bot"]}).text) == \
        {s["id"] for s in said if s["key"] == made["bot"]}
    assert _ids(c.get("/dashboard/requests", params={"model": "mock/chat-big"}).text) == \
        {s["id"] for s in said if s["model"] == "mock/chat-big"}
    assert _ids(c.get("/dashboard/requests", params={"status": "ok"}).text) == \
        {s["id"] for s in said if s["status"] < 400}
    assert _ids(c.get("/dashboard/requests", params={"status": "5xx"}).text) == \
        {s["id"] for s in said if s["status"] >= 500}
    today = jalali.day_key()
    fa_today = today.replace("-", "/").translate(str.maketrans("0123456789", "۰۱۲۳۴۵۶۷۸۹"))
    assert _ids(c.get("/dashboard/requests", params={"from": fa_today, "to": fa_today}).text) == everything
    tomorrow = str(jdatetime.date(*map(int, today.split("-"))) + jdatetime.timedelta(days=1)).replace("/", "-")
    yesterday = str(jdatetime.date(*map(int, today.split("-"))) - jdatetime.timedelta(days=1)).replace("/", "-")
    assert _ids(c.get("/dashboard/requests", params={"from": tomorrow}).text) == set()
    assert _ids(c.get("/dashboard/requests", params={"to": yesterday}).text) == set()  # `to` is the end of that day
    both = c.get("/dashboard/requests", params={"key": made["web"], "model": "mock/chat-1"})
    assert _ids(both.text) == set()
    for bad in ({"from": "1405-13-01"}, {"from": "tomorrow"}, {"status": "ok'"}, {"from": "1405-05-02", "to": "1405-05-01"}):
        r = c.get("/dashboard/requests", params=bad)
        assert r.status_code == 400 and "flash error" in r.text, bad


def test_csv_is_the_filtered_set(node, sms, made):
    c = signed_in(node, sms, A)
    r = c.get("/dashboard/requests", params={"key": made["bot"], "format": "csv"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(r.text)))
    assert {row["request_id"] for row in rows} == {s["id"] for s in made["said"] if s["key"] == made["bot"]}
    assert "provider" not in rows[0] and all(row["key_id"] == made["bot"] for row in rows)


def test_paging_by_cursor(node, sms, made):
    full = keys.create_key(store.connect_sync(node.settings.redis_url), PEPPER, made["acct"], name="many")[0]
    client = openai.OpenAI(base_url=node.base, api_key=full, max_retries=0)
    for _ in range(52):
        client.chat.completions.create(model="mock/chat-1", messages=[{"role": "user", "content": "x"}], max_tokens=2)
    c = signed_in(node, sms, A)
    seen, url, pages = [], "/dashboard/requests", 0
    while url:
        page = c.get(url)
        seen += re.findall(r'<tr data-request="([^"]+)"', page.text)
        found = re.search(r'rel="next" href="([^"]+)"', page.text)
        url = found.group(1).replace("&amp;", "&") if found else None
        pages += 1
    kept = [r["request_id"] for r in records.list_requests(store.connect_sync(node.settings.redis_url), made["acct"], limit=1000)]
    assert pages == 2 and seen == kept and len(seen) == len(set(seen)) == 52 + len(made["said"])


def test_per_key_last_used_spent_and_sparkline_against_the_records(node, sms, made):
    client = store.connect_sync(node.settings.redis_url)
    kept = records.list_requests(client, made["acct"], limit=1000)
    listed = {k["key_id"]: k for k in keys.list_keys(client, made["acct"])}
    for kid in (made["bot"], made["web"]):
        spent = sum(Decimal(r["cost_toman"]) for r in kept if r["key_id"] == kid)
        assert Decimal(listed[kid]["spent_this_month_micro"]) / 1_000_000 == spent
    keys.create_key(client, PEPPER, made["acct"], name="unused")
    c = signed_in(node, sms, A)
    en = c.get("/dashboard/keys?lang=en").text
    rows = {kid: re.search(r"<tr>(?:(?!</tr>).)*" + re.escape(listed[kid]["display"]) + r".*?</tr>", en, re.S).group(0)
            for kid in (made["bot"], made["web"])}
    newest_bot = next(r for r in kept if r["key_id"] == made["bot"])
    from upgate.i18n import dates
    assert dates.when(newest_bot["time"], "en") in rows[made["bot"]]
    spent_bot = sum(Decimal(r["cost_toman"]) for r in kept if r["key_id"] == made["bot"])
    assert rows[made["bot"]].count("<rect") == 1  # one day of the 30 had spending: today
    assert "svg" in rows[made["web"]]
    from upgate.i18n import numbers
    assert f"Cost in the last 30 days: {numbers.toman(spent_bot, 'en')} toman" in rows[made["bot"]]
    unused_row = re.search(r"<tr>(?:(?!</tr>).)*unused.*?</tr>", en, re.S).group(0)
    assert "not in 30 days" in unused_row and "<rect" not in unused_row


def test_usage_csv(node, sms, made):
    c = signed_in(node, sms, A)
    by_key = list(csv.DictReader(io.StringIO(c.get("/dashboard/usage", params={"format": "csv", "by": "key"}).text)))
    assert {r["key_name"] for r in by_key} == {"bot", "web"}
    bot = next(r for r in by_key if r["key_name"] == "bot")
    assert int(bot["requests"]) == sum(1 for s in made["said"] if s["key"] == made["bot"])
    by_day = list(csv.DictReader(io.StringIO(c.get("/dashboard/usage?format=csv").text)))
    assert [r["day"] for r in by_day] == [jalali.day_key()]
    assert c.get("/dashboard/usage?format=csv&by=nothing").status_code == 400
    assert httpx.get(node.url + "/dashboard/usage?format=csv", follow_redirects=False).status_code == 303


def test_paging_when_each_read_is_cut_short(node, sms, made, monkeypatch):
    """Reads of 7 records at a time (WINDOW_READ, 2,000 in service): a filtered walk still finds
    every match exactly once, newest first, pages short where a read ran out before filling."""
    from upgate.services import account_requests

    full = keys.create_key(store.connect_sync(node.settings.redis_url), PEPPER, made["acct"], name="many")[0]
    client = openai.OpenAI(base_url=node.base, api_key=full, max_retries=0)
    for _ in range(20):
        client.chat.completions.create(model="mock/chat-1", messages=[{"role": "user", "content": "x"}], max_tokens=2)
    monkeypatch.setattr(account_requests, "WINDOW_READ", 7)
    c = signed_in(node, sms, A)
    kept = records.list_requests(store.connect_sync(node.settings.redis_url), made["acct"], limit=1000)
    for params, want in (({}, [r["request_id"] for r in kept]),
                         ({"key": made["bot"]}, [r["request_id"] for r in kept if r["key_id"] == made["bot"]])):
        seen, url, pages = [], "/dashboard/requests?" + "&".join(f"{k}={v}" for k, v in params.items()), 0
        while url and pages < 50:
            page = c.get(url)
            assert page.status_code == 200
            seen += re.findall(r'<tr data-request="([^"]+)"', page.text)
            found = re.search(r'rel="next" href="([^"]+)"', page.text)
            url = found.group(1).replace("&amp;", "&") if found else None
            pages += 1
        assert seen == want, params
    rows = list(csv.DictReader(io.StringIO(c.get("/dashboard/requests", params={"format": "csv"}).text)))
    assert [r["request_id"] for r in rows] == [r["request_id"] for r in kept]
