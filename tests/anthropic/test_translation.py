"""The pure translations (upgate/messages/, upgate/upstream/anthropic.py) without a server:
Messages → chat, chat → Message, chat chunks → events, and the anthropic dialect's way back."""
from __future__ import annotations

import orjson
import pytest

from upgate.errors import GatewayError
from upgate.messages import answer, errors
from upgate.messages.events import EventEncoder
from upgate.messages.request import to_chat
from upgate.upstream import anthropic as dialect
from upgate.upstream.dialects import prepare_body, request_headers

IMG = {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}


def test_a_full_request_translates():
    body = {
        "model": "claude-sonnet-4-5", "max_tokens": 512, "stop_sequences": ["END"], "temperature": 0.2,
        "system": [{"type": "text", "text": "You code."}, {"type": "text", "text": "Briefly."}],
        "metadata": {"user_id": "u1"}, "thinking": {"type": "enabled", "budget_tokens": 256},
        "tools": [{"name": "read", "input_schema": {"type": "object"}},
                  {"type": "web_search_20250305", "name": "web_search"}],
        "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Look:"}, {"type": "image", "source": IMG}]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "hm", "signature": "s1"},
                {"type": "text", "text": "Reading."},
                {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"path": "a.py"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "x=1"}]},
                {"type": "text", "text": "Go on."}]},
        ],
    }
    chat = to_chat(body)
    assert chat.native is body
    assert chat["messages"] == [
        {"role": "system", "content": "You code.\n\nBriefly."},
        {"role": "user", "content": [{"type": "text", "text": "Look:"},
                                     {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}]},
        {"role": "assistant", "content": "Reading.",
         "tool_calls": [{"id": "toolu_1", "type": "function", "function": {"name": "read", "arguments": '{"path":"a.py"}'}}],
         "reasoning_details": [{"type": "reasoning.text", "text": "hm", "signature": "s1"}]},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "x=1"},
        {"role": "user", "content": "Go on."},
    ]
    assert chat["tools"] == [{"type": "function", "function": {"name": "read", "parameters": {"type": "object"}}}]
    assert chat["tool_choice"] == "required" and chat["parallel_tool_calls"] is False
    assert chat["stop"] == ["END"] and chat["user"] == "u1" and chat["reasoning"] == {"max_tokens": 256}
    # the anthropic dialect gets the client's own body, model and stream set by the gateway
    sent = orjson.loads(prepare_body(chat, "anthropic", "claude-sonnet-4-5-20250929", True))
    assert sent == {**body, "model": "claude-sonnet-4-5-20250929", "stream": True}
    # an openai upstream gets the chat body, asked for usage
    sent = orjson.loads(prepare_body(chat, "openai", "gpt-x", True))
    assert sent["stream_options"] == {"include_usage": True} and "native" not in sent


@pytest.mark.parametrize("body, message", [
    ({"model": "m", "messages": [{"role": "user", "content": "hi"}]}, "max_tokens: Field required"),
    ({"model": "m", "max_tokens": 5, "messages": []}, "messages: at least one message is required"),
    # Anthropic's own wording, which Claude Code's fallback for an unsupported role matches
    ({"model": "m", "max_tokens": 5, "messages": [{"role": "tool", "content": "x"}]},
     "messages.0.role: Input should be 'user' or 'assistant'"),
    ({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "video"}]}]}, "'video'"),
    ({"model": "m", "max_tokens": 5, "system": 3, "messages": [{"role": "user", "content": "x"}]}, "system: Input should be"),
])
def test_refused_requests(body, message):
    with pytest.raises(GatewayError) as info:
        to_chat(body)
    assert info.value.code == "invalid_request" and message in info.value.message


def test_a_chat_answer_becomes_a_message():
    obj = {"id": "gen-1", "model": "x", "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": "Let me look.", "reasoning": "think",
        "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "read", "arguments": '{"p": 1}'}}]}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 4, "prompt_tokens_details": {"cached_tokens": 6}}}
    msg = answer.from_chat(obj, "anthropic/claude-sonnet-4.5", "msg_1")
    assert msg["content"] == [{"type": "thinking", "thinking": "think", "signature": ""},
                              {"type": "text", "text": "Let me look."},
                              {"type": "tool_use", "id": "call_1", "name": "read", "input": {"p": 1}}]
    assert msg["stop_reason"] == "tool_use"
    assert msg["usage"] == {"input_tokens": 4, "output_tokens": 4, "cache_read_input_tokens": 6,
                            "cache_creation_input_tokens": 0}


def test_tool_call_chunks_become_tool_use_events():
    enc = EventEncoder("m", "msg_1", 7)
    out = b"".join([
        enc.chunk({"choices": [{"index": 0, "delta": {"role": "assistant", "content": "On it."}}]}),
        enc.chunk({"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "id": "call_1", "type": "function", "function": {"name": "read", "arguments": ""}}]}}]}),
        enc.chunk({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '{"p":'}}]}}]}),
        enc.chunk({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}}]}),
        enc.chunk({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
        enc.chunk({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3}}),
        enc.end(), enc.end(),  # a second end adds nothing
    ]).decode()
    events = [(b.split("\n")[0][7:], orjson.loads(b.split("\n")[1][6:])) for b in out.strip().split("\n\n")]
    assert [n for n, _ in events] == [
        "message_start", "ping", "content_block_start", "content_block_delta", "content_block_stop",
        "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
        "message_delta", "message_stop"]
    assert events[0][1]["message"]["usage"]["input_tokens"] == 7
    assert events[5][1]["content_block"] == {"type": "tool_use", "id": "call_1", "name": "read", "input": {}}
    assert "".join(d["delta"]["partial_json"] for n, d in events[6:8]) == '{"p":1}'
    assert events[9][1]["delta"]["stop_reason"] == "tool_use" and events[9][1]["usage"]["output_tokens"] == 3


def test_errors_keep_the_spec_code_in_anthropic_shape():
    err = GatewayError("insufficient_balance", svc={"required_toman": "1.000000"})
    assert errors.body(err) == {"type": "error", "error": {
        "type": "billing_error", "message": err.message, "code": "insufficient_balance",
        "svc": {"required_toman": "1.000000"}}}
    assert {errors.error_type(GatewayError(c).status) for c in ("upstream_error", "internal_error")} == {"api_error"}
    assert errors.error_type(413) == "request_too_large" and errors.error_type(429) == "rate_limit_error"


def test_the_dialect_translates_a_chat_request_and_its_answer_back():
    chat = {"model": "x", "max_completion_tokens": 99, "stop": "END", "tool_choice": "auto",
            "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
            "messages": [{"role": "system", "content": "S"},
                         {"role": "user", "content": [{"type": "text", "text": "hi"},
                                                      {"type": "image_url", "image_url": {"url": "https://e/x.png"}}]},
                         {"role": "assistant", "content": None, "tool_calls": [
                             {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
                         {"role": "tool", "tool_call_id": "c1", "content": "r1"},
                         {"role": "user", "content": "next"}]}
    body = dialect.request_body(chat, "claude-x", False)
    assert body["system"] == "S" and body["max_tokens"] == 99 and body["stop_sequences"] == ["END"]
    assert body["tools"] == [{"name": "f", "description": "", "input_schema": {"type": "object"}}]
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "hi"},
                                     {"type": "image", "source": {"type": "url", "url": "https://e/x.png"}}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "c1", "name": "f", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "r1"},
                                     {"type": "text", "text": "next"}]}]
    back = dialect.chat_answer(orjson.dumps({"id": "msg_1", "model": "claude-x", "stop_reason": "max_tokens",
                                             "content": [{"type": "text", "text": "ok"}],
                                             "usage": {"input_tokens": 2, "output_tokens": 1,
                                                       "cache_read_input_tokens": 3}}))
    assert back["choices"][0]["message"]["content"] == "ok" and back["choices"][0]["finish_reason"] == "length"
    assert back["usage"]["prompt_tokens"] == 5 and back["usage"]["prompt_tokens_details"]["cached_tokens"] == 3


def test_the_dialect_stream_parser_ends_with_usage_then_done():
    p = dialect.StreamParser()
    ev = lambda kind, d: f"event: {kind}\ndata: {orjson.dumps({'type': kind, **d}).decode()}\n\n".encode()
    raw = b"".join([
        ev("message_start", {"message": {"id": "msg_1", "model": "c", "usage": {"input_tokens": 9}}}),
        ev("ping", {}), ev("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
        ev("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": "hi"}}),
        ev("content_block_stop", {"index": 0}),
        ev("message_delta", {"delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 2}}),
        ev("message_stop", {})])
    out = [p.feed(raw[i:i + 7]) for i in range(0, len(raw), 7)]  # split anywhere
    payloads = [x for part in out for x in part]
    assert payloads[-1] == b"[DONE]"
    chunks = [orjson.loads(x) for x in payloads[:-1]]
    assert chunks[1]["choices"][0]["delta"] == {"content": "hi"}
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["prompt_tokens"] == 9
    assert chunks[-1]["usage"]["completion_tokens"] == 2


def test_the_dialect_serves_chat_only_and_takes_its_key_in_x_api_key():
    with pytest.raises(ValueError):
        prepare_body({"model": "x", "input": "hi"}, "anthropic", "m", False, path="embeddings")
    h = {"Content-Type": "application/json", "Authorization": "Bearer sk-ant-1"}
    assert request_headers("anthropic", h) == {"Content-Type": "application/json", "x-api-key": "sk-ant-1",
                                               "anthropic-version": "2023-06-01"}
    assert request_headers("openai", h) is h


@pytest.mark.parametrize("extra, reasoning, effort", [
    ({"thinking": {"type": "adaptive"}}, None, None),  # no chat meaning: the model's default
    ({"thinking": {"type": "adaptive"}, "output_config": {"effort": "medium"}}, None, "medium"),
    ({"output_config": {"effort": "max"}}, None, "high"),
    ({"thinking": {"type": "enabled", "budget_tokens": 2048}, "output_config": {"effort": "low"}},
     {"max_tokens": 2048}, None),  # the budget says more; OpenRouter takes one of the two
    ({"thinking": {"type": "disabled"}, "output_config": {"effort": "high"}}, None, None),
    ({"output_config": {"effort": "sideways"}}, None, None),
])
def test_thinking_and_effort_translate_where_chat_has_a_meaning(extra, reasoning, effort):
    chat = to_chat({"model": "m", "max_tokens": 4096, "messages": [{"role": "user", "content": "x"}], **extra})
    assert chat.get("reasoning") == reasoning and chat.get("reasoning_effort") == effort


def test_system_messages_keep_their_place_and_server_blocks_are_left_out():
    chat = to_chat({"model": "m", "max_tokens": 9, "system": "S", "messages": [
        {"role": "user", "content": "a"},
        {"role": "system", "content": [{"type": "text", "text": "mid", "cache_control": {"type": "ephemeral"}}]},
        {"role": "assistant", "content": [{"type": "server_tool_use", "id": "s", "name": "web_search", "input": {}},
                                          {"type": "web_search_tool_result", "tool_use_id": "s", "content": []},
                                          {"type": "text", "text": "b"}]},
        {"role": "user", "content": "c"}]})
    assert chat["messages"] == [{"role": "system", "content": "S"}, {"role": "user", "content": "a"},
                                {"role": "system", "content": "mid"}, {"role": "assistant", "content": "b"},
                                {"role": "user", "content": "c"}]
