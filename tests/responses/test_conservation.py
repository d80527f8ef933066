"""Money conserved across chat completions, Messages and Responses on one running node and one
wallet: answers, streams, tool calls, cut streams and provider errors, through a chat upstream
and an anthropic one. At the end nothing is held, balance = initial − Σ the request records'
charges, and the usage report and the key's month counter agree with it."""
from __future__ import annotations

import anthropic
import httpx
import openai
import redis

from tests.anthropic.conftest import sdk
from tests.anthropic.test_messages_sdk import HELLO, TOOL, configure
from tests.handlers.test_proxy import me, wallet
from tests.responses.conftest import client
from upgate.billing import money
from upgate.services import records

RTOOL = {"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {}}}


def _quietly(fn, *errors):
    try:
        fn()
    except errors:
        pass


def test_chat_messages_and_responses_conserve_money(resp_node, redis_url, funded, mock):
    key, account_id, _ = funded
    oa, an = client(resp_node, key), sdk(resp_node, key)
    initial = wallet(redis_url, account_id)["balance"]
    admitted = 0
    for model in ("mock/chat-1", "claude-sonnet-4-5"):
        oa.chat.completions.create(model=model, messages=HELLO, max_tokens=50)
        an.messages.create(model=model, max_tokens=50, messages=HELLO)
        oa.responses.create(model=model, input="Hello", max_output_tokens=50)
        with oa.responses.stream(model=model, input="Hello") as s:
            s.get_final_response()
        with an.messages.stream(model=model, max_tokens=50, messages=HELLO) as s:
            s.get_final_message()
        configure(mock, tool_calls=True)
        oa.responses.create(model=model, input="Hello", tools=[RTOOL])
        an.messages.create(model=model, max_tokens=50, messages=HELLO, tools=[TOOL])
        configure(mock, tool_calls=False, cut_after=2)
        with oa.responses.stream(model=model, input="Hello") as s:
            list(s)  # ends with response.failed
        _quietly(lambda: an.messages.stream(model=model, max_tokens=50, messages=HELLO).__enter__().get_final_message(),
                 anthropic.APIStatusError)
        _quietly(lambda: list(oa.chat.completions.create(model=model, messages=HELLO, stream=True)), openai.APIError)
        configure(mock, cut_after=None, status=500)
        _quietly(lambda: oa.responses.create(model=model, input="Hello"), openai.InternalServerError)
        configure(mock, status=0)
        admitted += 11
    _quietly(lambda: oa.responses.create(model="claude-opus-9", input="x", previous_response_id="r"),
             openai.BadRequestError)
    w = wallet(redis_url, account_id)
    assert w["held"] == 0
    recs = records.list_requests(redis.Redis.from_url(redis_url), account_id, limit=200)
    refused = [r for r in recs if r["code"] == "invalid_request"]  # a refusal keeps a record, uncharged
    assert [r["cost_toman"] for r in refused] in ([], ["0.000000"])
    recs = [r for r in recs if r not in refused]
    assert len(recs) == admitted  # one record per admitted request
    total = sum(money.parse_toman(r["cost_toman"]) for r in recs)
    assert total > 0 and initial - w["balance"] == total
    assert sorted(r["code"] or "ok" for r in recs) == sorted(["ok"] * 14 + ["upstream_error"] * 8)
    report = httpx.get(resp_node.base + "/svc/usage", params={"group_by": "model"},
                       headers={"Authorization": f"Bearer {key}"}).json()
    assert sum(money.parse_toman(row["cost_toman"]) for row in report["rows"]) == total
    assert money.parse_toman(me(resp_node, key)["key"]["spent_this_month_toman"]) == total
