"""One canonical phone (E.164) from every spelling CUSTOMERS.md lists, and one account per phone:
the second is refused; the phone migration rewrites old spellings and indexes them, `audit` lists
duplicates (reading only)."""
from __future__ import annotations

import pytest

from tests.services.test_accounts import client  # noqa: F401  (fixture)
from upgate.services import accounts, audit, phone_change, phone_index, phones
from upgate.store import keyspace

CANON = "+989121234567"


@pytest.mark.parametrize("text", [
    "09121234567", "9121234567", "989121234567", "+989121234567", "+98 912 123 4567",
    "0912-123-4567", "00989121234567", "۰۹۱۲۱۲۳۴۵۶۷", "٠٩١٢١٢٣٤٥٦٧", "+۹۸ ۹۱۲ ۱۲۳ ۴۵۶۷",
    "۰۹۱۲-۱۲۳-۴۵۶۷", " (0912) 123 4567 ", "\u200e+98 912 123 4567",
])
def test_every_spelling_is_one_number(text):
    assert phones.canonical(text) == CANON


def test_international_numbers_keep_their_country():
    assert phones.canonical("+44 20 7946 0958") == "+442079460958"
    assert phones.canonical("0044 20 7946 0958") == "+442079460958"


@pytest.mark.parametrize("text", ["", "+", "0912123456", "091212345678", "+98912123456", "+0912",
                                  "abc", "0912 abc 4567", "12345", None, 9121234567, "+98-912-123-45678"])
def test_not_a_phone(text):
    with pytest.raises(phones.PhoneError):
        phones.canonical(text)


def test_a_phone_belongs_to_one_account(client, r):
    a = accounts.create_account(client, "09121234567")
    with pytest.raises(accounts.PhoneInUse):
        accounts.create_account(client, "+98 912 123 4567")  # the same phone, spelled otherwise
    assert r.scard(keyspace.ACCOUNTS) == 1
    assert phone_index.owner(client, CANON) == a
    assert accounts.list_accounts(client, phone="۰۹۱۲۱۲۳۴۵۶۷")[0]["account_id"] == a


def test_a_dead_creations_claim_is_taken_over(client, r):
    r.set(keyspace.phone_owner(CANON), "00000000-0000-4000-8000-000000000000")  # no wallet behind it
    a = accounts.create_account(client, CANON)
    assert phone_index.owner(client, CANON) == a


def test_the_migration_writes_old_spellings_canonical_and_the_audit_lists_duplicates(client, r):
    from upgate import migrations

    a = accounts.create_account(client, "09121234567")
    b = accounts.create_account(client, "09350000000")
    c = accounts.create_account(client, "09360000000")
    # accounts from before the index: a phone stored as typed, and two sharing one
    r.delete(*r.keys("{p:*"))
    r.hset(keyspace.wallet(b), "phone", "0935 000 0000")
    r.hset(keyspace.wallet(c), "phone", "09121234567")
    result = audit.run(client)  # reads only
    assert result["duplicate_phones"] == [{"phone": CANON, "account_ids": sorted([a, c])}]
    assert r.hget(keyspace.wallet(b), "phone") == "0935 000 0000" and not r.keys("{p:*")
    migrations.run(client)
    assert r.hget(keyspace.wallet(b), "phone") == "+989350000000"
    assert phone_index.owner(client, "+989350000000") == b
    assert phone_index.owner(client, CANON) == phone_index.SHARED
    with pytest.raises(accounts.PhoneInUse):
        accounts.create_account(client, CANON)
    # resolved (c gets its own phone): the phone goes back to its one account at once
    phone_change.set_phone(client, c, "+989360000000")
    assert audit.run(client)["duplicate_phones"] == []
    assert phone_index.owner(client, CANON) == a
