"""The phone change (services/phone_change.py): canonical and unique, audited with its before and
after, finished by running it again after an interruption at any step, and exactly one winner
when changes race — on one Redis and on a Redis Cluster (the phone's and the wallet's slots differ)."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.services.test_accounts import client  # noqa: F401  (fixture)
from upgate.services import accounts, admin_log, phone_change, phone_index
from upgate.store import connection as store, keyspace

OLD, NEW = "+989121234567", "+989351112233"


def test_a_phone_change_moves_the_index_and_is_audited(client):
    acct = accounts.create_account(client, "09121234567")
    done = phone_change.set_phone(client, acct, "۰۹۳۵ ۱۱۱ ۲۲۳۳", actor="ops")  # any spelling
    assert done == {"account_id": acct, "before": OLD, "after": NEW, "changed": True}
    assert accounts.show(client, acct)["phone"] == NEW
    assert phone_index.owner(client, NEW) == acct and phone_index.owner(client, OLD) is None
    [entry] = admin_log.read(client, 1)
    assert (entry["actor"], entry["action"], entry["object"], entry["account"]) == (
        "ops", "account.set_phone", {"type": "account", "id": acct}, acct)
    assert (entry["before"], entry["after"], entry["replay"]) == ({"phone": OLD}, {"phone": NEW}, False)
    # the same change again changes nothing and is not logged twice
    assert phone_change.set_phone(client, acct, NEW)["changed"] is False
    assert len(admin_log.read(client, 10)) == 1
    # the old phone is free again: a new account may have it
    assert accounts.create_account(client, OLD)


def test_another_accounts_phone_is_refused_with_nothing_written(client):
    a = accounts.create_account(client, OLD)
    b = accounts.create_account(client, NEW)
    with pytest.raises(accounts.PhoneInUse):
        phone_change.set_phone(client, a, "0935 111 2233")
    assert accounts.show(client, a)["phone"] == OLD
    assert phone_index.owner(client, OLD) == a and phone_index.owner(client, NEW) == b
    with pytest.raises(accounts.InvalidPhone):
        phone_change.set_phone(client, a, "12")
    with pytest.raises(accounts.UnknownAccount):
        phone_change.set_phone(client, "00000000-0000-4000-8000-000000000000", "09120000009")
    assert admin_log.read(client, 10) == []


def test_an_interrupted_change_is_finished_by_running_it_again(client, monkeypatch):
    acct = accounts.create_account(client, OLD)
    real = phone_change._release
    monkeypatch.setattr(phone_change, "_release", lambda *a: (_ for _ in ()).throw(ConnectionError("gone")))
    with pytest.raises(ConnectionError):  # claimed and written, the old phone not let go
        phone_change.set_phone(client, acct, NEW)
    assert phone_index.owner(client, NEW) == acct and phone_index.owner(client, OLD) == acct
    monkeypatch.setattr(phone_change, "_release", real)
    other = accounts.create_account(client, "09120000001")
    with pytest.raises(accounts.PhoneInUse):  # the half-done change still holds the new phone
        phone_change.set_phone(client, other, NEW)
    # interrupted after the claim only (the wallet not yet written): the repeat finishes it
    client.hset(keyspace.wallet(acct), "phone", OLD)
    assert phone_change.set_phone(client, acct, NEW)["changed"] is True
    assert phone_index.owner(client, OLD) is None and phone_index.owner(client, NEW) == acct


def test_a_shared_phone_goes_back_to_its_last_account(client):
    a = accounts.create_account(client, OLD)
    b = accounts.create_account(client, "09120000002")
    client.hset(keyspace.wallet(b), "phone", OLD)  # two accounts from before the index share OLD
    client.set(keyspace.phone_owner(OLD), phone_index.SHARED)
    client.sadd(keyspace.phone_shared(OLD), a, b)
    phone_change.set_phone(client, b, NEW)
    assert phone_index.owner(client, OLD) == a and not client.exists(keyspace.phone_shared(OLD))


def _race(client, accts: list[str], phones: list[str]) -> list:
    def one(args):
        try:
            return phone_change.set_phone(client, *args)["after"]
        except (accounts.PhoneInUse, phone_change.PhoneChanged) as e:
            return type(e).__name__
    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(one, zip(accts, phones)))


def _check_unique(client, accts: list[str]) -> None:
    held = [accounts.show(client, a)["phone"] for a in accts]
    assert len(set(held)) == len(held), held
    for acct, phone in zip(accts, held):
        assert phone_index.owner(client, phone) == acct


@pytest.mark.parametrize("where", ["single", pytest.param("cluster", marks=pytest.mark.cluster)])
def test_racing_changes_leave_every_phone_unique(where, request):
    url = request.getfixturevalue("redis_url" if where == "single" else "cluster_url")
    c = store.connect_sync(url)
    accts = [accounts.create_account(c, f"0912000{i:04d}") for i in range(8)]
    # eight accounts race for one phone: exactly one gets it
    out = _race(c, accts, [NEW] * 8)
    assert out.count(NEW) == 1 and out.count("PhoneInUse") == 7
    _check_unique(c, accts)
    # one account raced to eight phones: it ends with one of them, and holds only that one
    out = _race(c, [accts[0]] * 8, [f"0936000{i:04d}" for i in range(8)])
    final = accounts.show(c, accts[0])["phone"]
    assert final in out
    _check_unique(c, accts)
    owned = [p for i in range(8) if phone_index.owner(c, p := f"+98936000{i:04d}") == accts[0]]
    assert owned == [final]
