"""upgate/services/transactions.py and lua/credit.lua against a private real redis-server and the local
3-master Cluster: shapes, idempotency under real concurrency (threads and processes), refusals
that write nothing, the migration of accounts from before transactions, WAIT on a replica."""
from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time

import pytest
import redis

from tests.procs import RedisServer
from upgate.billing import money
from upgate.services import accounts, audit, transactions
from upgate.store import connection as store, keyspace

UNKNOWN = "00000000-0000-4000-8000-000000000000"


def snapshot(client) -> dict:
    if isinstance(client, redis.RedisCluster):
        keys = client.keys(target_nodes=redis.RedisCluster.ALL_NODES)
    else:
        keys = client.keys("*")
    return {k: client.dump(k) for k in keys}


@pytest.fixture
def client(redis_url):
    return store.connect_sync(redis_url)


@pytest.fixture
def acct(client):
    return accounts.create_account(client, "09121234567", 1000 * money.MICRO)


def test_topup_shape_and_record(client, acct):
    out = transactions.topup(client, acct, "250.25", ref="zp-1", note="card", actor="ops")
    assert list(out) == ["transaction", "balance_toman", "replayed"]
    t = out["transaction"]
    assert list(t) == ["id", "account_id", "time", "kind", "amount_toman", "balance_after_toman",
                       "ref", "note", "actor"]
    assert t["kind"] == "topup" and t["amount_toman"] == "250.250000"
    assert t["balance_after_toman"] == out["balance_toman"] == "1250.250000"
    assert t["ref"] == "zp-1" and t["note"] == "card" and t["actor"] == "ops" and t["account_id"] == acct
    assert t["time"].endswith("Z") and t["id"].startswith("txn_") and out["replayed"] is False
    listed = transactions.list_transactions(client, acct)
    assert [x["kind"] for x in listed] == ["topup", "opening"]  # newest first
    assert listed[0] == t and listed[1]["amount_toman"] == "1000.000000"


def test_same_ref_replays_the_first_and_changes_nothing(client, acct):
    first = transactions.topup(client, acct, "100", ref="p-7")
    before = snapshot(client)
    again = transactions.topup(client, acct, "100", ref="p-7", note="other note ignored")
    assert again == {**first, "replayed": True}
    money_of = lambda snap: {k: v for k, v in snap.items() if k != keyspace.ADMIN_LOG.encode()}  # noqa: E731
    assert money_of(snapshot(client)) == money_of(before)
    # the admin log says it was a replay: not a second top-up
    from upgate.services import admin_log

    replay = admin_log.read(client, 1)[0]
    assert (replay["action"], replay["replay"], replay["before"], replay["after"]) == ("account.topup", True, None, None)
    with pytest.raises(transactions.IdempotencyConflict, match="already used for a topup of 100 toman"):
        transactions.topup(client, acct, "101", ref="p-7")
    with pytest.raises(transactions.IdempotencyConflict):
        transactions.adjust(client, acct, "100", note="x", ref="p-7")  # another kind
    assert money_of(snapshot(client)) == money_of(before)


def test_negative_topup_is_an_adjustment_and_adjust_needs_a_note(client, acct):
    out = transactions.topup(client, acct, "-2000")
    assert out["transaction"]["kind"] == "adjustment" and out["balance_toman"] == "-1000.000000"
    out = transactions.adjust(client, acct, "1500.5", note="refund: outage")
    assert out["transaction"]["kind"] == "adjustment" and out["balance_toman"] == "500.500000"
    with pytest.raises(transactions.InvalidNote):
        transactions.adjust(client, acct, "5", note="")


@pytest.mark.parametrize("call, exc", [
    (lambda c, a: transactions.topup(c, UNKNOWN, "10"), accounts.UnknownAccount),
    (lambda c, a: transactions.topup(c, "nope", "10"), accounts.UnknownAccount),
    (lambda c, a: transactions.topup(c, a, "0"), accounts.InvalidAmount),
    (lambda c, a: transactions.topup(c, a, "1e3"), accounts.InvalidAmount),
    (lambda c, a: transactions.topup(c, a, "1.0000001"), accounts.InvalidAmount),
    (lambda c, a: transactions.topup(c, a, "9007199255"), accounts.InvalidAmount),
    (lambda c, a: transactions.topup(c, a, "9007199000"), accounts.BalanceOutOfRange),
    (lambda c, a: transactions.topup(c, a, "10", ref=""), transactions.InvalidRef),
    (lambda c, a: transactions.topup(c, a, "10", ref="x" * 129), transactions.InvalidRef),
    (lambda c, a: transactions.topup(c, a, "10", ref="a\nb"), transactions.InvalidRef),
    (lambda c, a: transactions.topup(c, a, "10", ref="a\x00b"), transactions.InvalidRef),
    (lambda c, a: transactions.topup(c, a, "10", note="x\x1b[31m"), transactions.InvalidNote),
    (lambda c, a: transactions.adjust(c, a, "10", note=None), transactions.InvalidNote),
])
def test_refusals_write_nothing(client, acct, call, exc):
    before = snapshot(client)
    with pytest.raises(exc) as e:
        call(client, acct)
    assert "\n" not in str(e.value)
    assert snapshot(client) == before


def test_ref_limits(client, acct):
    assert transactions.topup(client, acct, "1", ref="x" * 128)["transaction"]["ref"] == "x" * 128
    assert transactions.InvalidRef.field == "ref" and accounts.InvalidAmount.field == "amount_toman"


def _race_threads(url: str, acct: str, n: int) -> list[dict]:
    out, barrier = [], threading.Barrier(n)

    def one():
        c = store.connect_sync(url)
        barrier.wait()
        out.append(transactions.topup(c, acct, "77.5", ref="gateway-ref-1"))

    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def _proc_topup(url, acct, start_at, q):
    while time.time() < start_at:
        time.sleep(0.001)
    res = []
    c = store.connect_sync(url)
    for _ in range(5):
        res.append(transactions.topup(c, acct, "77.5", ref="gateway-ref-1"))
    q.put(res)


def _race_processes(url: str, acct: str, n: int) -> list[dict]:
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    start_at = time.time() + 3  # every process imported and connected by then
    procs = [ctx.Process(target=_proc_topup, args=(url, acct, start_at, q)) for _ in range(n)]
    for p in procs:
        p.start()
    out = []
    for _ in procs:
        out += q.get(timeout=60)
    for p in procs:
        p.join(10)
    return out


def _check_race(client, acct, results):
    first = [r for r in results if not r["replayed"]]
    assert len(first) == 1, "exactly one caller credits"
    assert all(r["transaction"] == first[0]["transaction"] for r in results)
    view = accounts.show(client, acct)
    assert view["balance_micro"] == 1077_500_000
    assert [t["kind"] for t in transactions.list_transactions(client, acct)] == ["topup", "opening"]
    assert audit.run(client)["mismatches"] == []


@pytest.mark.parametrize("how", ["threads", "processes"])
def test_racing_topups_with_one_ref_credit_once(redis_url, client, acct, how):
    race = _race_threads if how == "threads" else _race_processes
    _check_race(client, acct, race(redis_url, acct, 16 if how == "threads" else 4))


@pytest.mark.cluster
@pytest.mark.parametrize("how", ["threads", "processes"])
def test_racing_topups_with_one_ref_credit_once_on_a_cluster(cluster_url, how):
    client = store.connect_sync(cluster_url)
    acct = accounts.create_account(client, "09121234567", 1000 * money.MICRO)
    race = _race_threads if how == "threads" else _race_processes
    _check_race(client, acct, race(cluster_url, acct, 16 if how == "threads" else 4))


def test_an_account_from_before_gets_an_honest_opening(client, r):
    acct = accounts.create_account(client, "09121234567", 0)
    w = keyspace.wallet(acct)
    # as the store held it before this change: a bare balance, no counters, no log
    r.delete(keyspace.transactions(acct))
    r.hdel(w, "credited", "charged")
    r.hset(w, "balance", 4_200_000)
    assert audit.run(client)["unmigrated"] == 1  # the audit reads only: it says so, writes nothing
    assert r.hget(w, "credited") is None
    from upgate import migrations

    assert migrations.run(client)["migrations"][0]["changed"] == 1
    assert audit.run(client)["mismatches"] == [] and audit.run(client)["unmigrated"] == 0
    txns = transactions.list_transactions(client, acct)
    assert [(t["kind"], t["amount_toman"], t["actor"]) for t in txns] == [("opening", "4.200000", "migration")]
    assert r.hget(w, "credited") == "4200000" and r.hget(w, "charged") == "0"
    transactions.migrate(client, acct)  # idempotent
    assert len(transactions.list_transactions(client, acct)) == 1

    # a negative balance becomes an adjustment; a top-up is the first script to see it
    r.delete(keyspace.transactions(acct))
    r.hdel(w, "credited", "charged")
    r.hset(w, "balance", -1_000_000)
    transactions.topup(client, acct, "3")
    assert [(t["kind"], t["amount_toman"]) for t in transactions.list_transactions(client, acct)] == [
        ("topup", "3.000000"), ("adjustment", "-1.000000")]
    assert audit.run(client)["mismatches"] == []


def test_legacy_accounts_topup_still_speaks_micro(client, acct):
    assert accounts.topup(client, acct, 2_500_000) == 1002_500_000
    assert accounts.topup(client, acct, -2_500_000) == 1000_000_000


# ---- durable once acknowledged ----------------------------------------------------------

@pytest.fixture
def replicated():
    master = RedisServer().start()
    replica = RedisServer(extra=["--replicaof", "127.0.0.1", str(master.port)]).start()
    m, rep = redis.Redis(port=master.port), redis.Redis(port=replica.port)
    deadline = time.monotonic() + 15
    while int(m.info("replication").get("connected_slaves", 0)) < 1 or \
            rep.info("replication").get("master_link_status") != "up":
        assert time.monotonic() < deadline, "the replica never connected"
        time.sleep(0.05)
    yield master, replica
    if replica.proc is not None and replica.proc.poll() is None:
        os.kill(replica.proc.pid, signal.SIGCONT)
    replica.close()
    master.close()


def test_a_topup_waits_for_the_replica(replicated, monkeypatch):
    master, replica = replicated
    client = store.connect_sync(master.url)
    acct = accounts.create_account(client, "09121234567", 0)
    out = transactions.topup(client, acct, "500", ref="pay-1")
    # answered only once the replica had it: read it there at once
    rep = redis.Redis(port=replica.port)
    assert rep.hget(keyspace.wallet(acct), "balance") == b"500000000"
    assert rep.hget(keyspace.refs(acct), "pay-1") is not None
    assert out["replayed"] is False

    # a replica that stops answering: the caller is told, not given a success
    monkeypatch.setattr(transactions, "REPLICA_WAIT_MS", 300)
    os.kill(replica.proc.pid, signal.SIGSTOP)
    with pytest.raises(transactions.NotDurable, match="no replica confirmed") as e:
        transactions.topup(client, acct, "10", ref="pay-2")
    assert e.value.result["balance_toman"] == "510.000000"  # applied on the master
    os.kill(replica.proc.pid, signal.SIGCONT)
    # the same ref again: nothing more is credited, and this time the replica confirms it
    again = transactions.topup(client, acct, "10", ref="pay-2")
    assert again["replayed"] is True and again["balance_toman"] == "510.000000"
    assert rep.hget(keyspace.wallet(acct), "balance") == b"510000000"


@pytest.fixture(scope="module")
def replicated_cluster():
    from tests.procs import RedisCluster

    cluster = RedisCluster(replicas=1).start()
    yield cluster
    for n in cluster.nodes:
        if n.proc is not None and n.proc.poll() is None:
            os.kill(n.proc.pid, signal.SIGCONT)
    cluster.close()


@pytest.mark.cluster
def test_a_topup_on_a_cluster_waits_for_the_replica_of_its_accounts_master(replicated_cluster, monkeypatch):
    """On a Cluster the WAIT goes to the master that owns the wallet's slot, on the connection
    that ran the top-up: once answered, that master's replica has it, for accounts on every master."""
    client = store.connect_sync(replicated_cluster.url)
    seen_masters = set()
    for n in range(12):
        acct = accounts.create_account(client, f"091212345{n:02d}", 0)
        wallet = keyspace.wallet(acct)
        master = client.get_node_from_key(wallet)
        seen_masters.add(master.name)
        transactions.topup(client, acct, "7", ref=f"pay-{n}")
        rep = redis.Redis(port=_replica_of(replicated_cluster, master.port).port)
        rep.execute_command("READONLY")  # a cluster replica answers reads of its master's slots
        assert rep.hget(wallet, "balance") == b"7000000"
        assert rep.hget(keyspace.refs(acct), f"pay-{n}") is not None
    assert len(seen_masters) == 3

    # the replica of one account's master stops: that top-up is reported as not durable
    monkeypatch.setattr(transactions, "REPLICA_WAIT_MS", 300)
    master = client.get_node_from_key(keyspace.wallet(acct))
    replica = _replica_of(replicated_cluster, master.port)
    os.kill(replica.proc.pid, signal.SIGSTOP)
    try:
        with pytest.raises(transactions.NotDurable, match="no replica confirmed"):
            transactions.topup(client, acct, "1", ref="pay-late")
    finally:
        os.kill(replica.proc.pid, signal.SIGCONT)
    again = transactions.topup(client, acct, "1", ref="pay-late")
    assert again["replayed"] is True and again["balance_toman"] == "8.000000"


def _replica_of(cluster, master_port: int):
    """The cluster's replica of the master on `master_port`."""
    [replica] = [n for n in cluster.nodes
                 if redis.Redis(port=n.port).info("replication").get("master_port") == master_port]
    return replica


def test_the_cli_says_when_no_replica_confirmed(replicated, monkeypatch):
    from click.testing import CliRunner

    from admin_cli.main import cli

    master, replica = replicated
    client = store.connect_sync(master.url)
    acct = accounts.create_account(client, "09121234567", 0)
    monkeypatch.setattr(transactions, "REPLICA_WAIT_MS", 300)
    os.kill(replica.proc.pid, signal.SIGSTOP)
    res = CliRunner().invoke(cli, ["account", "topup", acct, "10", "--ref", "pay-9", "--json"],
                             env={"UPGATE_REDIS_URL": master.url})
    os.kill(replica.proc.pid, signal.SIGCONT)
    assert res.exit_code == 1 and res.stdout == ""
    assert len(res.stderr.splitlines()) == 1 and "no replica confirmed" in res.stderr
    assert "same ref" in res.stderr


def test_account_create_names_the_account_when_no_replica_confirmed(replicated, monkeypatch):
    """The account and its opening balance exist on the master even when no replica confirmed
    them: the operator must be told which account, or a second `create` credits the opening
    balance again on a second account."""
    from click.testing import CliRunner

    from admin_cli.main import cli

    master, replica = replicated
    client = store.connect_sync(master.url)
    monkeypatch.setattr(transactions, "REPLICA_WAIT_MS", 300)
    os.kill(replica.proc.pid, signal.SIGSTOP)
    res = CliRunner().invoke(cli, ["account", "create", "--phone", "09121234567", "--balance", "500",
                                   "--json"], env={"UPGATE_REDIS_URL": master.url})
    os.kill(replica.proc.pid, signal.SIGCONT)
    [acct] = [v["account_id"] for v in accounts.list_accounts(client)]
    assert res.exit_code == 1 and res.stdout == ""
    assert len(res.stderr.splitlines()) == 1 and "no replica confirmed" in res.stderr
    assert acct in res.stderr and "create it again" in res.stderr
