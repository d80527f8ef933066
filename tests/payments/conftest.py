"""Fixtures of the payment suites: the loopback banks, settings pointing at them, an account."""
from __future__ import annotations

import pytest

from tests.payments.fake_banks import FakeZarinpal, FakeZibal
from upgate.billing import money
from upgate.services import accounts
from upgate.settings import Settings
from upgate.store import connection as store


@pytest.fixture(scope="session")
def zarinpal_bank():
    bank = FakeZarinpal()
    yield bank
    bank.close()


@pytest.fixture(scope="session")
def zibal_bank():
    bank = FakeZibal()
    yield bank
    bank.close()


@pytest.fixture
def zarinpal(zarinpal_bank):
    zarinpal_bank.payments.clear()
    zarinpal_bank.calls.clear()
    zarinpal_bank.delay_s, zarinpal_bank.down = 0.0, False
    return zarinpal_bank


@pytest.fixture
def zibal(zibal_bank):
    zibal_bank.payments.clear()
    zibal_bank.calls.clear()
    zibal_bank.delay_s, zibal_bank.down = 0.0, False
    return zibal_bank


def pay_settings(redis_url: str, gateway: str, zarinpal=None, zibal=None, **kw) -> Settings:
    base = dict(redis_url=redis_url, key_pepper="test-pepper", payments=gateway,
                public_url="https://api.example.ir", payments_timeout_s=2.0,
                zarinpal_merchant_id=zarinpal.merchant if zarinpal else "",
                zarinpal_url=zarinpal.url if zarinpal else Settings.zarinpal_url,
                zibal_merchant=zibal.merchant if zibal else "",
                zibal_url=zibal.url if zibal else Settings.zibal_url)
    return Settings(**{**base, **kw})


@pytest.fixture
def client(redis_url):
    c = store.connect_sync(redis_url)
    yield c
    c.close()


def new_account(client, phone: str = "09121234567", balance: str = "0") -> str:
    return accounts.create_account(client, phone, money.parse_toman(balance))


def balance(client, account_id: str) -> str:
    return money.fmt(int(client.hget(f"{{a:{account_id}}}:wallet", "balance")))


def payment_topups(client, account_id: str) -> list[dict]:
    from upgate.services import transactions

    return [t for t in transactions.list_transactions(client, account_id) if t["actor"] == "payment"]
