"""Webhooks across real gateway nodes: `upgate serve` subprocesses share the delivery (each event
sent once, a node killed mid-delivery leaves its event to another), and a receiver that hangs
never slows the /v1 hot path of a node that is delivering to it."""
from __future__ import annotations

import statistics
import time

import httpx
import pytest
import redis

from tests.gateway import load_catalog, seed
from tests.load_kit import Gateway, wait_for
from tests.webhook_receiver import Receiver
from upgate.services import accounts
from upgate.store import connection as store, keyspace

SECRET = "whsec-nodes-0123456789"


@pytest.fixture
def gateways(redis_url, mock, tmp_path):
    load_catalog(redis_url)  # a node without a catalog is not ready (/healthz 503)
    started: list[Gateway] = []

    def start(n: int, receiver: Receiver, **env) -> list[Gateway]:
        for i in range(n):
            g = Gateway(redis_url, mock.base_url, tmp_path, f"gw{len(started)}",
                        UPGATE_WEBHOOK_URL=receiver.url, UPGATE_WEBHOOK_SECRET=SECRET,
                        UPGATE_WEBHOOK_POLL_S="0.2", UPGATE_WEBHOOK_BACKOFF_S="0.2", **env)
            started.append(g)
        for g in started[-n:]:
            g.wait_ready(30)
        return started[-n:]

    yield start
    for g in started:
        if g.proc.poll() is None:
            g.kill()


def pid_of(consumer: str) -> int:
    return int(consumer.split(":")[1])


def test_two_nodes_send_each_event_once(redis_url, receiver, gateways):
    gateways(2, receiver)
    client = store.connect_sync(redis_url)
    accts = [accounts.create_account(client, f"0912200000{i}", 0) for i in range(8)]
    for acct in accts:
        accounts.suspend(client, acct)
    wait_for(lambda: len(receiver.accepted()) == 8, 20, "eight events")
    time.sleep(1.0)  # nothing more comes
    ids = [r["event"]["id"] for r in receiver.received]
    assert len(ids) == len(set(ids)) == 8
    assert {e["data"]["account_id"] for e in receiver.accepted()} == set(accts)


def test_a_node_killed_mid_delivery_leaves_the_event_to_another(redis_url, receiver, gateways):
    receiver.hang_s, receiver.hang_first = 60.0, 1  # the first POST is held (the node dies meanwhile)
    nodes = gateways(2, receiver, UPGATE_WEBHOOK_TIMEOUT_S="4", UPGATE_WEBHOOK_CLAIM_S="5")
    client = store.connect_sync(redis_url)
    acct = accounts.create_account(client, "09122000009", 0)
    accounts.suspend(client, acct)
    wait_for(lambda: receiver.arrived, 10, "the first attempt to reach the receiver")
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    pending = r.xpending_range(keyspace.WEBHOOK_STREAM, keyspace.WEBHOOK_GROUP, "-", "+", 10)
    assert len(pending) == 1
    holder = pid_of(pending[0]["consumer"])
    victim = next(g for g in nodes if g.proc.pid == holder)
    survivor = next(g for g in nodes if g is not victim)
    victim.kill()  # SIGKILL while its POST is open
    t0 = time.monotonic()
    wait_for(lambda: receiver.accepted(), 20, "the event delivered by the other node")
    took = time.monotonic() - t0
    assert receiver.accepted()[0]["id"] == receiver.arrived[0]
    assert receiver.accepted()[0]["type"] == "account.suspended"
    assert took < 15, took  # claim after 5 s idle (checked every 1.25 s), not after the 60 s hang
    assert survivor.proc.poll() is None
    # the receiver records the POST before its answer reaches the node, which acknowledges then
    wait_for(lambda: r.xpending(keyspace.WEBHOOK_STREAM, keyspace.WEBHOOK_GROUP)["pending"] == 0, 10,
             "the delivery acknowledged")


def test_a_hanging_receiver_does_not_slow_v1(redis_url, receiver, make_node):
    receiver.hang_s = 8.0  # longer than the node's 5 s timeout: every attempt hangs to the end
    node = make_node(webhook_url=receiver.url, webhook_secret=SECRET, webhook_timeout_s=5.0,
                     webhook_claim_s=6.0, webhook_poll_s=0.1)
    key, _, _ = seed(redis_url, balance="100000")
    http = httpx.Client(timeout=30)
    body = {"model": "mock/chat-1", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
    headers = {"Authorization": f"Bearer {key}"}

    def latencies(n: int) -> list[float]:
        out = []
        for _ in range(n):
            t = time.monotonic()
            assert http.post(node.base + "/chat/completions", json=body, headers=headers).status_code == 200
            out.append(time.monotonic() - t)
        return out

    baseline = statistics.median(latencies(20))
    client = store.connect_sync(redis_url)
    for i in range(40):  # more events than the node has delivery slots: all of them hang
        accounts.suspend(client, accounts.create_account(client, f"091230000{i:02d}", 0))
    wait_for(lambda: len(receiver.arrived) >= 30, 10, "deliveries hanging on the receiver")
    during = latencies(20)
    # a paced stream while the deliveries hang: no gap near the receiver's hang
    gaps, last = [], None
    with http.stream("POST", node.base + "/chat/completions", headers=headers,
                     json={**body, "stream": True, "mock": {"chunks": 20, "chunk_delay_ms": 50}}) as resp:
        for line in resp.iter_lines():
            now = time.monotonic()
            if line.startswith("data: "):
                if last is not None:
                    gaps.append(now - last)
                last = now
    assert len(receiver.arrived) >= 30 and not receiver.accepted()  # still hanging throughout
    assert statistics.median(during) < baseline + 0.05, (baseline, during)
    assert max(gaps) < 1.0, max(gaps)
