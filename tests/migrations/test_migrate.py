"""`upgate-admin migrate` on data as an older release wrote it (no transaction counters, phones
as typed, no phone index, accounts missing from the newest-first index, two accounts sharing a
phone), while two gateway nodes serve that data: interrupted half-way and resumed, then run
again (which changes nothing). Afterwards money is conserved request by request, the deep audit
is clean, and every phone is canonical and indexed. `--dry-run` says what it would change and
writes nothing; `upgate serve` refuses data newer than it knows."""
from __future__ import annotations

import json
import random
import threading
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal

import httpx
import pytest
from click.testing import CliRunner

from admin_cli.main import cli
from tests.gateway import PEPPER, seed
from upgate import migrations
from upgate.billing import money
from upgate.services import accounts, phone_index, records
from upgate.store import connection as store, keyspace

N = 24
SPELLINGS = ("09120 {} {}", "+98 9120-{}-{}", "۰۹۱۲۰{}{}", "9120{}{}")


def _persian(text: str) -> str:
    return text.translate(str.maketrans("0123456789", "۰۱۲۳۴۵۶۷۸۹"))


def old_dataset(redis_url: str) -> tuple[list[str], list[str]]:
    """N funded accounts with a key each, then rewritten as the release before money of record,
    the phone index and the time index kept them. Returns (account ids, keys)."""
    r = store.connect_sync(redis_url)
    ids, full_keys = [], []
    for i in range(N):
        key, acct, _ = seed(redis_url, balance="1000000", phone=f"09120{i:06d}")
        ids.append(acct)
        full_keys.append(key)
        w = keyspace.wallet(acct)
        r.delete(keyspace.transactions(acct), keyspace.refs(acct))
        r.hdel(w, "credited", "charged")
        a, b = f"{i:06d}"[:3], f"{i:06d}"[3:]
        typed = SPELLINGS[i % 4].format(a, b)
        r.hset(w, "phone", _persian(typed) if "۰" in typed else typed)
        r.zrem(keyspace.ACCOUNTS_BY_TIME, acct)
    r.hset(keyspace.wallet(ids[1]), "phone", "0912 000 0000")  # shares ids[0]'s phone
    for k in phone_keys(r):
        r.delete(k)
    r.delete(keyspace.MIGRATIONS)
    return ids, full_keys


def phone_keys(r) -> list:
    import redis

    if isinstance(r, redis.RedisCluster):
        return r.keys("{p:*", target_nodes=redis.RedisCluster.ALL_NODES)
    return r.keys("{p:*")


def traffic(nodes, keys: list[str], stop: threading.Event, seen: list) -> None:
    rng = random.Random(5)
    with httpx.Client(timeout=30) as http:
        while not stop.is_set():
            node = nodes[rng.randrange(len(nodes))]
            body = {"model": "mock/chat-1", "messages": [{"role": "user", "content": "hi " * rng.randint(1, 30)}],
                    "stream": rng.random() < 0.3}
            resp = http.post(node.base + "/chat/completions", json=body,
                             headers={"Authorization": f"Bearer {rng.choice(keys)}"})
            seen.append(resp.status_code)


def wait_for(cond, timeout: float = 30.0) -> None:
    import time

    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.02)


def wallets(r, ids):
    return {a: r.hgetall(keyspace.wallet(a)) for a in ids}


def test_migrate_while_serving_interrupted_resumed_and_repeated(make_node, redis_url):
    r = store.connect_sync(redis_url)
    ids, keys = old_dataset(redis_url)
    env = {"UPGATE_REDIS_URL": redis_url, "UPGATE_KEY_PEPPER": PEPPER}
    run = lambda *a: CliRunner().invoke(cli, list(a), env=env, catch_exceptions=False)  # noqa: E731

    # the dry run names what it would change, and writes nothing
    before = wallets(r, ids)
    dry = run("migrate", "--dry-run", "--json")
    assert dry.exit_code == 0, dry.output
    would = {m["name"]: m["changed"] for m in json.loads(dry.stdout)["migrations"]}
    assert would == {"transaction-counters": N, "canonical-phones": N + N - 1, "accounts-by-time": N}
    assert wallets(r, ids) == before and not phone_keys(r) and migrations.applied(r) == 0
    assert "needs 3 migration(s)" in migrations.check(r)

    nodes = [make_node(), make_node()]
    stop, seen = threading.Event(), []
    with ThreadPoolExecutor(4) as pool:
        jobs = [pool.submit(traffic, nodes, keys, stop, seen) for _ in range(4)]
        try:
            wait_for(lambda: len(seen) >= 10)
            # interrupted half-way through the first step (a crash after 2 recorded batches)
            def crash(version, done, _n=[0]):
                _n[0] += 1
                wait_for(lambda: len(seen) >= 10 + 3 * _n[0])  # requests land between batches
                if _n[0] == 2:
                    raise KeyboardInterrupt
            with pytest.raises(KeyboardInterrupt):
                migrations.run(r, batch=5, on_batch=crash)
            st = migrations.status(r)
            assert st["applied"] == 0 and st["migrations"][0]["state"] == "in progress"
            assert st["migrations"][0]["resume_after"] == sorted(ids)[9]
            assert sum(r.hexists(keyspace.wallet(a), "credited") for a in ids) == 10
            # resumed: it goes on from the 11th account
            mark = len(seen)
            res = run("migrate", "--json", "--batch", "5")
            assert res.exit_code == 0, res.output
            out = json.loads(res.stdout)
            assert (out["from"], out["to"]) == (0, migrations.LATEST)
            assert [m["changed"] for m in out["migrations"]][0] == N - 10
            # again, from the start: every step finds nothing to change
            r.delete(keyspace.MIGRATIONS)
            again = migrations.run(r, batch=7)
            assert [m["changed"] for m in again["migrations"]] == [0, 0, 0], again
            assert "nothing to migrate" in run("migrate").stdout
            wait_for(lambda: len(seen) >= mark + 10)
        finally:
            stop.set()
            for j in jobs:
                j.result()
    assert seen.count(200) > 20, seen

    # money: every wallet is balance == credited − charged == 1,000,000 − Σ its requests' costs
    for acct in ids:
        view = accounts.show(r, acct)
        assert view["held_micro"] == 0
        recs = records.list_requests(r, acct, limit=1000)
        spent = sum(money.parse_toman(Decimal(x["cost_toman"])) for x in recs)
        assert view["balance_micro"] == money.parse_toman("1000000") - spent, acct
        w = r.hgetall(keyspace.wallet(acct))
        assert int(w[b"balance"]) == int(w[b"credited"]) - int(w[b"charged"])
    deep = run("audit", "--deep", "--json")
    result = json.loads(deep.stdout)
    assert result["mismatches"] == [] and result["unmigrated"] == 0
    assert result["duplicate_phones"] == [{"phone": "+989120000000", "account_ids": sorted(ids[:2])}]
    # phones: canonical, indexed; the shared one waits for a phone change
    for i, acct in enumerate(ids[2:], 2):
        assert accounts.show(r, acct)["phone"] == f"+989120{i:06d}"
        assert phone_index.owner(r, f"+989120{i:06d}") == acct
    assert phone_index.owner(r, "+989120000000") == phone_index.SHARED
    assert r.zcard(keyspace.ACCOUNTS_BY_TIME) == N
    entry = json.loads(run("admin-token", "log", "--json").stdout)["entries"][0]
    assert entry["action"] == "migrate" and entry["after"] == {"version": migrations.LATEST}


def test_serve_refuses_data_newer_than_it_knows(redis_url, tmp_path):
    from tests.test_serve_startup import GOOD_PROVIDERS, assert_one_clean_line, clean_env, serve_refused, write

    r = store.connect_sync(redis_url)
    assert migrations.check(r) is None and migrations.applied(r) == migrations.LATEST  # a new store
    r.hset(keyspace.MIGRATIONS, "version", migrations.LATEST + 1)
    with pytest.raises(migrations.DataTooNew):
        migrations.check(r)
    res = CliRunner().invoke(cli, ["migrate"], env={"UPGATE_REDIS_URL": redis_url, "UPGATE_KEY_PEPPER": PEPPER})
    assert res.exit_code == 1 and "this release knows" in res.stderr
    from tests.procs import ROOT

    env = clean_env(UPGATE_REDIS_URL=redis_url, UPGATE_KEY_PEPPER=PEPPER, PYTHONPATH=str(ROOT),
                    UPGATE_PROVIDERS=str(write(tmp_path / "p.toml", GOOD_PROVIDERS)))
    assert_one_clean_line(serve_refused(env, tmp_path), "newer than this release knows", "migration")


def test_one_migrate_at_a_time(redis_url):
    r = store.connect_sync(redis_url)
    seed(redis_url)
    r.set(keyspace.MIGRATE_LOCK, "someone", px=60_000)
    with pytest.raises(migrations.MigrationRunning):
        migrations.run(r)
    assert migrations.applied(r) == 0


@pytest.mark.cluster
def test_migrate_on_a_redis_cluster(cluster_url):
    """The same old data on a Redis Cluster (the phone index and the wallets in other slots):
    interrupted, resumed, repeated; the audit clean."""
    r = store.connect_sync(cluster_url)
    ids, _keys = old_dataset(cluster_url)

    def stop(version, done, _n=[0]):
        _n[0] += 1
        if _n[0] == 3:
            raise ConnectionError("lost")
    with pytest.raises(ConnectionError):
        migrations.run(r, batch=4, on_batch=stop)
    assert migrations.status(r)["migrations"][0]["resume_after"] == sorted(ids)[11]
    out = migrations.run(r, batch=4)
    assert out["to"] == migrations.LATEST and out["migrations"][0]["changed"] == N - 12
    r.delete(keyspace.MIGRATIONS)
    assert [m["changed"] for m in migrations.run(r, batch=5)["migrations"]] == [0, 0, 0]
    from upgate.services import audit

    result = audit.run(r, deep=True)
    assert result["mismatches"] == [] and result["unmigrated"] == 0
    assert phone_index.owner(r, "+989120000005") == ids[5]
    assert phone_index.owner(r, "+989120000000") == phone_index.SHARED


def test_serve_warns_while_a_migration_is_pending(redis_url, caplog):
    from upgate import server

    seed(redis_url)  # an account, and no migration recorded: pending
    with caplog.at_level("WARNING", logger="upgate"):
        server.check_store(redis_url)
    assert any("needs 3 migration(s)" in r.getMessage() and "upgate-admin migrate" in r.getMessage()
               for r in caplog.records), caplog.text
    migrations.run(store.connect_sync(redis_url))
    caplog.clear()
    with caplog.at_level("WARNING", logger="upgate"):
        server.check_store(redis_url)
    assert not any("migration" in r.getMessage() for r in caplog.records)
