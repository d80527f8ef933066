"""The usage report (API and CLI) against real traffic: its totals equal the wallet's movement
to the micro-toman, and the two faces of the report agree."""
import json
from decimal import Decimal

import httpx
import openai
import pytest
from click.testing import CliRunner

from admin_cli.main import cli
from tests.gateway import seed
from upgate.billing import money
from upgate.services import keys
from upgate.store import connection as store

HELLO = [{"role": "user", "content": "Hello there, gateway!"}]


def test_report_totals_match_the_wallet_and_the_cli(node, redis_url, monkeypatch):
    key_a, account_id, key_id_a = seed(redis_url, balance="100000", name="a")
    key_b, key_id_b, _ = keys.create_key(store.connect_sync(redis_url), "test-pepper", account_id, name="b")
    a = openai.OpenAI(base_url=node.base, api_key=key_a, max_retries=0)
    b = openai.OpenAI(base_url=node.base, api_key=key_b, max_retries=0)
    for _ in range(3):
        a.chat.completions.create(model="mock/chat-1", messages=HELLO)
    b.chat.completions.create(model="mock/chat-big", messages=HELLO)
    list(b.chat.completions.create(model="mock/chat-1", messages=HELLO, stream=True))
    b.embeddings.create(model="mock/embed-1", input="count me")
    with pytest.raises(openai.InternalServerError):  # released: not in the report
        a.chat.completions.create(model="mock/chat-1", messages=HELLO, extra_body={"mock": {"status": 500}})

    me = httpx.get(node.base + "/svc/me", headers={"X-API-Key": key_a}).json()
    spent = Decimal("100000") - Decimal(me["wallet"]["balance_toman"])

    def api(group_by, **params):
        resp = httpx.get(node.base + "/svc/usage", params={"group_by": group_by, **params},
                         headers={"Authorization": f"Bearer {key_b}"})
        assert resp.status_code == 200, resp.text
        return resp.json()

    by_key = api("key")
    assert Decimal(by_key["totals"]["cost_toman"]) == spent
    assert by_key["totals"]["requests"] == 6
    rows = {r["key_id"]: r for r in by_key["rows"]}
    assert rows[key_id_a]["requests"] == 3
    assert Decimal(rows[key_id_a]["cost_toman"]) == Decimal(me["key"]["spent_this_month_toman"]) == Decimal("11.25")
    assert sum(Decimal(r["cost_toman"]) for r in by_key["rows"]) == spent
    by_model = api("model")
    assert {r["model"]: r["requests"] for r in by_model["rows"]} == {"mock/chat-1": 4, "mock/chat-big": 1, "mock/embed-1": 1}
    assert by_model["totals"] == by_key["totals"]
    by_day = api("day")
    assert len(by_day["rows"]) == 1 and by_day["rows"][0]["cost_toman"] == by_key["totals"]["cost_toman"]
    assert "X-RateLimit-Limit" in httpx.get(node.base + "/svc/usage", headers={"X-API-Key": key_b}).headers

    monkeypatch.setenv("UPGATE_REDIS_URL", redis_url)
    out = CliRunner().invoke(cli, ["usage", account_id, "--group-by", "model", "--json"])
    assert out.exit_code == 0, out.output
    cli_report = json.loads(out.output)
    assert cli_report["rows"] == by_model["rows"] and cli_report["totals"] == by_model["totals"]
    table = CliRunner().invoke(cli, ["usage", account_id])
    assert table.exit_code == 0 and by_key["totals"]["cost_toman"] in table.output
    assert money.parse_toman(by_key["totals"]["cost_toman"]) > 0


def test_bad_report_parameters(node, redis_url, monkeypatch):
    key, account_id, _ = seed(redis_url)
    for params in ({"group_by": "user"}, {"from": "1405-13-01"}, {"from": "1405-02-01", "to": "1405-01-01"},
                   {"from": "1400-01-01", "to": "1405-01-01"}):
        resp = httpx.get(node.base + "/svc/usage", params=params, headers={"X-API-Key": key})
        assert resp.status_code == 400 and resp.json()["error"]["code"] == "invalid_request", params
    monkeypatch.setenv("UPGATE_REDIS_URL", redis_url)
    for args in (["usage", "nope"], ["usage", account_id, "--month", "1405-13"], ["usage", account_id, "--group-by", "x"]):
        out = CliRunner().invoke(cli, args)
        assert out.exit_code != 0 and "Traceback" not in out.output, args
