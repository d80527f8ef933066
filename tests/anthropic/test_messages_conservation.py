"""Money conserved across a mix of Messages requests on a running node: answers, streams,
tools, cut streams, provider errors, refusals and count_tokens, through a chat upstream and an
anthropic one. At the end the wallet holds nothing, balance = initial − Σ the request records'
charges, and the usage report (GET /v1/svc/usage) and the key's month counter agree with it."""
from __future__ import annotations

import anthropic
import httpx
import redis

from tests.anthropic.conftest import sdk
from tests.anthropic.test_messages_sdk import HELLO, TOOL, configure
from tests.handlers.test_proxy import me, wallet
from upgate.billing import money
from upgate.services import records


def test_a_mix_of_messages_conserves_money(claude_node, redis_url, funded, mock):
    key, account_id, _ = funded
    client = sdk(claude_node, key)
    initial = wallet(redis_url, account_id)["balance"]
    sent = 0
    for model in ("mock/chat-1", "claude-sonnet-4-5"):
        client.messages.create(model=model, max_tokens=50, messages=HELLO)
        with client.messages.stream(model=model, max_tokens=50, messages=HELLO) as s:
            s.get_final_message()
        configure(mock, tool_calls=True)
        client.messages.create(model=model, max_tokens=50, messages=HELLO, tools=[TOOL])
        configure(mock, tool_calls=False, cut_after=3)
        try:
            with client.messages.stream(model=model, max_tokens=50, messages=HELLO) as s:
                s.get_final_message()
        except anthropic.APIStatusError:
            pass
        configure(mock, cut_after=None, status=500)
        try:
            client.messages.create(model=model, max_tokens=50, messages=HELLO)
        except anthropic.InternalServerError:
            pass
        configure(mock, status=0)
        client.messages.count_tokens(model=model, messages=HELLO)
        sent += 5
    try:
        client.messages.create(model="claude-opus-9", max_tokens=50, messages=HELLO)
    except anthropic.NotFoundError:
        pass
    w = wallet(redis_url, account_id)
    assert w["held"] == 0
    recs = records.list_requests(redis.Redis.from_url(redis_url), account_id, limit=100)
    refused = [r for r in recs if r["code"] == "model_not_found"]  # a refusal keeps a record too
    assert len(refused) == 1 and refused[0]["cost_toman"] == "0.000000"
    recs = [r for r in recs if r not in refused]
    assert len(recs) == sent  # one record per admitted request: no count_tokens
    total = sum(money.parse_toman(r["cost_toman"]) for r in recs)
    assert total > 0 and initial - w["balance"] == total
    assert sorted(r["code"] or "ok" for r in recs) == sorted(["ok"] * 6 + ["upstream_error"] * 4)
    assert all(r["cost_toman"] == "0.000000" for r in recs if r["status"] == 502)
    report = httpx.get(claude_node.base + "/svc/usage", params={"group_by": "model"},
                       headers={"x-api-key": key}).json()
    assert sum(money.parse_toman(row["cost_toman"]) for row in report["rows"]) == total
    assert money.parse_toman(me(claude_node, key)["key"]["spent_this_month_toman"]) == total
