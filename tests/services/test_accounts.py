"""upgate/services/accounts.py and lua/topup.lua against the private real redis-server."""
from __future__ import annotations

import json
import time
import uuid

import pytest
import redis

from upgate.billing import jalali, money
from upgate.services import accounts
from upgate.store import connection as store, keyspace

MAX = money.MAX_MICRO
UNKNOWN = "00000000-0000-4000-8000-000000000000"


def snapshot(redis_url: str) -> dict:
    raw = redis.Redis.from_url(redis_url)
    return {k: raw.dump(k) for k in raw.keys("*")}


@pytest.fixture
def client(redis_url):
    return store.connect_sync(redis_url)


@pytest.fixture
def events(redis_url):
    p = redis.Redis.from_url(redis_url).pubsub()
    p.subscribe(keyspace.CHANNEL)
    assert p.get_message(timeout=2)["type"] == "subscribe"

    def drain(wait: float = 0.3) -> list[dict]:
        out = []
        while (m := p.get_message(timeout=wait)) is not None:
            if m["type"] == "message":
                out.append(json.loads(m["data"]))
        return out

    yield drain
    p.close()


# ---- pure -------------------------------------------------------------------------------------

@pytest.mark.parametrize("phone,masked", [
    ("09120000000", "0912***0000"), ("09121234567", "0912***4567"), ("+989121234567", "+989***4567"),
    ("1234567", "12***67"), ("12345678", "12***78"), ("123456789", "123***789"),
    ("1234567890", "123***890"), ("123456789012345", "1234***2345"), ("", "***"), ("12", "***"),
])
def test_mask_phone(phone, masked):
    assert accounts.mask_phone(phone) == masked


@pytest.mark.parametrize("phone", ["09121234567", " +989121234567 ", "0912-123-4567", "٠٩١٢١٢٣٤٥٦٧"])
def test_phone_accepted_in_canonical_form(phone):  # every spelling: tests/services/test_phones.py
    assert accounts.check_phone(phone) == "+989121234567"


@pytest.mark.parametrize("phone", ["", "123456", "1234567890123456", "0912123456", "++98912",
                                   "abc1234567", "+", "1234567", None])
def test_phone_refused(phone):
    with pytest.raises(accounts.InvalidPhone):
        accounts.check_phone(phone)


@pytest.mark.parametrize("text,micro", [
    ("0", 0), ("1500", 1_500_000_000), ("1500.25", 1_500_250_000), ("0.000001", 1),
    (" 7 ", 7_000_000), ("9007199254.740992", MAX),
    # CUSTOMERS.md "Amount inputs": Persian, Arabic-Indic, Latin digits, with or without separators
    ("1,000", 1_000_000_000), ("۱۲٬۵۰۰", 12_500_000_000), ("١٠", 10_000_000), ("۱۲٫۵", 12_500_000),
])
def test_parse_amount(text, micro):
    assert accounts.parse_amount(text) == micro


@pytest.mark.parametrize("text", ["abc", "1.1234567", "1e3", "1E3", "nan", "inf", "1,00", "",
                                  "0x10", "1.", ".5", "9007199254.740993", "-5", "¹⁰⁰⁰⁰",
                                  "①⓪⓪⓪⓪", "１２", "9" * 5000, "1 000", None, 12])
def test_parse_amount_refused(text):
    with pytest.raises(accounts.InvalidAmount):
        accounts.parse_amount(text)


def test_parse_amount_negative_only_when_allowed():
    assert accounts.parse_amount("-2.5", allow_negative=True) == -2_500_000
    with pytest.raises(accounts.InvalidAmount, match="negative"):
        accounts.parse_amount("-2.5")


def test_account_info_from_hash():
    info = accounts.AccountInfo.from_hash("a", {b"phone": b"09121234567", b"suspended": b"1",
                                                b"free_quota": b"0", b"balance": b"5"})
    assert info == accounts.AccountInfo("a", "0912***4567", True, 0)
    assert accounts.AccountInfo.from_hash("a", {"phone": "09121234567", "suspended": "0"}).free_quota is None


# ---- create, show, list -----------------------------------------------------------------------

def test_create_writes_the_wallet_the_billing_scripts_read(client, r):
    before = int(time.time())
    acct = accounts.create_account(client, "09121234567", 5_000_000)
    assert uuid.UUID(acct).version == 4 and str(uuid.UUID(acct)) == acct
    wallet = r.hgetall(keyspace.wallet(acct))
    assert before <= int(wallet.pop("created_at")) <= time.time() + 1
    assert wallet == {"phone": "+989121234567", "balance": "5000000", "held": "0", "suspended": "0",
                      "credited": "5000000", "charged": "0"}
    assert r.smembers(keyspace.ACCOUNTS) == {acct}


def test_create_refusals_write_nothing(client, redis_url):
    before = snapshot(redis_url)
    for exc, phone, bal in [(accounts.InvalidPhone, "abc", 0), (accounts.InvalidAmount, "09121234567", -1),
                            (accounts.BalanceOutOfRange, "09121234567", MAX + 1),
                            (accounts.InvalidAmount, "09121234567", 1.5)]:
        with pytest.raises(exc):
            accounts.create_account(client, phone, bal)
    assert snapshot(redis_url) == before


def test_show_and_list(client, r):
    a = accounts.create_account(client, "09121234567", 10_000_000)
    b = accounts.create_account(client, "09120000000")
    r.hset(keyspace.wallet(a), "held", 2_500_000)
    r.sadd(keyspace.account_keys(a), "k1", "k2")
    r.set(keyspace.free(a, jalali.day_key()), 3)
    v = accounts.show(client, a.upper())  # any UUID spelling
    created = v.pop("created_at")
    assert created > 0
    assert v == {"account_id": a, "phone": "+989121234567", "phone_masked": "+989***4567",
                 "balance_micro": 10_000_000, "held_micro": 2_500_000, "available_micro": 7_500_000,
                 "suspended": False, "free_quota": None, "free_used_today": 3, "low_balance_micro": None,
                 "key_count": 2}
    assert [x["account_id"] for x in accounts.list_accounts(client)] == sorted(
        [a, b], key=lambda i: (accounts.show(client, i)["created_at"], i))
    assert [x["account_id"] for x in accounts.list_accounts(client, phone="09120000000")] == [b]
    for bad in (UNKNOWN, "nope", "{a:x}"):
        with pytest.raises(accounts.UnknownAccount):
            accounts.show(client, bad)


# ---- top-up -----------------------------------------------------------------------------------

def test_topup_and_adjustment(client, r):
    acct = accounts.create_account(client, "09121234567", 1_000_000)
    assert accounts.topup(client, acct, 2_500_000) == 3_500_000
    assert accounts.topup(client, acct, -5_000_000) == -1_500_000  # may go negative
    assert r.hget(keyspace.wallet(acct), "balance") == "-1500000"


def test_topup_refuses_beyond_2_53_exactly(client, r, redis_url):
    acct = accounts.create_account(client, "09121234567", MAX - 5)
    assert accounts.topup(client, acct, 5) == MAX  # exactly 2^53 is allowed
    before = snapshot(redis_url)
    with pytest.raises(accounts.BalanceOutOfRange, match="2\\^53"):
        accounts.topup(client, acct, 1)  # 2^53 + 1 is not representable in Lua: must be caught
    with pytest.raises(accounts.BalanceOutOfRange):
        accounts.topup(client, acct, MAX)
    assert snapshot(redis_url) == before
    assert accounts.topup(client, acct, -MAX) == 0
    assert accounts.topup(client, acct, -MAX) == -MAX
    with pytest.raises(accounts.BalanceOutOfRange):
        accounts.topup(client, acct, -1)
    assert r.hget(keyspace.wallet(acct), "balance") == str(-MAX)


def test_topup_refusals_write_nothing(client, redis_url):
    acct = accounts.create_account(client, "09121234567", 1)
    before = snapshot(redis_url)
    for exc, a, amount in [(accounts.UnknownAccount, UNKNOWN, 5), (accounts.UnknownAccount, "bad", 5),
                           (accounts.InvalidAmount, acct, 0), (accounts.InvalidAmount, acct, 1.5),
                           (accounts.InvalidAmount, acct, True),
                           (accounts.BalanceOutOfRange, acct, MAX + 1)]:
        with pytest.raises(exc):
            accounts.topup(client, a, amount)
    assert snapshot(redis_url) == before


def test_topup_script_reloads_after_a_flush_of_functions(client):
    acct = accounts.create_account(client, "09121234567")
    client.function_flush()
    assert accounts.topup(client, acct, 1) == 1


# ---- suspend, resume, free quota --------------------------------------------------------------

def test_suspend_resume_publish(client, r, events):
    acct = accounts.create_account(client, "09121234567")
    assert accounts.suspend(client, acct) is True
    assert r.hget(keyspace.wallet(acct), "suspended") == "1"
    assert events() == [{"t": "account", "id": acct}]
    assert accounts.suspend(client, acct) is False  # idempotent, still tells the nodes
    assert events() == [{"t": "account", "id": acct}]
    assert accounts.resume(client, acct) is True
    assert r.hget(keyspace.wallet(acct), "suspended") == "0"
    assert accounts.resume(client, acct) is False
    assert len(events()) == 2


def test_free_quota(client, r, events):
    acct = accounts.create_account(client, "09121234567")
    accounts.set_free_quota(client, acct, 0)
    assert r.hget(keyspace.wallet(acct), "free_quota") == "0"
    assert events() == [{"t": "account", "id": acct}]
    accounts.set_free_quota(client, acct, 200)
    assert accounts.show(client, acct)["free_quota"] == 200
    accounts.set_free_quota(client, acct, None)  # back to the default
    assert not r.hexists(keyspace.wallet(acct), "free_quota")
    assert len(events()) == 2


def test_refused_account_changes_write_and_publish_nothing(client, redis_url, events):
    acct = accounts.create_account(client, "09121234567")
    before = snapshot(redis_url)
    with pytest.raises(accounts.UnknownAccount):
        accounts.suspend(client, UNKNOWN)
    with pytest.raises(accounts.UnknownAccount):
        accounts.resume(client, "x")
    for n in (-1, accounts.MAX_FREE_QUOTA + 1, 1.5, True, "5"):
        with pytest.raises(accounts.InvalidQuota):
            accounts.set_free_quota(client, acct, n)
    with pytest.raises(accounts.UnknownAccount):
        accounts.set_free_quota(client, UNKNOWN, 5)
    assert snapshot(redis_url) == before
    assert events() == []


def test_atomic_write_is_all_or_nothing_on_one_server(client, r):
    """A step that fails inside the transaction (here: queued against a wrong type) makes the
    pipeline raise; the commands are validated by MULTI, so nothing is applied."""
    r.set("plain", "x")
    with pytest.raises(redis.ResponseError):
        accounts.atomic_write(client, [lambda p: p.hset("h", "a", 1), lambda p: p.execute_command("NOSUCHCMD")])
    assert not r.exists("h")
