"""`upgate-admin account topup/adjust/transactions/statement`, `audit`, `requests` and
`request show` through Click's CliRunner against the private real redis-server: every command
in --json, table and CSV form, and every refusal (exit 1, one line, nothing written)."""
from __future__ import annotations

import csv
import io
import json

import pytest
import redis
from click.testing import CliRunner

from admin_cli.main import cli
from tests.ledger_kit import KEY, TOMAN, run as run_ledger, seed_key
from tests.admin_cli.test_cli_account import UNKNOWN, ok_json, refused, snapshot
from upgate.billing import jalali
from upgate.services import records
from upgate.store import keyspace

@pytest.fixture
def run(redis_url):
    def invoke(*args: str):
        env = {"UPGATE_REDIS_URL": redis_url, "UPGATE_KEY_PEPPER": "pep", "COLUMNS": "200"}
        return CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)
    return invoke


@pytest.fixture
def acct(run):
    return ok_json(run("account", "create", "--phone", "09121234567", "--balance", "1000", "--json"))["account_id"]


def test_topup_with_ref_replays_and_conflicts(run, acct):
    out = ok_json(run("account", "topup", acct, "500", "--ref", "zp-A1", "--note", "card", "--json"))
    assert out["replayed"] is False and out["balance_toman"] == "1500.000000"
    assert out["transaction"]["ref"] == "zp-A1" and out["transaction"]["note"] == "card"
    again = ok_json(run("account", "topup", acct, "500", "--ref", "zp-A1", "--json"))
    assert again["replayed"] is True and again["transaction"] == out["transaction"]
    res = run("account", "topup", acct, "500", "--ref", "zp-A1")
    assert res.exit_code == 0 and "replayed" in res.stdout
    refused(run("account", "topup", acct, "600", "--ref", "zp-A1"), "already used")


def test_adjust_and_transactions(run, acct, r):
    out = ok_json(run("account", "adjust", acct, "-250.5", "--note", "duplicate credit", "--json"))
    assert out["transaction"]["kind"] == "adjustment" and out["balance_toman"] == "749.500000"
    listed = ok_json(run("account", "transactions", acct, "--json"))["transactions"]
    assert [t["kind"] for t in listed] == ["adjustment", "opening"]
    month = jalali.month_key()
    assert ok_json(run("account", "transactions", acct, "--month", month, "--json"))["transactions"] == listed
    assert ok_json(run("account", "transactions", acct, "--month", "1390-01", "--json"))["transactions"] == []
    rows = list(csv.DictReader(io.StringIO(run("account", "transactions", acct, "--csv").stdout)))
    assert [x["kind"] for x in rows] == ["adjustment", "opening"] and rows[0]["amount_toman"] == "-250.500000"
    table = run("account", "transactions", acct)
    assert table.exit_code == 0 and "duplicate credit" in table.stdout


def test_statement_json_csv_and_table(run, acct):
    run("account", "topup", acct, "100", "--json")
    st = ok_json(run("account", "statement", acct, "--json"))
    assert list(st) == ["account_id", "month", "opening_balance_toman", "topups_toman", "adjustments_toman",
                        "charges_toman", "closing_balance_toman", "requests", "transactions", "days"]
    assert st["month"] == jalali.month_key() and st["opening_balance_toman"] == "0.000000"
    assert st["topups_toman"] == "1100.000000" and st["closing_balance_toman"] == "1100.000000"
    text = run("account", "statement", acct, "--csv").stdout
    rows = list(csv.DictReader(io.StringIO(text)))
    assert rows[0]["kind"] == "opening_balance" and rows[-1]["kind"] == "closing_balance"
    moved = sum(float(x["amount_toman"]) for x in rows[1:-1])
    assert moved == float(rows[-1]["amount_toman"]) - float(rows[0]["amount_toman"])
    assert "1100.000000" in run("account", "statement", acct).stdout


def test_audit_passes_then_names_a_tampered_account(run, acct, r):
    assert ok_json(run("audit", "--json")) == {"accounts": 1, "mismatches": [], "duplicate_phones": [],
                                               "payment_mismatches": [], "unmigrated": 0}
    r.hincrby(keyspace.wallet(acct), "balance", 5)  # behind the scripts' back
    res = run("audit", "--json")
    assert res.exit_code == 1
    assert json.loads(res.stdout)["mismatches"] == [
        {"account_id": acct, "balance_toman": "1000.000005", "expected_toman": "1000.000000"}]
    assert res.stderr.splitlines() == [f"error: 1 accounts do not add up: {acct}"]


def test_requests_and_request_show(run, acct, redis_url):
    sync = redis.Redis.from_url(redis_url)
    seed_key(sync, acct, KEY)

    async def body(L):
        adm = await L.admit(account_id=acct, key_id=KEY, model="m/x", hold_micro=TOMAN, stream=False, free=False)
        await L.settle(acct, adm.hold_id, key_id=KEY, model="m/x", cost_micro=1234, prompt_tokens=1,
                       completion_tokens=1, record=records.new(request_id="req_cli1", key_id=KEY, model="m/x",
                                                          status=200, hold_micro=TOMAN, cost_micro=1234))
    run_ledger(redis_url, body)
    out = ok_json(run("requests", acct, "--json"))["requests"]
    assert [x["request_id"] for x in out] == ["req_cli1"] and out[0]["cost_toman"] == "0.001234"
    rows = list(csv.DictReader(io.StringIO(run("requests", acct, "--limit", "5", "--csv").stdout)))
    assert rows[0]["request_id"] == "req_cli1" and rows[0]["account_id"] == acct
    shown = ok_json(run("request", "show", "req_cli1", "--json"))
    assert shown == out[0]
    assert "req_cli1" in run("request", "show", "req_cli1").stdout


BAD = [
    (("account", "topup", UNKNOWN, "10"), "unknown account"),
    (("account", "topup", "{acct}", "abc"), "amount"),
    (("account", "topup", "{acct}", "0"), "zero"),
    (("account", "topup", "{acct}", "10", "--ref", "x" * 129), "ref"),
    (("account", "topup", "{acct}", "10", "--ref", "a\tb"), "ref"),
    (("account", "topup", "{acct}", "10", "--ref", ""), "ref"),
    (("account", "topup", "{acct}", "10", "--note", "a\x07"), "note"),
    (("account", "adjust", "{acct}", "10"), "--note"),
    (("account", "adjust", "{acct}", "10", "--note", " "), "note"),
    (("account", "adjust", UNKNOWN, "10", "--note", "x"), "unknown account"),
    (("account", "adjust", "{acct}", "1e2", "--note", "x"), "plain decimal"),
    (("account", "transactions", UNKNOWN), "unknown account"),
    (("account", "transactions", "{acct}", "--month", "1405-13"), "month"),
    (("account", "statement", "{acct}", "--month", "1405-1"), "month"),
    (("account", "statement", "{acct}", "--month", "1399-01"), "beyond"),
    (("account", "statement", "{acct}", "--month", "1499-01"), "not begun"),
    (("account", "statement", UNKNOWN), "unknown account"),
    (("requests", UNKNOWN), "unknown account"),
    (("requests", "{acct}", "--limit", "0"), "limit"),
    (("request", "show", "req_nothing"), "no record of request"),
]


@pytest.mark.parametrize("args, needle", BAD)
def test_refusals_exit_1_one_line_nothing_written(run, acct, redis_url, args, needle):
    before = snapshot(redis_url)
    refused(run(*[a.replace("{acct}", acct) for a in args]), needle)
    refused(run(*[a.replace("{acct}", acct) for a in args], "--json"), needle)
    assert snapshot(redis_url) == before


NFC, NFD = "pay-\u00e9t\u00e9", "pay-e\u0301te\u0301"  # one ref, composed and decomposed


def test_a_ref_is_normalized_once_spaces_and_unicode_forms_replay(run, acct, r):
    """"r ", " r" and the NFD spelling of a ref are that ref: a replay, never a second credit."""
    first = ok_json(run("account", "topup", acct, "500", "--ref", NFD, "--json"))
    assert first["replayed"] is False and first["transaction"]["ref"] == NFC
    for spelling in (NFC, f" {NFC}", f"{NFD} ", f"\t{NFD}"):
        again = ok_json(run("account", "topup", acct, "500", "--ref", spelling, "--json"))
        assert again["replayed"] is True and again["transaction"] == first["transaction"], spelling
    refused(run("account", "adjust", acct, "500", "--note", "x", "--ref", f" {NFD} "), "already used")
    refused(run("account", "topup", acct, "500", "--ref", "   "), "ref must be")
    txns = ok_json(run("account", "transactions", acct, "--json"))["transactions"]
    assert [t["kind"] for t in txns] == ["topup", "opening"]
    assert ok_json(run("account", "show", acct, "--json"))["balance_toman"] == "1500.000000"


# cells a spreadsheet would run as a formula (OPERATORS.md, "Spreadsheet safety")
HOSTILE_REF, HOSTILE_NOTE = '=HYPERLINK("http://evil.example","pay")', "+cmd|' /C calc'!A0"
HOSTILE_REF2, HOSTILE_NOTE2 = "-2+3", "@SUM(1+1)"


def _neutral(cell: str, raw: str) -> bool:
    return cell == "'" + raw


def test_csv_cells_a_spreadsheet_would_run_get_a_quote_amounts_stay_plain(run, acct, redis_url):
    """transactions --csv, statement --csv and requests --csv, read back with the csv module:
    every hostile ref, note and model comes back with a leading ', every amount as a decimal."""
    run("account", "topup", acct, "500", "--ref", HOSTILE_REF, "--note", HOSTILE_NOTE, "--json")
    run("account", "adjust", acct, "-5", "--ref", HOSTILE_REF2, "--note", HOSTILE_NOTE2, "--json")
    rows = list(csv.DictReader(io.StringIO(run("account", "transactions", acct, "--csv").stdout)))
    assert [r["kind"] for r in rows] == ["adjustment", "topup", "opening"]
    assert _neutral(rows[0]["ref"], HOSTILE_REF2) and _neutral(rows[0]["note"], HOSTILE_NOTE2)
    assert _neutral(rows[1]["ref"], HOSTILE_REF) and _neutral(rows[1]["note"], HOSTILE_NOTE)
    assert rows[0]["amount_toman"] == "-5.000000" and rows[0]["balance_after_toman"] == "1495.000000"
    st = list(csv.DictReader(io.StringIO(run("account", "statement", acct, "--csv").stdout)))
    by_kind = {r["kind"]: r for r in st}
    assert _neutral(by_kind["topup"]["ref"], HOSTILE_REF) and _neutral(by_kind["topup"]["note"], HOSTILE_NOTE)
    assert _neutral(by_kind["adjustment"]["ref"], HOSTILE_REF2)
    assert by_kind["adjustment"]["amount_toman"] == "-5.000000"
    for r in rows + st:  # nothing a spreadsheet would run is left anywhere
        for k, v in r.items():
            assert not (v or "").startswith(("=", "+", "@", "\t", "\r")), (k, v)
            assert not (v or "").startswith("-") or k.endswith("_toman"), (k, v)

    sync = redis.Redis.from_url(redis_url)
    seed_key(sync, acct, KEY)

    async def body(L):
        adm = await L.admit(account_id=acct, key_id=KEY, model="@m/x", hold_micro=TOMAN, stream=False, free=False)
        await L.settle(acct, adm.hold_id, key_id=KEY, model="@m/x", cost_micro=1234, prompt_tokens=1,
                       completion_tokens=1, record=records.new(request_id="req_csv1", key_id=KEY, model="@m/x",
                                                          status=200, hold_micro=TOMAN, cost_micro=1234))
    run_ledger(redis_url, body)
    reqs = list(csv.DictReader(io.StringIO(run("requests", acct, "--csv").stdout)))
    assert reqs[0]["model"] == "'@m/x" and reqs[0]["cost_toman"] == "0.001234"


def test_the_csv_writer_neutralises_tab_and_carriage_return_too():
    from upgate.services import csv_safe

    text = csv_safe.write(("note", "amount_toman"), [{"note": "\tx", "amount_toman": "-1.000000"},
                                                     {"note": "\r=1", "amount_toman": "=1"}])
    rows = list(csv.DictReader(io.StringIO(text, newline="")))
    assert rows == [{"note": "'\tx", "amount_toman": "-1.000000"}, {"note": "'\r=1", "amount_toman": "'=1"}]
