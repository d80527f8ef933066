"""Finding requests across accounts (services/request_search.py) against a running node: by
period, model, key, status and code, newest first, paged by a cursor that never repeats a
record, bounded (a period past 31 days and malformed filters are refused with their field)."""
from __future__ import annotations

import httpx
import pytest

from tests.gateway import seed
from upgate.billing import jalali
from upgate.services import request_search
from upgate.store import connection as store


def chat(node, key: str, model: str = "mock/chat-1") -> str:
    r = httpx.post(node.base + "/chat/completions", json={"model": model, "messages": [{"role": "user", "content": "hi"}]},
                   headers={"Authorization": f"Bearer {key}"}, timeout=30)
    return r.headers["X-Svc-Request-Id"]


@pytest.fixture
def traffic(node, redis_url):
    k1, a1, kid1 = seed(redis_url, balance="100000")
    k2, a2, kid2 = seed(redis_url, balance="100000")
    ids = [chat(node, k1), chat(node, k2), chat(node, k1, "mock/chat-big"), chat(node, k2), chat(node, k1)]
    return store.connect_sync(redis_url), ids, (a1, kid1), (a2, kid2)


def test_search_across_accounts_with_filters_and_a_cursor(traffic):
    client, ids, (a1, kid1), (a2, kid2) = traffic
    today = jalali.day_key()
    every = request_search.search(client)  # default: today
    assert [r["request_id"] for r in every["data"]] == ids[::-1] and every["from"] == every["to"] == today
    assert {r["account_id"] for r in every["data"]} == {a1, a2} and every["capped"] is False
    assert [r["request_id"] for r in request_search.search(client, key=kid1)["data"]] == [ids[4], ids[2], ids[0]]
    assert [r["request_id"] for r in request_search.search(client, model="mock/chat-big")["data"]] == [ids[2]]
    assert len(request_search.search(client, status="200", code="ok", start=today, end=today)["data"]) == 5
    assert request_search.search(client, status=402)["data"] == []
    # pages of two: every record once, newest first
    seen, cursor = [], None
    while True:
        page = request_search.search(client, limit=2, cursor=cursor)
        seen += [r["request_id"] for r in page["data"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == ids[::-1]
    # an earlier period holds none of them
    y, m, d = (int(x) for x in today.split("-"))
    assert request_search.search(client, start=f"{y - 1}-01-01", end=f"{y - 1}-01-02")["data"] == []


@pytest.mark.parametrize("kw, field", [
    ({"start": "1405-01-01", "end": "1405-03-01"}, "from"), ({"start": "1405-13-01"}, "from"),
    ({"end": "tomorrow"}, "to"), ({"start": "1405-02-02", "end": "1405-02-01"}, "to"), ({"status": "20x"}, "status"),
    ({"status": "999"}, "status"), ({"cursor": "abc"}, "cursor"), ({"limit": 0}, "limit"),
])
def test_malformed_searches_are_refused_with_their_field(redis_url, kw, field):
    with pytest.raises(ValueError) as e:
        request_search.search(store.connect_sync(redis_url), **kw)
    assert getattr(e.value, "field", None) == field


def test_persian_digits_and_slashes_are_one_day(traffic):
    client, ids, *_ = traffic
    today = jalali.day_key()
    fa = today.replace("-", "/").translate(str.maketrans("0123456789", "۰۱۲۳۴۵۶۷۸۹"))
    assert len(request_search.search(client, start=fa, end=fa)["data"]) == 5
