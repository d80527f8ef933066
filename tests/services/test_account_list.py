"""The accounts change list (services/account_list.py) on a real Redis: newest first with a
keyset cursor that survives new accounts, sorts by balance and by this month's spend, and one
search box for an account id, key id, key prefix, request id or a phone in any spelling, whole
or in part. Accounts made before the time index are added to it by the first listing."""
from __future__ import annotations

import asyncio
import time

import pytest

from tests.services.test_accounts import client  # noqa: F401  (fixture)
from upgate.billing import jalali, request_record
from upgate.services import account_list, accounts, keys
from upgate.store import connection as store, keyspace

PEPPER = "test-pepper"


def _make(client, n: int, *, start: int = 1_700_000_000) -> list[str]:
    """n accounts with distinct creation seconds (and two sharing one), newest last."""
    ids = []
    for i in range(n):
        acct = accounts.create_account(client, f"0912{i:07d}", (i + 1) * 1_000_000)
        stamp = start + (i if i != n - 1 else n - 2)  # the last two share a second
        client.hset(keyspace.wallet(acct), "created_at", stamp)
        client.zadd(keyspace.ACCOUNTS_BY_TIME, {acct: stamp})
        ids.append(acct)
    return ids


def _walk(client, **kw) -> list[str]:
    seen, cursor = [], None
    while True:
        page = account_list.browse(client, cursor=cursor, **kw)
        seen += [v["account_id"] for v in page["data"]]
        cursor = page["next_cursor"]
        if cursor is None:
            return seen


def test_newest_first_pages_cover_everyone_once_even_as_accounts_arrive(client):
    ids = _make(client, 7)
    first = account_list.browse(client, limit=3)
    assert [v["account_id"] for v in first["data"]][0] in ids[-2:]  # the two newest share a second
    assert first["total"] == 7 and first["next_cursor"].startswith("t")
    late = accounts.create_account(client, "09350000000")  # arrives between two pages
    rest = _walk(client, limit=3)  # a fresh walk sees it first
    assert rest[0] == late and sorted(rest) == sorted(ids + [late])
    second = account_list.browse(client, limit=3, cursor=first["next_cursor"])
    got = [v["account_id"] for v in first["data"] + second["data"]]
    assert len(set(got)) == 6 and late not in got  # the old walk neither repeats nor skips


def test_sorts_by_balance_and_by_this_months_spend(client):
    ids = _make(client, 5)
    by_balance = _walk(client, sort="balance", limit=2)
    assert by_balance == list(reversed(ids))  # balance grows with i
    assert _walk(client, sort="balance_low", limit=2) == ids
    kid = keys.create_key(client, PEPPER, ids[1])[1]
    client.hset(keyspace.key_record(ids[1], kid), "spent:" + jalali.month_key(), 7_000_000)
    page = account_list.browse(client, sort="spend", limit=2)
    assert page["data"][0]["account_id"] == ids[1] and page["data"][0]["spent_month_micro"] == 7_000_000
    assert page["next_cursor"] == "o2"


@pytest.mark.parametrize("q", ["0912 000 0003", "۰۹۱۲۰۰۰۰۰۰۳", "+98 912 000 0003", "00989120000003"])
def test_a_whole_phone_in_any_spelling_finds_its_account(client, q):
    ids = _make(client, 5)
    page = account_list.browse(client, q=q)
    assert [v["account_id"] for v in page["data"]] == [ids[3]] and page["matched"] == "phone"


def test_part_of_a_phone_finds_every_account_holding_it(client):
    ids = _make(client, 12)
    page = account_list.browse(client, q="۰۹۱۲۰۰۰۰۰۱")  # 0912000001x: accounts 10 and 11
    assert {v["account_id"] for v in page["data"]} == set(ids[10:12])
    assert account_list.browse(client, q="000 0007")["data"][0]["account_id"] == ids[7]
    # no phone holds 0999 (a random account id may: part of an id is searched too)
    assert all("0999" in v["account_id"] for v in account_list.browse(client, q="0999")["data"])


async def _keep_refused(url, record, now_ms):
    aclient = store.connect_async(url)
    await request_record.keep_refused(aclient, record, sharded=False, keep_days=7, now_ms=now_ms)
    await aclient.aclose()


def test_ids_key_prefix_and_request_id(client, redis_url):
    ids = _make(client, 3)
    assert [v["account_id"] for v in account_list.browse(client, q=ids[1].upper())["data"]] == [ids[1]]
    assert [v["account_id"] for v in account_list.browse(client, q=ids[2][:8])["data"]] == [ids[2]]
    full, kid, prefix = keys.create_key(client, PEPPER, ids[0])
    assert [v["account_id"] for v in account_list.browse(client, q=kid)["data"]] == [ids[0]]
    page = account_list.browse(client, q=prefix)
    assert [v["account_id"] for v in page["data"]] == [ids[0]] and page["matched"] == "key_prefix"
    assert account_list.browse(client, q=prefix + "…" + full[-4:])["data"][0]["account_id"] == ids[0]
    now_ms = int(time.time() * 1000)
    rid = "req_" + "ab" * 12
    refused = request_record.refused(request_id=rid, account_id=ids[2], key_id=kid, key_prefix=prefix,
                                     route="/v1/chat/completions", model=None, status=402, code="x")
    asyncio.run(_keep_refused(redis_url, refused, now_ms))
    page = account_list.browse(client, q="req_" + "ab" * 12)
    assert page["matched"] == "request" and [v["account_id"] for v in page["data"]] == [ids[2]]
    assert account_list.browse(client, q="req_" + "cd" * 12)["data"] == []


def test_accounts_made_before_the_index_are_listed(client):
    ids = _make(client, 4)
    client.delete(keyspace.ACCOUNTS_BY_TIME)
    walked = _walk(client, limit=3)  # the two newest share a second: either order
    assert set(walked[:2]) == set(ids[2:]) and walked[2:] == [ids[1], ids[0]]
    assert client.zcard(keyspace.ACCOUNTS_BY_TIME) == 4


def test_a_sort_or_a_partial_search_reads_a_bounded_window(client, monkeypatch):
    ids = _make(client, 6)
    monkeypatch.setattr(account_list, "SCAN_MAX", 4)
    page = account_list.browse(client, sort="balance", limit=10)
    assert page["capped"] and page["searched"] == 4
    assert {v["account_id"] for v in page["data"]} == set(ids[2:])


@pytest.mark.parametrize("kw", [{"cursor": "o-1"}, {"cursor": "t12.nope"}, {"cursor": "o3"},
                                {"sort": "phone"}, {"limit": 0}, {"limit": 501}])
def test_refused_input(client, kw):
    with pytest.raises(accounts.InvalidCursor):
        account_list.browse(client, **kw)
