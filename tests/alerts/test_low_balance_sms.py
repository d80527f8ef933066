"""The low-balance SMS (CUSTOMERS.md: `/dashboard/alerts`, "SMS when balance crosses it (once per
crossing)") against real gateway nodes, the real openai client, and the loopback Kavenegar and
SMS.ir fakes (tests/sms/fakes.py): one message when a charge takes the available balance below
the threshold, none for the requests after it, one again after a top-up re-arms it, never more
than sign-in's per-phone hourly cap; the log driver's line is Persian."""
from __future__ import annotations

import time

import pytest

from tests.dashboard_kit import SmsLog
from tests.gateway import seed
from tests.sms.fakes import FakeKavenegar, FakeSmsIr
from upgate.billing import money
from upgate.services import accounts, transactions
from upgate.store import connection as store

openai = pytest.importorskip("openai")
PHONE = "+989121234567"
PROMPT = [{"role": "user", "content": "Tell me about the weather in Tehran today, in a few words please."}]


def _chat(node, key) -> None:
    openai.OpenAI(base_url=node.base, api_key=key, max_retries=0).chat.completions.create(
        model="mock/chat-1", messages=PROMPT, max_tokens=8)


def _available(client, acct) -> int:
    return accounts.show(client, acct)["available_micro"]


def _wait(pred, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _crossings(node, key, acct, count_sms) -> None:
    """Cross, stay below, be topped up above, cross again: two messages, and no more."""
    client = store.connect_sync(node.settings.redis_url)
    threshold = _available(client, acct) - money.MICRO  # the first request (> 1 toman) crosses it
    accounts.update(client, acct, low_balance_micro=threshold)
    _chat(node, key)
    _wait(lambda: count_sms() == 1)
    _chat(node, key)  # still below: nothing more
    time.sleep(0.5)
    assert count_sms() == 1
    back = threshold - _available(client, acct) + money.MICRO  # a top-up to 1 toman above: armed again
    transactions.topup(client, acct, str(money.to_decimal(back)), ref="alert-test-1")
    _chat(node, key)
    _wait(lambda: count_sms() == 2)
    time.sleep(0.5)
    assert count_sms() == 2
    return threshold


def test_kavenegar_once_per_crossing(make_node, redis_url):
    fake = FakeKavenegar()
    try:
        node = make_node(sms="kavenegar", sms_api_key=fake.API_KEY, sms_template="login",
                         sms_alert_template="lowbalance", sms_url=fake.url)
        key, acct, _ = seed(redis_url, phone=PHONE, balance="1000")
        threshold = _crossings(node, key, acct, lambda: len(fake.requests))
        sent = fake.requests[0]["query"]
        assert sent == {"receptor": "09121234567", "template": "lowbalance",
                        "token": str(money.to_decimal(threshold).to_integral_value())}
    finally:
        fake.close()


def test_smsir_once_per_crossing(make_node, redis_url):
    fake = FakeSmsIr()
    try:
        node = make_node(sms="smsir", sms_api_key=fake.API_KEY, sms_template="100200",
                         sms_alert_template="100300", sms_url=fake.url)
        key, acct, _ = seed(redis_url, phone=PHONE, balance="1000")
        threshold = _crossings(node, key, acct, lambda: len(fake.requests))
        body = fake.requests[1]["json"]
        assert body["mobile"] == "09121234567" and body["templateId"] == 100300
        assert body["parameters"] == [{"name": "AMOUNT", "value": str(money.to_decimal(threshold).to_integral_value())}]
    finally:
        fake.close()


def test_no_alert_template_no_sms_and_the_hourly_cap(make_node, redis_url):
    fake = FakeKavenegar()
    try:
        quiet = make_node(sms="kavenegar", sms_api_key=fake.API_KEY, sms_template="login", sms_url=fake.url)
        key, acct, _ = seed(redis_url, phone=PHONE, balance="1000")
        accounts.update(store.connect_sync(redis_url), acct, low_balance_micro=999_999_999)
        _chat(quiet, key)  # crosses, but the operator registered no alert template
        time.sleep(0.5)
        assert fake.requests == [] and not quiet.ctx.alerts.enabled
        loud = make_node(sms="kavenegar", sms_api_key=fake.API_KEY, sms_template="login",
                         sms_alert_template="lowbalance", sms_url=fake.url)
        sent = [loud.thread.run(loud.ctx.alerts.send(acct)) for _ in range(7)]
        assert sent == [True] * 5 + [False] * 2 and len(fake.requests) == 5  # sign-in's 5 an hour
    finally:
        fake.close()


def test_log_driver_writes_the_persian_message(node, redis_url):
    key, acct, _ = seed(redis_url, phone=PHONE, balance="60000")
    accounts.update(store.connect_sync(redis_url), acct, low_balance_micro=59_999 * money.MICRO)
    with SmsLog() as sms:
        _chat(node, key)
        _wait(lambda: sms.lines)
    assert sms.lines == [{"event": "sms", "to": PHONE, "text": sms.lines[0]["text"]}]
    assert "۵۹٬۹۹۹" in sms.lines[0]["text"] and "موجودی" in sms.lines[0]["text"]
