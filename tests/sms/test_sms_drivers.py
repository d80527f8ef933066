"""upgate/sms/: each driver against a loopback fake that answers as the provider documents
(tests/sms/fakes.py): what is sent, success, refusals, a provider that does not answer in
time, and one that cannot be reached: every failure is SmsFailed, never a silent "sent"."""
from __future__ import annotations

import asyncio
import logging

import orjson
import pytest

from tests.procs import free_port
from tests.sms.fakes import FakeKavenegar, FakeSmsIr
from upgate import sms

PHONE, CODE = "+989121234567", "482913"


@pytest.fixture
def kavenegar():
    fake = FakeKavenegar()
    yield fake
    fake.close()


@pytest.fixture
def smsir():
    fake = FakeSmsIr()
    yield fake
    fake.close()


def _send(sender) -> None:
    asyncio.run(sender.send_code(PHONE, CODE, f"code {CODE}"))


def test_log_writes_one_json_line(caplog):
    with caplog.at_level(logging.INFO, logger="upgate.sms"):
        _send(sms.make("log"))
    [record] = [r for r in caplog.records if r.name == "upgate.sms"]
    assert orjson.loads(record.getMessage()) == {"event": "sms", "to": PHONE, "text": f"code {CODE}"}


def test_kavenegar_sends_the_code_into_the_template(kavenegar):
    _send(sms.make("kavenegar", api_key=kavenegar.API_KEY, template="upgate-login", url=kavenegar.url))
    [req] = kavenegar.requests
    assert req["method"] == "GET" and req["path"] == f"/v1/{kavenegar.API_KEY}/verify/lookup.json"
    assert req["query"] == {"receptor": "09121234567", "token": CODE, "template": "upgate-login"}


def test_smsir_sends_the_code_as_the_template_parameter(smsir):
    _send(sms.make("smsir", api_key=smsir.API_KEY, template="123456", url=smsir.url))
    [req] = smsir.requests
    assert req["path"] == "/v1/send/verify" and req["headers"]["x-api-key"] == smsir.API_KEY
    assert req["json"] == {"mobile": "09121234567", "templateId": 123456,
                           "parameters": [{"name": "CODE", "value": CODE}]}


@pytest.mark.parametrize("which", ["kavenegar", "smsir"])
def test_refusals_are_sms_failed(which, kavenegar, smsir):
    fake = kavenegar if which == "kavenegar" else smsir
    template = "upgate-login" if which == "kavenegar" else "123456"
    with pytest.raises(sms.SmsFailed, match=which):  # a wrong key
        _send(sms.make(which, api_key="wrong", template=template, url=fake.url))
    fake.answer = "no-credit"
    with pytest.raises(sms.SmsFailed) as e:
        _send(sms.make(which, api_key=fake.API_KEY, template=template, url=fake.url))
    assert CODE not in str(e.value) and "0912" not in str(e.value)  # nothing of the message in the error


@pytest.mark.parametrize("which", ["kavenegar", "smsir"])
def test_a_silent_or_missing_provider_is_sms_failed_within_the_timeout(which, kavenegar, smsir):
    import time

    fake = kavenegar if which == "kavenegar" else smsir
    template = "upgate-login" if which == "kavenegar" else "123456"
    fake.answer = "slow"
    started = time.monotonic()
    with pytest.raises(sms.SmsFailed):
        _send(sms.make(which, api_key=fake.API_KEY, template=template, url=fake.url, timeout_s=0.5))
    assert time.monotonic() - started < 2.5
    with pytest.raises(sms.SmsFailed):  # nothing listening
        _send(sms.make(which, api_key=fake.API_KEY, template=template, url=f"http://127.0.0.1:{free_port()}"))


def test_a_driver_without_its_settings_refuses_to_start():
    for name in ("kavenegar", "smsir"):
        with pytest.raises(ValueError, match="UPGATE_SMS_API_KEY"):
            sms.make(name)
    with pytest.raises(ValueError, match="numeric template id"):
        sms.make("smsir", api_key="k", template="login")
    with pytest.raises(ValueError, match="UPGATE_SMS must be"):
        sms.make("twilio")
