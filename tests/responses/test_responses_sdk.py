"""The Responses API end to end: the real openai SDK (responses.create, responses.stream) → a
running node → the mock (chat dialect, and the anthropic dialect through the chat translation),
billed on a private Redis exactly as the chat route bills the same usage."""
from __future__ import annotations

import httpx
import openai
import orjson
import pytest

from tests.anthropic.conftest import COMPLETION, PROMPT
from tests.anthropic.test_messages_sdk import FIVE, charged, configure, last_upstream
from tests.gateway import seed
from tests.handlers.test_proxy import wallet
from tests.responses.conftest import client
from upgate.billing import money, sizing

HELLO = "Hello there, gateway!"  # the mock counts 5 tokens
TOOL = {"type": "function", "name": "get_weather", "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"t": {"type": "string"}}}}


@pytest.mark.parametrize("model", ["mock/chat-1", "claude-sonnet-4-5"])
def test_create_is_billed_like_chat(resp_node, redis_url, funded, mock, model):
    key, account_id, _ = funded
    before = wallet(redis_url, account_id)
    out = client(resp_node, key).responses.create(model=model, input=HELLO, instructions="Be brief.",
                                                  max_output_tokens=100)
    assert out.output_text == FIVE and out.status == "completed" and out.model == model
    assert out.id.startswith("resp_") and out.output[0].type == "message"
    prompt = 5 + 2  # the instructions are a system message (9 chars → 2 tokens)
    assert (out.usage.input_tokens, out.usage.output_tokens, out.usage.total_tokens) == (prompt, 5, prompt + 5)
    assert charged(redis_url, account_id, before) == prompt * PROMPT + 5 * COMPLETION
    sent = last_upstream(mock)["last_body"]
    assert sent["max_tokens" if model == "claude-sonnet-4-5" else "max_tokens"] == 100


@pytest.mark.parametrize("model", ["mock/chat-1", "claude-sonnet-4-5"])
def test_stream_helper_gets_text_events_and_usage(resp_node, redis_url, funded, model):
    key, account_id, _ = funded
    before = wallet(redis_url, account_id)
    with client(resp_node, key).responses.stream(model=model, input=[{"role": "user", "content": HELLO}]) as s:
        kinds = [e.type for e in s]
        final = s.get_final_response()
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert kinds.count("response.output_text.delta") == 5
    assert final.output_text == FIVE and final.usage.output_tokens == 5 and final.model == model
    assert charged(redis_url, account_id, before) == 5 * PROMPT + 5 * COMPLETION


@pytest.mark.parametrize("stream", [False, True])
def test_a_function_call_round_trip(resp_node, funded, mock, stream):
    key = funded[0]
    configure(mock, tool_calls=True)
    c = client(resp_node, key)
    if stream:
        with c.responses.stream(model="mock/chat-1", input=HELLO, tools=[TOOL]) as s:
            kinds = [e.type for e in s]
            out = s.get_final_response()
        assert kinds.count("response.function_call_arguments.delta") == 5
        assert "response.function_call_arguments.done" in kinds
    else:
        out = c.responses.create(model="mock/chat-1", input=HELLO, tools=[TOOL])
    call = out.output[0]
    assert call.type == "function_call" and call.name == "get_weather"
    assert orjson.loads(call.arguments) == {"t": FIVE}
    configure(mock, tool_calls=False)
    # the whole conversation goes back (stateless): the call and its output become chat messages
    again = c.responses.create(model="mock/chat-1", tools=[TOOL], input=[
        {"role": "user", "content": HELLO},
        {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
        {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}])
    assert again.output_text == FIVE
    sent = last_upstream(mock)["last_body"]["messages"]
    assert sent[1]["tool_calls"][0]["id"] == call.call_id
    assert sent[2] == {"role": "tool", "tool_call_id": call.call_id, "content": "sunny"}


def test_stateless_refusals_and_the_off_switch(resp_node, off_node, funded):
    key = funded[0]
    c = client(resp_node, key)
    with pytest.raises(openai.BadRequestError) as info:
        c.responses.create(model="mock/chat-1", input=HELLO, previous_response_id="resp_123")
    assert info.value.code == "invalid_request" and "stateless" in info.value.message
    for method in (httpx.get, httpx.delete):
        r = method(resp_node.base + "/responses/resp_123", headers={"Authorization": f"Bearer {key}"})
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    # off (the default): the spec's 404, pointing to chat completions
    with pytest.raises(openai.NotFoundError) as info:
        client(off_node, key).responses.create(model="mock/chat-1", input=HELLO)
    assert info.value.code == "not_found" and "chat/completions" in info.value.message


def test_errors_keep_the_spec_shape_and_codes(resp_node, redis_url, funded, mock):
    key = funded[0]
    with pytest.raises(openai.AuthenticationError) as info:
        client(resp_node, "sk-up-nope").responses.create(model="mock/chat-1", input=HELLO)
    assert info.value.code == "invalid_api_key"
    with pytest.raises(openai.NotFoundError) as info:
        client(resp_node, key).responses.create(model="nobody/nothing", input=HELLO)
    assert info.value.code == "model_not_found"
    broke = seed(redis_url, phone="09120000009", balance="0")[0]
    with pytest.raises(openai.APIStatusError) as info:
        client(resp_node, broke).responses.create(model="mock/chat-1", input=HELLO)
    assert info.value.status_code == 402 and info.value.code == "insufficient_balance"
    configure(mock, status=500)
    with pytest.raises(openai.InternalServerError) as info:
        client(resp_node, key).responses.create(model="mock/chat-1", input=HELLO)
    assert info.value.status_code == 502 and info.value.code == "upstream_error"


def test_built_in_tools_are_left_out_and_named(resp_node, funded, mock):
    """Codex sends web_search by default: the upstream never sees it, the header names it."""
    r = httpx.post(resp_node.base + "/responses", headers={"Authorization": f"Bearer {funded[0]}"},
                   json={"model": "mock/chat-1", "input": HELLO,
                         "tools": [TOOL, {"type": "web_search"}, {"type": "image_generation"}]})
    assert r.status_code == 200 and r.headers["X-Svc-Dropped-Tools"] == "web_search, image_generation"
    assert [t["function"]["name"] for t in last_upstream(mock)["last_body"]["tools"]] == ["get_weather"]


def test_hold_from_max_output_tokens_and_the_meta_block(resp_node, redis_url, funded):
    key, account_id, _ = funded
    out = client(resp_node, key, default_headers={"X-Svc-Include-Meta": "1"}).responses.create(
        model="mock/chat-1", input=HELLO, max_output_tokens=1000, reasoning={"effort": "high"})
    svc = out.model_extra["svc"]
    # the limit counts reasoning (the Responses API's meaning): 1,000 output tokens held, no more
    estimate = sizing.prompt_tokens({"messages": [{"role": "user", "content": HELLO}]})
    assert money.parse_toman(svc["hold_toman"]) == estimate * PROMPT + 1000 * COMPLETION
    assert money.parse_toman(svc["cost_toman"]) == 5 * PROMPT + 5 * COMPLETION


def test_a_cut_stream_is_billed_to_the_cut(resp_node, redis_url, funded, mock):
    key, account_id, _ = funded
    configure(mock, cut_after=3)
    before = wallet(redis_url, account_id)
    with client(resp_node, key).responses.stream(model="mock/chat-1", input=HELLO) as s:
        events = list(s)
    assert events[-1].type == "response.failed" and events[-1].response.error.code == "upstream_error"
    assert [e.delta for e in events if e.type == "response.output_text.delta"] == ["tok0 ", "tok1 ", "tok2 "]
    # as the chat route bills a cut: the prompt estimate, and 15 characters relayed → 4 tokens
    estimate = sizing.prompt_tokens({"messages": [{"role": "user", "content": HELLO}]})
    assert charged(redis_url, account_id, before) == estimate * PROMPT + 4 * COMPLETION
