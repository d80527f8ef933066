"""The money events, decided inside the billing scripts and delivered by real gateway nodes to
a real receiver: wallet.topup (transaction step), wallet.low_balance (once per crossing, however
many nodes settle the requests that cross it; re-armed by money coming in), and
key.monthly_limit_reached (once per key and month)."""
from __future__ import annotations

import concurrent.futures
import time

import httpx
import orjson
import pytest

from tests.gateway import seed
from tests.load_kit import wait_for
from tests.webhook_receiver import Receiver
from upgate.billing import money
from upgate.services import accounts, transactions
from upgate.store import connection as store, keyspace
from upgate.webhooks import events

SECRET = "whsec-events-0123456789"
BODY = {"model": "mock/chat-1", "messages": [{"role": "user", "content": "Hello there, gateway!"}],
        "max_tokens": 8}  # 5 prompt + 5 completion tokens: 3.75 toman each


@pytest.fixture
def hooked(make_node, receiver):
    """Gateway nodes that deliver to the receiver."""
    def make():
        return make_node(webhook_url=receiver.url, webhook_secret=SECRET, webhook_timeout_s=1.0,
                         webhook_backoff_s=0.2, webhook_claim_s=2.0, webhook_poll_s=0.1)
    return make


def of_type(receiver: Receiver, kind: str) -> list[dict]:
    seen, out = set(), []
    for e in receiver.accepted():
        if e["type"] == kind and e["id"] not in seen:
            seen.add(e["id"])
            out.append(e)
    return out


def chat(node, key: str) -> httpx.Response:
    return httpx.post(node.base + "/chat/completions", json=BODY, headers={"Authorization": f"Bearer {key}"},
                      timeout=30)


def set_low_balance(client, acct: str, toman: str) -> None:
    """What `PATCH /admin/v1/accounts/{id}` with low_balance_toman calls."""
    accounts.update(client, acct, low_balance_micro=money.parse_toman(toman))


def test_topup_and_adjustment_are_reported_once_with_the_transaction(redis_url, receiver, hooked):
    hooked()
    client = store.connect_sync(redis_url)
    _, acct, _ = seed(redis_url, balance="10")
    first = transactions.topup(client, acct, "250.5", ref="pay-1", note="card")
    transactions.topup(client, acct, "250.5", ref="pay-1", note="card")  # a replay: no event
    adj = transactions.adjust(client, acct, "-0.5", note="rounding")
    wait_for(lambda: len(of_type(receiver, "wallet.topup")) == 2, 10, "two wallet.topup events")
    time.sleep(0.5)
    topups = of_type(receiver, "wallet.topup")
    assert len(topups) == 2
    assert topups[0]["data"] == {"account_id": acct, "transaction": first["transaction"],
                                 "balance_toman": "260.500000"}
    assert list(topups[0]["data"]["transaction"]) == list(events.TRANSACTION_FIELDS)
    assert topups[1]["data"]["transaction"] == adj["transaction"]
    assert topups[1]["data"]["transaction"]["kind"] == "adjustment"
    assert topups[1]["data"]["balance_toman"] == "260.000000"


def test_low_balance_once_per_crossing_across_two_nodes_and_rearmed_by_a_topup(redis_url, receiver, hooked):
    nodes = [hooked(), hooked()]
    client = store.connect_sync(redis_url)
    key, acct, _ = seed(redis_url, balance="100")
    set_low_balance(client, acct, "80")
    # 12 requests at 3.75 toman, in parallel through both nodes: available crosses 80 once
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        codes = list(pool.map(lambda i: chat(nodes[i % 2], key).status_code, range(12)))
    assert codes == [200] * 12
    wait_for(lambda: of_type(receiver, "wallet.low_balance"), 10, "the low-balance event")
    time.sleep(1.0)
    lows = of_type(receiver, "wallet.low_balance")
    assert len(lows) == 1, lows
    data = lows[0]["data"]
    assert list(data) == ["account_id", "balance_toman", "available_toman", "low_balance_toman"]
    assert data["account_id"] == acct and data["low_balance_toman"] == "80.000000"
    assert money.parse_toman(data["available_toman"]) < money.parse_toman("80")
    assert money.parse_toman(data["balance_toman"]) >= money.parse_toman(data["available_toman"])
    # still below: more charges send nothing
    assert chat(nodes[0], key).status_code == 200
    # money in (55 − 3.75 + 30 = 81.25 ≥ 80) re-arms it; the next charges cross again
    transactions.topup(client, acct, "30")
    for _ in range(2):
        assert chat(nodes[1], key).status_code == 200
    wait_for(lambda: len(of_type(receiver, "wallet.low_balance")) == 2, 10, "the second crossing")
    # a new threshold arms it again at once
    set_low_balance(client, acct, "500")
    assert chat(nodes[0], key).status_code == 200
    wait_for(lambda: len(of_type(receiver, "wallet.low_balance")) == 3, 10, "the crossing of the new threshold")
    assert of_type(receiver, "wallet.low_balance")[2]["data"]["low_balance_toman"] == "500.000000"


def test_no_low_balance_event_without_a_threshold(redis_url, receiver, hooked):
    node = hooked()
    key, acct, _ = seed(redis_url, balance="20")
    assert chat(node, key).status_code == 200
    transactions.topup(store.connect_sync(redis_url), acct, "1")
    wait_for(lambda: of_type(receiver, "wallet.topup"), 10, "the top-up event (after the charge's)")
    assert not of_type(receiver, "wallet.low_balance")


def _sentinel(client, receiver: Receiver, acct: str, ref: str) -> None:
    """A top-up's event, waited for: the account's events arrive in order, so any event decided
    before it has arrived by then (a way to see that an event was NOT sent, without sleeping)."""
    txn = transactions.topup(client, acct, "1", ref=ref)["transaction"]["id"]
    wait_for(lambda: any(e["data"].get("transaction", {}).get("id") == txn
                         for e in of_type(receiver, "wallet.topup")), 10, "the sentinel top-up event")


def test_monthly_limit_event_is_for_spending_that_reached_it_not_a_large_hold(redis_url, receiver, hooked):
    """A 2,000-toman limit, nothing spent, the default hold (4096 output tokens: 2,457.6 toman)
    alone over it: 429 key_monthly_limit_reached that says a smaller max_tokens fits, and NO
    event (nothing was spent). Spending that reaches the limit is announced, once."""
    from upgate.services import keys

    node = hooked()
    client = store.connect_sync(redis_url)
    key, acct, key_id = seed(redis_url, balance="5000", monthly_limit_micro=money.parse_toman("2000"))
    big = httpx.post(node.base + "/chat/completions", headers={"Authorization": f"Bearer {key}"}, timeout=30,
                     json={k: v for k, v in BODY.items() if k != "max_tokens"})
    assert big.status_code == 429, big.text
    err = big.json()["error"]
    assert err["code"] == "key_monthly_limit_reached" and "smaller max_tokens fits" in err["message"]
    assert "2000.000000 toman left" in err["message"], err["message"]
    assert chat(node, key).status_code == 200  # max_tokens 8 fits: 3.75 toman spent
    _sentinel(client, receiver, acct, "s-1")
    assert of_type(receiver, "key.monthly_limit_reached") == []

    # the spent 3.75 toman reach the limit once it is lowered to them: refused, announced once
    keys.update_key(client, key_id, monthly_limit_micro=money.parse_toman("3.75"))
    for _ in range(3):
        r = chat(node, key)
        assert r.status_code == 429 and r.json()["error"]["code"] == "key_monthly_limit_reached"
        assert "smaller max_tokens" not in r.json()["error"]["message"]
    _sentinel(client, receiver, acct, "s-2")
    events = of_type(receiver, "key.monthly_limit_reached")
    assert len(events) == 1
    data = events[0]["data"]
    assert list(data) == ["account_id", "key_id", "monthly_limit_toman", "spent_toman"]
    assert data["account_id"] == acct and data["key_id"] == key_id
    assert (data["monthly_limit_toman"], data["spent_toman"]) == ("3.750000", "3.750000")
    body = str(events[0])
    assert key not in body and key[:12] not in body  # no key material


@pytest.mark.cluster
def test_a_topup_on_a_cluster_files_its_event_in_the_account_slot(cluster_url):
    client = store.connect_sync(cluster_url)
    acct = accounts.create_account(client, "09121234567", 0)
    transactions.topup(client, acct, "5", ref="c-1")
    shard = keyspace.outbox_index(acct, sharded=True)
    assert client.keyslot(shard) == keyspace.slot(acct) and client.zscore(shard, acct) is not None
    (entry,) = client.lrange(keyspace.outbox(acct), 0, -1)
    body = orjson.loads(events.body(events.split_entry(entry)[1]))
    assert body["type"] == "wallet.topup" and body["data"]["transaction"]["ref"] == "c-1"
