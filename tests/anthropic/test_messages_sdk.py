"""The Messages API end to end: the real `anthropic` SDK → a running gateway node → the mock
provider (chat dialect, and the anthropic dialect's /v1/messages), billed on a private Redis.
Money is checked to the micro-toman, against what the chat route charges for the same usage."""
from __future__ import annotations

import contextlib
import http.client

import anthropic
import httpx
import openai
import orjson
import pytest

from tests.anthropic.conftest import CACHED, COMPLETION, PROMPT, sdk
from tests.gateway import seed
from tests.handlers.test_proxy import wallet
from upgate.billing import money, sizing
from upgate.messages.request import to_chat

HELLO = [{"role": "user", "content": "Hello there, gateway!"}]  # 21 chars: the mock counts 5 tokens
FIVE = "tok0 tok1 tok2 tok3 tok4 "
TOOL = {"name": "get_weather", "description": "The weather in a city",
        "input_schema": {"type": "object", "properties": {"t": {"type": "string"}}}}


def configure(mock, **switches) -> None:
    httpx.post(f"http://127.0.0.1:{mock.port}/_mock/config", json=switches).raise_for_status()


def last_upstream(mock) -> dict:
    return httpx.get(f"http://127.0.0.1:{mock.port}/_mock/stats").json()


def charged(redis_url, account_id, before) -> int:
    after = wallet(redis_url, account_id)
    assert after["held"] == 0
    return before["balance"] - after["balance"]


@pytest.mark.parametrize("model", ["mock/chat-1", "claude-sonnet-4-5"])
def test_message_is_billed_like_chat(claude_node, redis_url, funded, mock, model):
    """A Message through a chat upstream and through the anthropic dialect (by its alias):
    the answer, its usage, the headers, and the charge the chat route makes for 5 + 5 tokens."""
    key, account_id, _ = funded
    before = wallet(redis_url, account_id)
    raw = sdk(claude_node, key).messages.with_raw_response.create(model=model, max_tokens=100, messages=HELLO)
    msg = raw.parse()
    assert msg.type == "message" and msg.role == "assistant"
    assert [b.type for b in msg.content] == ["text"] and msg.content[0].text == FIVE
    assert msg.stop_reason == "end_turn"
    assert (msg.usage.input_tokens, msg.usage.output_tokens) == (5, 5)
    assert raw.headers["request-id"] == raw.headers["X-Svc-Request-Id"] == msg._request_id
    assert raw.headers["X-RateLimit-Remaining"] == "59"
    assert charged(redis_url, account_id, before) == 5 * PROMPT + 5 * COMPLETION
    # the same usage through /v1/chat/completions costs the same
    before = wallet(redis_url, account_id)
    chat = openai.OpenAI(base_url=claude_node.base, api_key=key, max_retries=0)
    chat.chat.completions.create(model="mock/chat-1", messages=HELLO, max_tokens=100)
    assert charged(redis_url, account_id, before) == 5 * PROMPT + 5 * COMPLETION


@pytest.mark.parametrize("model", ["mock/chat-1", "anthropic/claude-sonnet-4.5"])
def test_stream_helper_gets_text_and_usage(claude_node, redis_url, funded, model):
    key, account_id, _ = funded
    before = wallet(redis_url, account_id)
    with sdk(claude_node, key).messages.stream(model=model, max_tokens=100, messages=HELLO) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == FIVE
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens == 5
    assert charged(redis_url, account_id, before) == 5 * PROMPT + 5 * COMPLETION


@pytest.mark.parametrize("model", ["mock/chat-1", "anthropic/claude-sonnet-4.5"])
@pytest.mark.parametrize("stream", [False, True])
def test_tools_round_trip(claude_node, funded, mock, model, stream):
    """tool_use out, tool_result back: the chat upstream gets tool_calls and a tool message, the
    anthropic upstream the blocks as the client sent them."""
    key = funded[0]
    client = sdk(claude_node, key)
    configure(mock, tool_calls=True)
    ask = [{"role": "user", "content": "Weather in Tehran?"}]
    if stream:
        with client.messages.stream(model=model, max_tokens=100, messages=ask, tools=[TOOL]) as s:
            msg = s.get_final_message()
    else:
        msg = client.messages.create(model=model, max_tokens=100, messages=ask, tools=[TOOL])
    assert msg.stop_reason == "tool_use"
    call = msg.content[-1]
    assert call.type == "tool_use" and call.name == "get_weather" and call.input == {"t": FIVE}
    configure(mock, tool_calls=False)
    follow = ask + [{"role": "assistant", "content": [c.model_dump() for c in msg.content]},
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "sunny"}]}]
    answer = client.messages.create(model=model, max_tokens=100, messages=follow, tools=[TOOL])
    assert answer.content[0].text == FIVE
    sent = last_upstream(mock)["last_body"]
    if model.startswith("mock/"):
        assert sent["messages"][-2]["tool_calls"][0]["function"]["name"] == "get_weather"
        assert sent["messages"][-1] == {"role": "tool", "tool_call_id": call.id, "content": "sunny"}
        assert sent["tools"][0]["function"]["parameters"] == TOOL["input_schema"]
    else:
        assert sent["messages"][-1]["content"][0] == {"type": "tool_result", "tool_use_id": call.id,
                                                      "content": "sunny"}


def test_count_tokens_is_unbilled_and_local(claude_node, redis_url, funded, mock):
    key, account_id, _ = funded
    before, calls = wallet(redis_url, account_id), last_upstream(mock)["requests"]
    raw = sdk(claude_node, key).messages.with_raw_response.count_tokens(
        model="claude-sonnet-4-5", messages=HELLO, system="Be brief.")
    assert raw.parse().input_tokens == sizing.prompt_tokens(to_chat(
        {"model": "x", "max_tokens": 1, "messages": HELLO, "system": "Be brief."}))
    assert raw.headers["X-RateLimit-Remaining"] == "59"  # counted in the key's rpm (DESIGN.md), unbilled
    assert raw.headers["request-id"] == raw.headers["X-Svc-Request-Id"]
    with pytest.raises(anthropic.NotFoundError) as info:
        sdk(claude_node, key).messages.count_tokens(model="claude-opus-9", messages=HELLO)
    assert info.value.body["error"]["type"] == "not_found_error"
    assert info.value.body["error"]["code"] == "model_not_found"
    with pytest.raises(anthropic.NotFoundError) as info:
        sdk(claude_node, key).messages.count_tokens(model="claude-opus-9", messages=HELLO)
    assert info.value.body["error"]["type"] == "not_found_error"
    assert info.value.body["error"]["code"] == "model_not_found"
    assert charged(redis_url, account_id, before) == 0
    assert last_upstream(mock)["requests"] == calls


def test_each_error_class(claude_node, redis_url, funded, mock):
    key, account_id, _ = funded
    client = sdk(claude_node, key)

    def fails(exc, status, etype, code, call=None, c=client):
        with pytest.raises(exc) as info:
            (call or (lambda: c.messages.create(model="mock/chat-1", max_tokens=10, messages=HELLO)))()
        e = info.value
        assert e.status_code == status, e
        assert e.body["type"] == "error"
        assert e.body["error"]["type"] == etype and e.body["error"]["code"] == code
        assert e.response.headers["request-id"] == e.response.headers["X-Svc-Request-Id"]
        return e

    fails(anthropic.AuthenticationError, 401, "authentication_error", "invalid_api_key",
          c=sdk(claude_node, "sk-up-" + "x" * 40))
    fails(anthropic.NotFoundError, 404, "not_found_error", "model_not_found",
          lambda: client.messages.create(model="claude-opus-9", max_tokens=10, messages=HELLO))
    narrow = seed(redis_url, phone="09120000001", allowed_models=["mock/chat-1"])[0]
    fails(anthropic.PermissionDeniedError, 403, "permission_error", "model_not_allowed",
          lambda: sdk(claude_node, narrow).messages.create(model="claude-sonnet-4-5", max_tokens=10, messages=HELLO))
    broke = seed(redis_url, phone="09120000002", balance="0")[0]
    e = fails(anthropic.APIStatusError, 402, "billing_error", "insufficient_balance", c=sdk(claude_node, broke))
    assert set(e.body["error"]["svc"]) >= {"balance_toman", "available_toman", "required_toman"}
    slow = seed(redis_url, phone="09120000003", rpm=1)[0]
    sdk(claude_node, slow).messages.create(model="mock/chat-1", max_tokens=10, messages=HELLO)
    e = fails(anthropic.RateLimitError, 429, "rate_limit_error", "rate_limit_exceeded", c=sdk(claude_node, slow))
    assert int(e.response.headers["Retry-After"]) >= 1
    fails(anthropic.InternalServerError, 503, "overloaded_error", "upstream_unavailable",
          lambda: client.messages.create(model="dead/chat", max_tokens=10, messages=HELLO))
    configure(mock, status=500)
    fails(anthropic.InternalServerError, 502, "api_error", "upstream_error")
    configure(mock, status=0)
    # max_tokens is required, as in the Messages API (the SDK would not send the request)
    r = httpx.post(claude_node.base + "/messages", headers={"x-api-key": key, "anthropic-version": "2023-06-01"},
                   json={"model": "mock/chat-1", "messages": HELLO})
    assert r.status_code == 400
    assert r.json()["error"] == {"type": "invalid_request_error", "message": "max_tokens: Field required",
                                 "code": "invalid_request"}
    assert r.headers["x-should-retry"] == "false"


@pytest.mark.parametrize("stream", [False, True])
def test_stop_sequence_reaches_the_client_from_an_anthropic_provider(claude_node, redis_url, funded, stream):
    key, account_id, _ = funded
    before = wallet(redis_url, account_id)
    client = sdk(claude_node, key)
    ask = dict(model="claude-sonnet-4-5", max_tokens=100, messages=HELLO, stop_sequences=["tok3"])
    if stream:
        with client.messages.stream(**ask) as s:
            msg = s.get_final_message()
    else:
        msg = client.messages.create(**ask)
    assert msg.content[0].text == "tok0 tok1 tok2 "
    assert (msg.stop_reason, msg.stop_sequence) == ("stop_sequence", "tok3")
    assert charged(redis_url, account_id, before) == 5 * PROMPT + 3 * COMPLETION


def test_hold_from_max_tokens_and_the_meta_block(claude_node, redis_url, funded):
    """The hold is the chat route's for the translated body (sized from max_tokens); the svc
    block rides on the Message when asked for."""
    key = funded[0]
    client = sdk(claude_node, key, default_headers={"X-Svc-Include-Meta": "1"})
    for max_tokens in (100, 4000):
        raw = client.messages.with_raw_response.create(model="claude-sonnet-4-5", max_tokens=max_tokens, messages=HELLO)
        svc = orjson.loads(raw.http_response.content)["svc"]
        model = claude_node.ctx.catalog.resolve("claude-sonnet-4-5")
        hold = sizing.hold_micro(to_chat({"model": "x", "max_tokens": max_tokens, "messages": HELLO}), [model])
        assert svc["hold_toman"] == money.fmt(hold) and svc["model"] == "anthropic/claude-sonnet-4.5"
        assert svc["cost_toman"] == money.fmt(5 * PROMPT + 5 * COMPLETION)
    poor = seed(redis_url, phone="09120000004", balance="100")[0]  # 5 + 100 tokens fit, 4000 do not
    sdk(claude_node, poor).messages.create(model="claude-sonnet-4-5", max_tokens=100, messages=HELLO)
    with pytest.raises(anthropic.APIStatusError) as info:
        sdk(claude_node, poor).messages.create(model="claude-sonnet-4-5", max_tokens=4000, messages=HELLO)
    assert info.value.status_code == 402 and info.value.body["error"]["code"] == "insufficient_balance"


def test_streams_share_the_accounts_cap_with_chat(claude_node, funded, mock):
    """Ten chat streams held open by the provider: a Messages stream is the eleventh."""
    key = funded[0]
    readers = []
    with contextlib.ExitStack() as stack:
        http = stack.enter_context(httpx.Client(timeout=30))
        for _ in range(10):
            r = stack.enter_context(http.stream(
                "POST", claude_node.base + "/chat/completions", headers={"Authorization": f"Bearer {key}"},
                json={"model": "mock/chat-1", "messages": HELLO, "stream": True, "mock": {"gate_after": 1}}))
            assert r.status_code == 200
            readers.append(r.iter_raw())  # (kept: a dropped reader closes its response)
            next(readers[-1])  # the first chunk: the stream holds its slot
        with pytest.raises(anthropic.RateLimitError) as info:
            with sdk(claude_node, key).messages.stream(model="mock/chat-1", max_tokens=10, messages=HELLO) as s:
                s.get_final_message()
        assert info.value.body["error"]["code"] == "too_many_concurrent_streams"
        assert info.value.response.headers["Retry-After"] == "5"
        httpx.post(f"http://127.0.0.1:{mock.port}/_mock/release")


def test_a_body_past_the_limit_is_refused_in_anthropic_shape_before_it_is_read(claude_node, funded):
    conn = http.client.HTTPConnection("127.0.0.1", claude_node.port, timeout=10)
    try:
        conn.putrequest("POST", "/v1/messages")
        conn.putheader("x-api-key", funded[0])
        conn.putheader("Content-Length", str(21 * 1024 * 1024))
        conn.endheaders()  # no body byte is sent: the answer comes from the headers alone
        resp = conn.getresponse()
        body = orjson.loads(resp.read())
    finally:
        conn.close()
    assert resp.status == 413
    assert body["type"] == "error" and body["error"]["type"] == "request_too_large"
    assert body["error"]["code"] == "request_too_large"
    assert resp.getheader("request-id") == resp.getheader("X-Svc-Request-Id")
