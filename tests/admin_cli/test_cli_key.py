"""`upgate-admin key …` through Click's CliRunner against the private real redis-server,
plus a real subprocess run of the console script."""
from __future__ import annotations

import json
import os
import subprocess
import time
from datetime import datetime, timedelta, timezone

import pytest
import redis
from click.testing import CliRunner

from admin_cli.main import cli
from tests.admin_cli.test_cli_account import admin_command, ok_json, refused, snapshot
from upgate.billing import jalali
from upgate.services import keys
from upgate.store import keyspace

PEPPER = "cli-pepper"
UNKNOWN_ACCOUNT = "00000000-0000-4000-8000-000000000000"


def iso_in(days: int) -> str:
    return (datetime.now(timezone.utc) + timedelta(days=days)).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture
def run(redis_url):
    def invoke(*args: str, pepper: str | None = PEPPER, insecure: str | None = None):
        env = {"UPGATE_REDIS_URL": redis_url, "UPGATE_KEY_PEPPER": pepper, "COLUMNS": "250",
               "UPGATE_INSECURE_DEV": insecure}
        return CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)
    return invoke


@pytest.fixture
def acct(run):
    return ok_json(run("account", "create", "--phone", "09121234567", "--balance", "1000", "--json"))["account_id"]


@pytest.fixture
def events(redis_url):
    p = redis.Redis.from_url(redis_url).pubsub()
    p.subscribe(keyspace.CHANNEL)
    assert p.get_message(timeout=2)["type"] == "subscribe"

    def drain(wait: float = 0.3) -> list[dict]:
        out = []
        while (m := p.get_message(timeout=wait)) is not None:
            if m["type"] == "message":
                out.append(json.loads(m["data"]))
        return out

    yield drain
    p.close()


def assert_no_plain_key(redis_url: str, full: str) -> None:
    raw = redis.Redis.from_url(redis_url)
    for k in raw.keys("*"):
        assert full[6:].encode() not in k and full[6:].encode() not in raw.dump(k)


def test_create_update_list_revoke(run, acct, r, redis_url, events):
    expires = iso_in(30)
    out = ok_json(run("key", "create", acct, "--name", "ci", "--monthly-limit", "200000.5",
                      "--allowed-models", "acme/chat-1,acme/chat-1:free", "--rpm", "120",
                      "--expires", expires, "--json"))
    assert list(out)[:2] == ["key", "key_id"] and out["prefix"] == out["key"][:10]
    assert out["rate_limit_rpm"] == out["rpm"] == 120 and out["status"] == out["state"] == "active"
    full, kid, prefix = out["key"], out["key_id"], out["prefix"]
    assert keys.well_formed(full) and prefix == full[:10] and prefix.startswith("sk-up-")
    h = keys.digest(full, PEPPER)
    assert r.get(keyspace.keyhash(h)) == f"{acct}:{kid}"  # the gateway (same pepper) finds it
    assert_no_plain_key(redis_url, full)
    assert events() == []

    listed = ok_json(run("key", "list", acct, "--json"))
    assert listed["account_id"] == acct and len(listed["keys"]) == 1
    entry = listed["keys"][0]
    assert entry.pop("created_at").endswith("Z")
    assert entry == {"key_id": kid, "account_id": acct, "name": "ci", "prefix": prefix,
                     "last4": full[-4:], "rate_limit_rpm": 120, "rpm": 120,
                     "monthly_limit_toman": "200000.500000",
                     "spent_this_month_toman": "0.000000", "held_toman": "0.000000",
                     "allowed_models": ["acme/chat-1", "acme/chat-1:free"],
                     "expires_at": expires, "status": "active", "state": "active"}

    r.hset(keyspace.key_record(acct, kid), mapping={"spent:" + jalali.month_key(): 1_500_000, "held": 5})
    out = ok_json(run("key", "update", kid, "--rpm", "600", "--no-monthly-limit", "--all-models",
                      "--no-expiry", "--name", "", "--json"))
    assert out["rpm"] == 600 and out["monthly_limit_toman"] is None and out["allowed_models"] is None
    assert out["expires_at"] is None and out["name"] is None and out["state"] == "active"
    assert out["spent_this_month_toman"] == "1.500000" and out["held_toman"] == "0.000005"
    assert events() == [{"t": "key", "hash": h}]
    record = r.hgetall(keyspace.key_record(acct, kid))
    assert record["spent:" + jalali.month_key()] == "1500000" and record["held"] == "5"
    assert not {"monthly_limit", "allowed_models", "expires_at", "name"} & set(record)

    out = ok_json(run("key", "update", kid, "--monthly-limit", "10", "--allowed-models", "acme/x",
                      "--json"))
    assert out["monthly_limit_toman"] == "10.000000" and out["allowed_models"] == ["acme/x"]
    assert events() == [{"t": "key", "hash": h}]

    table = run("key", "list", acct)
    assert table.exit_code == 0
    assert keys.display(prefix, full[-4:]) in table.stdout and "active" in table.stdout
    assert full not in table.stdout and full[6:] not in table.stdout and h not in table.stdout

    out = ok_json(run("key", "revoke", kid, "--json"))
    assert {k: out[k] for k in ("key_id", "account_id", "revoked", "changed", "status")} == {
        "key_id": kid, "account_id": acct, "revoked": True, "changed": True, "status": "revoked"}
    assert r.get(keyspace.keyhash(h)) is None
    assert r.hget(keyspace.key_record(acct, kid), "revoked") == "1"
    assert events() == [{"t": "key", "hash": h}]
    assert ok_json(run("key", "list", acct, "--json"))["keys"][0]["state"] == "revoked"
    res = run("key", "revoke", kid)
    assert res.exit_code == 0 and "already was revoked" in res.stdout
    refused(run("key", "update", kid, "--rpm", "5"), "revoked")


def test_create_table_mode_shows_the_key_once_with_a_warning(run, acct, redis_url):
    res = run("key", "create", acct)
    assert res.exit_code == 0, res.output
    full = next(w for w in res.stdout.split() if w.startswith("sk-up-") and len(w) == 46)
    assert keys.well_formed(full)
    assert res.stderr.splitlines() == [
        "warning: the full key is shown only this once; store it now (only its prefix and last four are kept)"]
    listing = run("key", "list", acct).stdout + run("key", "list", acct, "--json").stdout
    assert full not in listing and full[6:] not in listing
    assert_no_plain_key(redis_url, full)


def test_create_json_mode_prints_nothing_but_the_object(run, acct):
    res = run("key", "create", acct, "--json")
    assert res.exit_code == 0 and res.stderr == ""
    json.loads(res.stdout)


def test_pepper_required_unless_insecure_dev(run, acct, redis_url, r):
    before = snapshot(redis_url)
    refused(run("key", "create", acct, pepper=None), "UPGATE_KEY_PEPPER is not set")
    refused(run("key", "create", acct, pepper=None, insecure="0"), "UPGATE_KEY_PEPPER")
    assert snapshot(redis_url) == before

    from upgate.settings import DEV_PEPPER  # the pepper `upgate serve --insecure-dev` uses

    res = run("key", "create", acct, "--json", pepper=None, insecure="1")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert r.get(keyspace.keyhash(keys.digest(out["key"], DEV_PEPPER))) == f"{acct}:{out['key_id']}"
    assert "development pepper" in res.stderr


def test_unknown_allowed_model_is_a_warning_not_a_refusal(run, acct, redis_url, tmp_path):
    (tmp_path / "p.toml").write_text('[providers.acme]\nbase_url = "http://127.0.0.1:1/v1"\n'
                                     'api_key_env = "X_UNSET"\n')
    (tmp_path / "c.toml").write_text('[[models]]\nid = "acme/chat-1"\nprovider = "acme"\n'
                                     'prompt_toman_per_million = "1"\ncompletion_toman_per_million = "1"\n')
    assert run("models", "load", str(tmp_path / "c.toml"), "--providers", str(tmp_path / "p.toml")).exit_code == 0
    res = run("key", "create", acct, "--allowed-models", "acme/chat-1,acme/later", "--json")
    assert res.exit_code == 0
    assert res.stderr.splitlines() == ["warning: not in the catalog in force (allowed anyway): acme/later"]


def _past() -> str:
    return (datetime.now(timezone.utc) - timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%S")


BAD_CREATE = [
    ((UNKNOWN_ACCOUNT,), "unknown account"),
    (("not-an-account",), "unknown account"),
    (("{acct}", "--rpm", "0"), "rpm"),
    (("{acct}", "--rpm", "601"), "rpm"),
    (("{acct}", "--rpm", "abc"), "rpm"),
    (("{acct}", "--rpm", "60.0"), "rpm"),
    (("{acct}", "--rpm", "-1"), "rpm"),
    (("{acct}", "--monthly-limit", "abc"), "monthly_limit_toman"),
    (("{acct}", "--monthly-limit", "1.1234567"), "six fractional"),
    (("{acct}", "--monthly-limit", "1e5"), "plain decimal"),
    (("{acct}", "--monthly-limit", "Infinity"), "plain decimal"),
    (("{acct}", "--monthly-limit", "9007199254.740993"), "2^53"),
    (("{acct}", "--monthly-limit", "-10"), "negative"),
    (("{acct}", "--expires", "next week"), "ISO 8601"),
    (("{acct}", "--expires", "2030-02-30"), "ISO 8601"),
    (("{acct}", "--expires", "{past}"), "past"),
    (("{acct}", "--allowed-models", "OpenAI/gpt-4o"), "malformed model id"),
    (("{acct}", "--allowed-models", "gpt-4o"), "malformed model id"),
    (("{acct}", "--allowed-models", "acme/chat:turbo"), "malformed model id"),
    (("{acct}", "--allowed-models", "acme/ok,acme/Bad"), "malformed model id"),
    (("{acct}", "--allowed-models", ","), "at least one"),
    (("{acct}", "--name", "x" * 101), "name"),
]


@pytest.mark.parametrize("args,needle", BAD_CREATE, ids=[" ".join(a)[:40] for a, _ in BAD_CREATE])
def test_create_refusals(run, acct, redis_url, events, args, needle):
    args = [a.replace("{acct}", acct).replace("{past}", _past()) for a in args]
    before = snapshot(redis_url)
    refused(run("key", "create", *args), needle)
    refused(run("key", "create", *args, "--json"), needle)
    assert snapshot(redis_url) == before
    assert events() == []


BAD_UPDATE = [
    (("nope", "--rpm", "5"), "unknown key"),
    (("0123456789abcdef", "--rpm", "5"), "unknown key"),
    (("{kid}",), "nothing to change"),
    (("{kid}", "--rpm", "0"), "rpm"),
    (("{kid}", "--rpm", "601"), "rpm"),
    (("{kid}", "--monthly-limit", "abc"), "monthly_limit_toman"),
    (("{kid}", "--monthly-limit", "0.0000001"), "six fractional"),
    (("{kid}", "--monthly-limit", "1E2"), "plain decimal"),
    (("{kid}", "--monthly-limit", "99999999999"), "2^53"),
    (("{kid}", "--expires", "soon"), "ISO 8601"),
    (("{kid}", "--expires", "2001-01-01"), "past"),
    (("{kid}", "--allowed-models", "acme"), "malformed model id"),
    (("{kid}", "--monthly-limit", "5", "--no-monthly-limit"), "contradict"),
    (("{kid}", "--allowed-models", "acme/a", "--all-models"), "contradict"),
    (("{kid}", "--expires", "2031-01-01", "--no-expiry"), "contradict"),
]


@pytest.mark.parametrize("args,needle", BAD_UPDATE, ids=[" ".join(a)[:40] for a, _ in BAD_UPDATE])
def test_update_refusals(run, acct, redis_url, events, args, needle):
    kid = ok_json(run("key", "create", acct, "--json"))["key_id"]
    args = [a.replace("{kid}", kid) for a in args]
    before = snapshot(redis_url)
    refused(run("key", "update", *args), needle)
    refused(run("key", "update", *args, "--json"), needle)
    assert snapshot(redis_url) == before
    assert events() == []


def test_revoke_and_list_refusals(run, acct, redis_url, events):
    ok_json(run("key", "create", acct, "--json"))
    before = snapshot(redis_url)
    refused(run("key", "revoke", "nope"), "unknown key")
    refused(run("key", "revoke", "0123456789abcdef", "--json"), "unknown key")
    refused(run("key", "list", UNKNOWN_ACCOUNT), "unknown account")
    refused(run("key", "list", "bad-id", "--json"), "unknown account")
    assert snapshot(redis_url) == before
    assert events() == []


def test_expired_key_is_listed_as_expired(run, acct, r):
    kid = ok_json(run("key", "create", acct, "--expires", iso_in(1), "--json"))["key_id"]
    r.hset(keyspace.key_record(acct, kid), "expires_at", int(time.time() * 1000) - 1000)
    assert ok_json(run("key", "list", acct, "--json"))["keys"][0]["state"] == "expired"
    assert "expired" in run("key", "list", acct).stdout


def test_every_command_documents_an_example():
    from admin_cli.key import key

    for name, command in key.commands.items():
        assert "Example" in (command.help or ""), name
        assert any(p.name == "as_json" for p in command.params), name


def test_console_script_key_lifecycle(redis_url, r):
    env = {**os.environ, "UPGATE_REDIS_URL": redis_url, "UPGATE_KEY_PEPPER": PEPPER, "COLUMNS": "200"}
    env.pop("UPGATE_INSECURE_DEV", None)
    run = lambda *a: subprocess.run([*admin_command(), *a], env=env, capture_output=True,  # noqa: E731
                                    text=True, timeout=60)
    acct = json.loads(run("account", "create", "--phone", "09121234567", "--json").stdout)["account_id"]
    res = run("key", "create", acct, "--rpm", "30", "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert list(out)[:2] == ["key", "key_id"] and out["prefix"] == out["key"][:10]
    assert r.get(keyspace.keyhash(keys.digest(out["key"], PEPPER))) == f"{acct}:{out['key_id']}"
    res = run("key", "update", out["key_id"], "--rpm", "601")
    assert res.returncode == 1 and res.stdout == ""
    assert res.stderr.splitlines() == ["error: rate_limit_rpm must be a whole number from 1 to 600, got 601"] or \
        res.stderr.splitlines() == ["error: rpm must be a whole number from 1 to 600, got 601"]  # an older install
    res = run("key", "list", acct)
    assert res.returncode == 0 and out["key"] not in res.stdout and out["key_id"] in res.stdout
    res = run("--json", "key", "revoke", out["key_id"])
    assert res.returncode == 0 and json.loads(res.stdout)["revoked"] is True
    assert r.get(keyspace.keyhash(keys.digest(out["key"], PEPPER))) is None
