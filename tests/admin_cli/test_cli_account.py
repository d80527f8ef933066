"""`upgate-admin account …` through Click's CliRunner against the private real redis-server,
plus real subprocess runs of the console script."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner

from admin_cli.main import cli
from upgate.billing import money
from upgate.store import keyspace

UNKNOWN = "00000000-0000-4000-8000-000000000000"


def snapshot(redis_url: str) -> dict:
    raw = redis.Redis.from_url(redis_url)
    return {k: raw.dump(k) for k in raw.keys("*")}


@pytest.fixture
def run(redis_url):
    def invoke(*args: str):
        env = {"UPGATE_REDIS_URL": redis_url, "UPGATE_KEY_PEPPER": "pep", "COLUMNS": "200",
               "UPGATE_INSECURE_DEV": None, "UPGATE_FREE_QUOTA_DEFAULT": None}
        return CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)
    return invoke


def ok_json(res) -> dict:
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def refused(res, *needles: str) -> str:
    """Exit 1, nothing on stdout, exactly one line on stderr, no traceback."""
    assert res.exit_code == 1, res.output
    assert res.stdout == ""
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    assert "Traceback" not in res.stderr
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def acct(run):
    return ok_json(run("account", "create", "--phone", "09121234567", "--balance", "1000", "--json"))["account_id"]


def test_create_json_shape_exactly(run, r):
    out = ok_json(run("account", "create", "--phone", "+989121234567", "--balance", "50000.5", "--json"))
    # the account object (OPERATORS.md), the CLI's older names beside it (never instead)
    assert list(out) == ["id", "phone", "status", "balance_toman", "held_toman", "available_toman",
                         "free_quota_per_day", "low_balance_toman", "created_at", "account_id",
                         "phone_masked", "suspended", "free_quota", "free_quota_is_default",
                         "free_used_today", "key_count"]
    assert out["account_id"] == out["id"] and out["balance_toman"] == "50000.500000"
    assert r.hget(keyspace.wallet(out["account_id"]), "balance") == "50000500000"
    out = ok_json(run("--json", "account", "create", "--phone", "09120000000"))  # root-level --json
    assert r.hget(keyspace.wallet(out["account_id"]), "balance") == "0"


def test_a_phone_in_use_is_refused_with_exit_1(run, r):
    ok_json(run("account", "create", "--phone", "۰۹۱۲-۱۲۳-۴۵۶۷", "--json"))  # Persian digits, dashes
    res = run("account", "create", "--phone", "+98 912 123 4567")
    assert res.exit_code == 1 and "already belongs to another account" in res.stderr
    assert r.scard(keyspace.ACCOUNTS) == 1


def test_create_table_mode(run):
    res = run("account", "create", "--phone", "09121234567")
    assert res.exit_code == 0 and res.stdout.startswith("created account ") and res.stderr == ""


def test_topup_show_list(run, acct, r):
    out = ok_json(run("account", "topup", acct, "250.25", "--json"))
    assert list(out) == ["transaction", "balance_toman", "replayed"]
    assert out["balance_toman"] == "1250.250000" and out["replayed"] is False
    assert out["transaction"]["kind"] == "topup" and out["transaction"]["amount_toman"] == "250.250000"
    out = ok_json(run("account", "topup", acct, "-2000", "--json"))  # a negative adjustment
    assert out["balance_toman"] == "-749.750000"
    assert out["transaction"]["amount_toman"] == "-2000.000000" and out["transaction"]["kind"] == "adjustment"
    out = ok_json(run("account", "topup", "--json", acct, "--", "-0.25"))
    assert out["balance_toman"] == "-750.000000"
    r.hset(keyspace.wallet(acct), "held", 1_000_000)

    show = ok_json(run("account", "show", acct, "--json"))
    assert show.pop("created_at").endswith("Z")
    assert show == {"id": acct, "phone": "+989121234567", "status": "active",
                    "balance_toman": "-750.000000", "held_toman": "1.000000",
                    "available_toman": "-751.000000", "free_quota_per_day": 50, "low_balance_toman": None,
                    "account_id": acct, "phone_masked": "+989***4567", "suspended": False, "free_quota": 50,
                    "free_quota_is_default": True, "free_used_today": 0, "key_count": 0}
    table = run("account", "show", acct)
    assert table.exit_code == 0 and "-751.000000" in table.stdout and "50 (default)" in table.stdout

    listed = ok_json(run("account", "list", "--json"))
    assert [a["account_id"] for a in listed["accounts"]] == [acct]
    assert listed["accounts"][0]["balance_toman"] == "-750.000000"
    assert ok_json(run("account", "list", "--phone", "09120000000", "--json")) == {"accounts": []}
    assert acct in run("account", "list").stdout


def test_suspend_resume_and_free_quota(run, acct, r, redis_url):
    p = redis.Redis.from_url(redis_url).pubsub()
    p.subscribe(keyspace.CHANNEL)
    p.get_message(timeout=2)

    out = ok_json(run("account", "suspend", acct, "--json"))
    assert {k: out[k] for k in ("account_id", "suspended", "changed", "id", "status")} == {
        "account_id": acct, "suspended": True, "changed": True, "id": acct, "status": "suspended"}
    assert r.hget(keyspace.wallet(acct), "suspended") == "1"
    msg = p.get_message(timeout=2)
    assert msg["type"] == "message" and json.loads(msg["data"]) == {"t": "account", "id": acct}
    res = run("account", "suspend", acct)
    assert res.exit_code == 0 and "already was suspended" in res.stdout
    assert ok_json(run("account", "show", acct, "--json"))["suspended"] is True
    assert ok_json(run("account", "resume", acct, "--json"))["suspended"] is False
    assert r.hget(keyspace.wallet(acct), "suspended") == "0"

    out = ok_json(run("account", "set-free-quota", acct, "0", "--json"))
    assert {k: out[k] for k in ("account_id", "free_quota", "free_quota_is_default", "free_quota_per_day")} == {
        "account_id": acct, "free_quota": 0, "free_quota_is_default": False, "free_quota_per_day": 0}
    assert r.hget(keyspace.wallet(acct), "free_quota") == "0"
    assert ok_json(run("account", "show", acct, "--json"))["free_quota"] == 0
    assert ok_json(run("account", "set-free-quota", acct, "default", "--json"))["free_quota_is_default"] is True
    assert not r.hexists(keyspace.wallet(acct), "free_quota")
    p.close()


BAD = [
    (("account", "create", "--phone", "abc"), "phone"),
    (("account", "create", "--phone", "123456"), "phone"),
    (("account", "create", "--phone", "09121234567", "--balance", "abc"), "balance"),
    (("account", "create", "--phone", "09121234567", "--balance", "1.1234567"), "six fractional"),
    (("account", "create", "--phone", "09121234567", "--balance", "1e3"), "plain decimal"),
    (("account", "create", "--phone", "09121234567", "--balance", "10.0e2"), "plain decimal"),
    (("account", "create", "--phone", "09121234567", "--balance", "9007199254.740993"), "2^53"),
    (("account", "create", "--phone", "09121234567", "--balance", "-5"), "negative"),
    (("account", "topup", UNKNOWN, "10"), "unknown account"),
    (("account", "topup", "not-a-uuid", "10"), "unknown account"),
    (("account", "topup", "{acct}", "abc"), "amount"),
    (("account", "topup", "{acct}", "1.1234567"), "six fractional"),
    (("account", "topup", "{acct}", "1.5e3"), "plain decimal"),
    (("account", "topup", "{acct}", "nan"), "plain decimal"),
    (("account", "topup", "{acct}", "0"), "zero"),
    (("account", "topup", "{acct}", "9007199255"), "2^53"),
    (("account", "topup", "{acct}", "9007199000"), "2^53"),  # 1000 + this passes 2^53 micro
    (("account", "show", UNKNOWN), "unknown account"),
    (("account", "suspend", UNKNOWN), "unknown account"),
    (("account", "resume", "x"), "unknown account"),
    (("account", "set-free-quota", UNKNOWN, "5"), "unknown account"),
    (("account", "set-free-quota", "{acct}", "-1"), "free_quota_per_day"),
    (("account", "set-free-quota", "{acct}", "abc"), "free_quota_per_day"),
    (("account", "set-free-quota", "{acct}", "1.5"), "free_quota_per_day"),
    (("account", "set-free-quota", "{acct}", "1000000001"), "free_quota_per_day"),
    (("account", "list", "--phone", "x"), "phone"),
]


@pytest.mark.parametrize("args,needle", BAD, ids=[" ".join(a[1:]) for a, _ in BAD])
@pytest.mark.parametrize("as_json", [False, True])
def test_refused_input_exits_1_with_one_line_and_writes_nothing(run, acct, redis_url, args, needle, as_json):
    args = [a.replace("{acct}", acct) for a in args] + (["--json"] if as_json else [])
    p = redis.Redis.from_url(redis_url).pubsub()
    p.subscribe(keyspace.CHANNEL)
    p.get_message(timeout=2)
    before = snapshot(redis_url)
    refused(run(*args), needle)
    assert snapshot(redis_url) == before
    assert p.get_message(timeout=0.2) is None  # nothing published either
    p.close()


def test_malformed_free_quota_default_env_is_refused(redis_url, acct):
    res = CliRunner().invoke(cli, ["account", "show", acct], catch_exceptions=False,
                             env={"UPGATE_REDIS_URL": redis_url, "UPGATE_FREE_QUOTA_DEFAULT": "lots"})
    refused(res, "UPGATE_FREE_QUOTA_DEFAULT")


def test_every_command_documents_an_example():
    from admin_cli.account import account

    for name, command in account.commands.items():
        assert "Example" in (command.help or ""), name
        assert any(p.name == "as_json" for p in command.params), name


# ---- the real console script --------------------------------------------------------------------

def admin_command() -> list[str]:
    exe = shutil.which("upgate-admin") or str(Path(sys.executable).parent / "upgate-admin")
    return [exe] if os.path.exists(exe) else [sys.executable, "-m", "admin_cli"]


def test_console_script_end_to_end(redis_url, r):
    env = {**os.environ, "UPGATE_REDIS_URL": redis_url, "UPGATE_KEY_PEPPER": "pep"}
    run = lambda *a: subprocess.run([*admin_command(), *a], env=env, capture_output=True,  # noqa: E731
                                    text=True, timeout=60)
    res = run("account", "create", "--phone", "09121234567", "--balance", "100", "--json")
    assert res.returncode == 0, res.stderr
    acct = json.loads(res.stdout)["account_id"]
    res = run("account", "topup", acct, "-100.5", "--json")
    assert res.returncode == 0 and json.loads(res.stdout)["balance_toman"] == "-0.500000"
    res = run("account", "topup", acct, "1.1234567")
    assert res.returncode == 1 and res.stdout == ""
    assert res.stderr.splitlines() == ["error: amount_toman: at most six fractional digits: '1.1234567'"]  # the API's field name
    assert r.hget(keyspace.wallet(acct), "balance") == str(money.parse_toman("-0.5", allow_negative=True))
    res = subprocess.run([sys.executable, "-m", "admin_cli", "account", "show", acct, "--json"],
                         env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and json.loads(res.stdout)["balance_toman"] == "-0.500000"


def test_set_low_balance_sets_clears_and_logs_the_api_names(run, acct, r, redis_url):
    out = ok_json(run("account", "set-low-balance", acct, "20000.5", "--json"))
    assert out["low_balance_toman"] == "20000.500000" and out["id"] == out["account_id"] == acct
    assert r.hget(keyspace.wallet(acct), "low_balance") == "20000500000"
    assert ok_json(run("account", "show", acct, "--json"))["low_balance_toman"] == "20000.500000"
    out = ok_json(run("account", "set-low-balance", acct, "off", "--json"))
    assert out["low_balance_toman"] is None and not r.hexists(keyspace.wallet(acct), "low_balance")
    before = snapshot(redis_url)
    refused(run("account", "set-low-balance", acct, "-5"), "low_balance_toman")
    refused(run("account", "set-low-balance", UNKNOWN, "5"), "unknown account")
    assert snapshot(redis_url) == before  # refused: nothing written, not even the admin log
    from upgate.services import admin_log
    entries = admin_log.read(r, 2)
    assert [e["detail"] for e in entries] == [{"low_balance_toman": None}, {"low_balance_toman": "20000.5"}]
    assert entries[0]["action"] == "account.set_low_balance" and entries[0]["target"] == acct
