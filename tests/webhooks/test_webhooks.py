"""Webhooks end to end on a real redis-server (and the local Cluster): events decided in Lua,
moved into the stream, delivered signed to a real HTTP receiver on loopback, retried, given up,
listed; `upgate-admin webhook test`. Timings are shortened through Settings."""
from __future__ import annotations

import hashlib
import hmac
import json
import time

import orjson
import pytest
import redis
from click.testing import CliRunner

from admin_cli.main import cli
from tests.gateway import LoopThread
from tests.load_kit import wait_for
from upgate.services import accounts
from upgate.store import connection as store, keyspace
from upgate.handlers.metrics import Metrics
from upgate.settings import Settings
from upgate.webhooks import events
from upgate.webhooks.delivery import Delivery

SECRET = "whsec-test-0123456789"


def fast(url: str, hook: str, **over) -> Settings:
    base = dict(redis_url=url, webhook_url=hook, webhook_secret=SECRET, webhook_timeout_s=1.0,
                webhook_backoff_s=0.2, webhook_backoff_max_s=0.4, webhook_claim_s=2.0, webhook_poll_s=0.1)
    return Settings(**{**base, **over})


class Engine:
    """The delivery engine of one node, on its own loop thread."""

    def __init__(self, settings: Settings, consumer: str | None = None):
        self.thread = LoopThread("webhooks")
        self.metrics = Metrics()

        async def start():
            d = Delivery(store.connect_async(settings.redis_url), settings, self.metrics, consumer=consumer)
            await d.start()
            return d

        self.delivery = self.thread.run(start())

    def count(self, outcome: str) -> float:
        return self.metrics.webhooks.labels(outcome)._value.get()

    def close(self) -> None:
        async def stop():
            await self.delivery.stop()
            await self.delivery.client.aclose()

        try:
            self.thread.run(stop())
        finally:
            self.thread.close()


@pytest.fixture
def engines():
    made: list[Engine] = []

    def make(settings: Settings, consumer: str | None = None) -> Engine:
        made.append(Engine(settings, consumer))
        return made[-1]

    yield make
    for e in made:
        e.close()


def new_account(client, phone: str = "09121234567") -> str:
    return accounts.create_account(client, phone, 1_000_000)


def by_account(evs: list[dict]) -> dict[str, list[dict]]:
    """Events per account in arrival order, each id once (what a de-duplicating receiver keeps)."""
    out: dict[str, list[dict]] = {}
    seen = set()
    for e in evs:
        if e["id"] not in seen:
            seen.add(e["id"])
            out.setdefault(e["data"]["account_id"], []).append(e)
    return out


# ---- pure: body and signature ----------------------------------------------------------------

def test_signature_is_hmac_sha256_of_time_dot_body():
    body = b'{"id":"evt_1","type":"ping","created":1,"data":{}}'
    header = events.signature("k", body, t=1700000000)
    expected = hmac.new(b"k", b"1700000000." + body, hashlib.sha256).hexdigest()
    assert header == f"t=1700000000,v1={expected}"
    assert events.verify("k", header, body, now=1700000100)
    assert not events.verify("k", header, body + b" ", now=1700000100)  # body changed
    assert not events.verify("other", header, body, now=1700000100)  # wrong secret
    assert not events.verify("k", header, body, now=1700001000)  # too old: a replay


def test_body_keeps_the_contract_fields_in_order():
    doc = orjson.dumps({"data": {"transaction": {"kind": "topup", "id": "t1", "extra": 1}, "balance_toman": "1.000000",
                                 "account_id": "a", "secret_stuff": "x"},
                        "created": 5, "type": "wallet.topup", "id": "evt_x"})
    out = orjson.loads(events.body(doc))
    assert list(out) == ["id", "type", "created", "data"]
    assert list(out["data"]) == ["account_id", "transaction", "balance_toman"]  # nothing else
    assert list(out["data"]["transaction"])[:2] == ["id", "account_id"]
    assert "extra" not in out["data"]["transaction"]


def test_backoff_doubles_with_jitter_up_to_the_cap():
    assert events.backoff_s(1, 5, 900, rand=lambda: 1.0) == 5
    assert events.backoff_s(3, 5, 900, rand=lambda: 1.0) == 20
    assert events.backoff_s(3, 5, 900, rand=lambda: 0.0) == 10  # at most half taken off
    assert events.backoff_s(40, 5, 900, rand=lambda: 1.0) == 900


# ---- delivery on a real Redis -----------------------------------------------------------------

def test_suspension_is_delivered_signed(redis_url, receiver, engines):
    client = store.connect_sync(redis_url)
    acct = new_account(client)
    accounts.suspend(client, acct)
    engine = engines(fast(redis_url, receiver.url))
    wait_for(lambda: receiver.accepted(), 10, "the event")
    got = receiver.received[0]
    sig = got["headers"]["Upgate-Signature"]
    t, v1 = (part.split("=", 1)[1] for part in sig.split(","))
    assert hmac.compare_digest(v1, hmac.new(SECRET.encode(), t.encode() + b"." + got["body"], hashlib.sha256).hexdigest())
    assert abs(int(t) - time.time()) < 30
    event = got["event"]
    assert event["type"] == "account.suspended" and event["data"] == {"account_id": acct, "reason": None}
    assert event["id"].startswith("evt_") and abs(event["created"] - time.time()) < 30
    assert got["headers"]["Content-Type"] == "application/json"
    wait_for(lambda: engine.count("delivered") == 1, 5, "the delivered counter")
    # finished: nothing of it is left to send again
    r = redis.Redis.from_url(redis_url)
    wait_for(lambda: r.xlen(keyspace.WEBHOOK_STREAM) == 0 and not r.exists(keyspace.outbox(acct)), 5, "clean-up")
    assert r.zcard(keyspace.OUTBOX_INDEX) == 0
    time.sleep(0.5)
    assert len(receiver.received) == 1


def test_a_receiver_failing_twice_still_gets_the_event(redis_url, receiver, engines):
    receiver.fail_first = 2
    client = store.connect_sync(redis_url)
    acct = new_account(client)
    accounts.suspend(client, acct)
    engine = engines(fast(redis_url, receiver.url))
    wait_for(lambda: receiver.accepted(), 15, "the event after two failures")
    assert [r["status"] for r in receiver.received] == [500, 500, 200]
    assert len({r["event"]["id"] for r in receiver.received}) == 1  # the same event each time
    assert len({r["body"] for r in receiver.received}) == 1  # byte for byte
    assert engine.count("retried") == 2 and engine.count("delivered") == 1 and engine.count("failed") == 0


def test_an_outage_then_recovery_delivers_the_backlog_in_order_per_account(redis_url, receiver, engines):
    receiver.down = True
    client = store.connect_sync(redis_url)
    accts = [new_account(client, f"0912000000{i}") for i in range(3)]
    engines(fast(redis_url, receiver.url))
    engines(fast(redis_url, receiver.url))  # two nodes share the work
    for round_ in range(4):
        for acct in accts:
            (accounts.suspend if round_ % 2 == 0 else accounts.resume)(client, acct)
    wait_for(lambda: len(receiver.received) >= 6, 10, "attempts during the outage")
    time.sleep(0.5)
    receiver.down = False
    wait_for(lambda: sum(map(len, by_account(receiver.accepted()).values())) == 12, 30, "the whole backlog")
    for acct, evs in by_account(receiver.accepted()).items():
        assert [e["type"] for e in evs] == ["account.suspended", "account.resumed"] * 2, acct
    # the ids a receiver saw first arrive in emission order (their hex tail counts per account)
    for evs in by_account(receiver.accepted()).values():
        assert [int(e["id"][-1], 16) for e in evs] == [1, 2, 3, 4]


def test_given_up_after_the_window_then_listed_and_the_next_event_goes(redis_url, receiver, engines):
    receiver.status = 500
    client = store.connect_sync(redis_url)
    acct = new_account(client)
    accounts.suspend(client, acct)
    accounts.resume(client, acct)
    engine = engines(fast(redis_url, receiver.url, webhook_retry_s=0.6))
    wait_for(lambda: engine.count("failed") >= 1, 15, "the first event given up")
    receiver.status = 200
    wait_for(lambda: receiver.accepted(), 15, "the second event")
    assert receiver.accepted()[0]["type"] == "account.resumed"
    res = CliRunner().invoke(cli, ["webhook", "failed", "--json"], env={"UPGATE_REDIS_URL": redis_url})
    assert res.exit_code == 0, res.output
    failed = json.loads(res.stdout)["failed"]
    assert len(failed) == 1
    f = failed[0]
    assert f["event"]["type"] == "account.suspended" and f["event"]["data"] == {"account_id": acct, "reason": None}
    assert f["attempts"] >= 2 and f["last_status"] == 500
    assert f["first_attempt_at"].endswith("Z") and f["last_attempt_at"] >= f["first_attempt_at"]
    res = CliRunner().invoke(cli, ["webhook", "failed", "--limit", "0"], env={"UPGATE_REDIS_URL": redis_url})
    assert res.exit_code == 1 and res.stderr.startswith("error: limit must be")
    # the receiver is back: the operator sends the given-up event again, and it arrives
    env = {"UPGATE_REDIS_URL": redis_url}
    res = CliRunner().invoke(cli, ["webhook", "resend", f["event"]["id"], "--json"], env=env)
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["resent"] == [f["event"]["id"]]
    wait_for(lambda: any(e["id"] == f["event"]["id"] for e in receiver.accepted()), 15, "the resent event")
    assert client.llen(keyspace.WEBHOOK_FAILED) == 0
    res = CliRunner().invoke(cli, ["webhook", "resend", f["event"]["id"]], env=env)  # sent again already
    assert res.exit_code == 1 and "no failed delivery of event" in res.stderr
    assert CliRunner().invoke(cli, ["webhook", "resend"], env=env).exit_code == 1  # an id or --all


def test_an_event_taken_but_never_added_is_added_by_the_check(redis_url, receiver, engines):
    """A node that dies between the outbox step and XADD: the mover's check adds it again."""
    client = store.connect_sync(redis_url)
    acct = new_account(client)
    accounts.suspend(client, acct)
    res = store.script("outbox_take").call_sync(client, list(keyspace.outbox_keys(acct)), [acct, 0, 2000])
    assert int(res[0]) == 1  # handed out ... and then the node "died"
    engines(fast(redis_url, receiver.url))
    time.sleep(1.0)
    assert not receiver.received  # still out: not due for the check yet
    wait_for(lambda: receiver.accepted(), 10, "the event after the check")
    assert receiver.accepted()[0]["type"] == "account.suspended"


def test_webhook_test_cli_sends_a_signed_ping(receiver, redis_url):
    env = {"UPGATE_REDIS_URL": redis_url, "UPGATE_WEBHOOK_URL": receiver.url, "UPGATE_WEBHOOK_SECRET": SECRET}
    res = CliRunner().invoke(cli, ["webhook", "test", "--json"], env=env)
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["status"] == 200 and out["ok"] is True
    got = receiver.received[0]
    assert got["event"]["type"] == "ping" and got["event"]["id"] == out["event_id"]
    assert events.verify(SECRET, got["headers"]["Upgate-Signature"], got["body"])
    receiver.status = 500
    res = CliRunner().invoke(cli, ["webhook", "test"], env=env)
    assert res.exit_code == 1 and res.stderr.strip() == "error: the receiver did not accept the ping (HTTP 500)"
    res = CliRunner().invoke(cli, ["webhook", "test"], env={**env, "UPGATE_WEBHOOK_SECRET": ""})
    assert res.exit_code == 1 and "webhooks are off" in res.stderr


def test_no_engine_without_url_and_secret(redis_url, make_node):
    node = make_node()
    assert node.ctx.webhooks is None


@pytest.mark.cluster
def test_outbox_on_a_cluster(cluster_url, receiver, engines):
    client = store.connect_sync(cluster_url)
    accts = [new_account(client, f"0912100000{i}") for i in range(6)]
    for acct in accts:
        accounts.suspend(client, acct)
        shard = keyspace.outbox_index(acct, sharded=True)
        assert client.keyslot(shard) == keyspace.slot(acct)  # the index lives in the account's slot
        assert client.zscore(shard, acct) is not None
    engines(fast(cluster_url, receiver.url))
    engines(fast(cluster_url, receiver.url))
    wait_for(lambda: len(receiver.accepted()) == 6, 20, "every account's event")
    assert {e["data"]["account_id"] for e in receiver.accepted()} == set(accts)
    assert len({e["id"] for e in receiver.accepted()}) == 6


def test_a_node_delivers_and_counts_on_metrics(redis_url, receiver, make_node):
    import httpx

    receiver.fail_first = 1
    node = make_node(webhook_url=receiver.url, webhook_secret=SECRET, webhook_timeout_s=1.0,
                     webhook_backoff_s=0.2, webhook_claim_s=2.0, webhook_poll_s=0.1)
    client = store.connect_sync(redis_url)
    accounts.suspend(client, new_account(client))
    wait_for(lambda: receiver.accepted(), 10, "the event")
    text = httpx.get(node.url + "/metrics", timeout=5).text
    assert 'upgate_webhook_deliveries_total{outcome="delivered"} 1.0' in text
    assert 'upgate_webhook_deliveries_total{outcome="retried"} 1.0' in text


def test_a_give_up_that_pushes_the_failed_list_past_its_cap_is_logged_and_counted(
        redis_url, receiver, engines, monkeypatch, caplog):
    """The failed list keeps FAILED_MAX entries; one that the cap pushes out is never silent."""
    from upgate.webhooks import delivery

    monkeypatch.setattr(delivery, "FAILED_MAX", 3)
    receiver.status = 500
    client = store.connect_sync(redis_url)
    client.rpush(keyspace.WEBHOOK_FAILED, *[orjson.dumps({"old": i}) for i in range(3)])
    acct = new_account(client)
    accounts.suspend(client, acct)
    engine = engines(fast(redis_url, receiver.url, webhook_retry_s=0.6))
    with caplog.at_level("WARNING", logger="upgate"):
        wait_for(lambda: engine.count("failed") >= 1, 15, "the event given up")
        wait_for(lambda: engine.count("dropped") >= 1, 5, "the dropped entry counted")
    assert engine.count("dropped") == 1
    assert any("its 1 oldest entries were dropped" in r.getMessage() for r in caplog.records)
    kept = [orjson.loads(x) for x in client.lrange(keyspace.WEBHOOK_FAILED, 0, -1)]
    assert len(kept) == 3 and kept[0]["event"]["type"] == "account.suspended" and {"old": 2} not in kept
