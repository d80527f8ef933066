"""Admin tokens and the admin log: the service on a real Redis, and `upgate-admin admin-token`
through Click's CliRunner on the real command tree."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from admin_cli.main import cli
from tests.gateway import PEPPER
from upgate.services import admin_log, admin_tokens
from upgate.store import connection as store, keyspace


@pytest.fixture
def client(redis_url):
    return store.connect_sync(redis_url)


@pytest.fixture
def run(redis_url):
    def invoke(*args, ok=True):
        res = CliRunner().invoke(cli, [*args, "--json"], catch_exceptions=False,
                                 env={"UPGATE_REDIS_URL": redis_url, "UPGATE_KEY_PEPPER": PEPPER,
                                      "UPGATE_INSECURE_DEV": None})
        if ok:
            assert res.exit_code == 0, (args, res.stdout, res.stderr)
            return json.loads(res.stdout)
        return res
    return invoke


def test_create_stores_only_the_hmac_and_verify_looks_it_up(client, r):
    made = admin_tokens.create(client, PEPPER, "payments")
    token = made["token"]
    assert made == {"name": "payments", "token": token, "read_only": False}
    assert token.startswith("upa_") and len(token) == 44 and token[4:].isalnum()
    dump = json.dumps({k: r.hgetall(k) for k in r.keys("*")})
    assert token not in dump and token[4:] not in dump
    assert admin_tokens.hash_of(token, PEPPER) in r.hgetall(keyspace.ADMIN_TOKENS)
    assert admin_tokens.verify(client, PEPPER, token) == admin_tokens.AdminToken("payments", False)
    assert admin_tokens.verify(client, PEPPER, token[:-1] + ("A" if token[-1] != "A" else "B")) is None
    assert admin_tokens.verify(client, "other-pepper", token) is None
    assert admin_tokens.verify(client, PEPPER, "sk-up-" + "a" * 40) is None


def test_names_are_unique_and_checked_and_refusals_write_nothing(client, r):
    admin_tokens.create(client, PEPPER, "ops", read_only=True)
    before = {k: r.hgetall(k) for k in r.keys("*")}
    with pytest.raises(admin_tokens.TokenNameTaken):
        admin_tokens.create(client, PEPPER, "ops")
    for bad in ("", "a b", "x" * 65, "-lead", "é"):
        with pytest.raises(admin_tokens.InvalidTokenName):
            admin_tokens.create(client, PEPPER, bad)
    with pytest.raises(admin_tokens.PepperMissing):
        admin_tokens.create(client, "", "fresh")
    with pytest.raises(admin_tokens.UnknownToken):
        admin_tokens.revoke(client, "nobody")
    assert {k: r.hgetall(k) for k in r.keys("*")} == before


def test_revoke_removes_lookup_and_publishes(client, r):
    token = admin_tokens.create(client, PEPPER, "desk")["token"]
    sub = r.pubsub()
    sub.subscribe(keyspace.CHANNEL)
    sub.get_message(timeout=1)
    admin_tokens.revoke(client, "desk")
    msg = sub.get_message(timeout=2)
    assert json.loads(msg["data"]) == {"t": "admin_token", "hash": admin_tokens.hash_of(token, PEPPER)}
    assert admin_tokens.verify(client, PEPPER, token) is None
    assert admin_tokens.list_tokens(client) == []
    again = admin_tokens.create(client, PEPPER, "desk")["token"]  # the name is free again
    assert admin_tokens.verify(client, PEPPER, again).name == "desk"


def test_cli_create_list_revoke_log(run):
    made = run("admin-token", "create", "support", "--read-only")
    assert made["read_only"] is True and made["token"].startswith("upa_")
    listed = run("admin-token", "list")["tokens"]
    assert listed == [{"name": "support", "read_only": True, "created_at": listed[0]["created_at"],
                       "last_used_at": None}]
    assert made["token"] not in json.dumps(listed)
    assert run("admin-token", "revoke", "support") == {"name": "support", "revoked": True}
    res = run("admin-token", "revoke", "support", ok=False)
    assert res.exit_code == 1 and res.stderr.strip() == "error: no admin token named 'support'"
    res = run("admin-token", "create", "bad name", ok=False)
    assert res.exit_code == 1 and res.stderr.count("\n") == 1
    entries = run("admin-token", "log")["entries"]
    assert entries[1]["detail"] == {"read_only": "True"}
    assert [(e["actor"], e["action"], e["target"]) for e in entries] == [
        ("cli", "admin_token.revoke", "support"), ("cli", "admin_token.create", "support")]
    assert made["token"] not in json.dumps(entries)


def test_cli_writes_are_logged_and_reads_are_not(run):
    acct = run("account", "create", "--phone", "09120000000", "--balance", "10")["account_id"]
    run("account", "show", acct)
    run("account", "topup", acct, "5")
    key = run("key", "create", acct, "--name", "k")
    run("key", "list", acct)
    log = run("admin-token", "log", "--limit", "10")["entries"]
    assert [e["action"] for e in log] == ["key.create", "account.topup", "account.create"]
    assert log[1]["target"] == acct and log[1]["detail"]["amount_toman"] == "5.000000"
    assert log[1]["before"] == {"balance_toman": "10.000000"} and log[1]["after"] == {"balance_toman": "15.000000"}
    assert log[0]["detail"] == {"name": "k"} and log[2]["detail"] == {"phone": "09120000000", "balance_toman": "10"}
    assert key["key"] not in json.dumps(log)


def test_log_is_bounded(client, monkeypatch):
    monkeypatch.setattr(admin_log, "MAX_ENTRIES", 5)
    for i in range(8):
        admin_log.record(client, "cli", "x", str(i))
    assert [e["target"] for e in admin_log.read(client, 5)] == ["7", "6", "5", "4", "3"]
    with pytest.raises(admin_log.InvalidLimit):
        admin_log.read(client, 0)


@pytest.mark.cluster
def test_tokens_log_and_pages_on_a_cluster(cluster_url):
    from upgate.services import accounts

    client = store.connect_sync(cluster_url)
    token = admin_tokens.create(client, PEPPER, "ops")["token"]
    assert admin_tokens.verify(client, PEPPER, token).name == "ops"
    assert [t["name"] for t in admin_tokens.list_tokens(client)] == ["ops"]
    admin_tokens.revoke(client, "ops")
    assert admin_tokens.verify(client, PEPPER, token) is None
    admin_log.record(client, "cli", "x", "1")
    assert admin_log.read(client, 1)[0]["target"] == "1"
    ids = sorted(accounts.create_account(client, f"0912000000{i}") for i in range(3))
    first, cursor = accounts.page(client, limit=2)
    rest, end = accounts.page(client, limit=2, cursor=cursor)
    assert [v["account_id"] for v in first + rest] == ids and end is None
