"""The Messages stream on the wire: a golden event sequence (through a chat upstream, and
natively from an anthropic-dialect provider with thinking), and a cut stream billed to the cut
exactly as the chat route bills the same cut."""
from __future__ import annotations

import anthropic
import httpx
import openai
import orjson
import pytest

from tests.anthropic.conftest import COMPLETION, PROMPT, sdk
from tests.anthropic.test_messages_sdk import HELLO, charged, configure
from tests.handlers.test_proxy import wallet
from upgate.billing import sizing
from upgate.billing.output_count import estimate_tokens
from upgate.messages.request import to_chat

TEXT_BLOCK = ["content_block_start"] + ["content_block_delta"] * 5 + ["content_block_stop"]


def raw_events(node, key, body: dict, **headers) -> list[tuple[str, dict]]:
    """(event name, data) of every event, in order, as the bytes came."""
    with httpx.stream("POST", node.base + "/messages", json={**body, "stream": True},
                      headers={"x-api-key": key, "anthropic-version": "2023-06-01", **headers}) as r:
        assert r.status_code == 200
        assert r.headers["content-type"] == "text/event-stream"
        text = r.read().decode()
    out = []
    for block in text.split("\n\n"):
        lines = [ln for ln in block.split("\n") if ln and not ln.startswith(":")]
        if not lines:
            continue
        name = [ln[7:] for ln in lines if ln.startswith("event: ")]
        data = [ln[6:] for ln in lines if ln.startswith("data: ")]
        assert len(name) == 1 and len(data) == 1, block
        out.append((name[0], orjson.loads(data[0])))
    return out


def test_golden_sequence_through_a_chat_upstream(claude_node, funded):
    events = raw_events(claude_node, funded[0], {"model": "mock/chat-1", "max_tokens": 100, "messages": HELLO})
    assert [n for n, _ in events] == ["message_start", "ping", *TEXT_BLOCK, "message_delta", "message_stop"]
    assert all(d["type"] == n for n, d in events)
    start = events[0][1]["message"]
    assert start["model"] == "mock/chat-1" and start["content"] == [] and start["id"].startswith("msg_")
    assert events[2][1] == {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
    assert "".join(d["delta"]["text"] for n, d in events if n == "content_block_delta") == "tok0 tok1 tok2 tok3 tok4 "
    delta = events[-2][1]
    assert delta["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
    assert delta["usage"] == {"input_tokens": 5, "output_tokens": 5, "cache_read_input_tokens": 0,
                              "cache_creation_input_tokens": 0}


def test_golden_sequence_from_an_anthropic_provider_with_thinking(claude_node, funded, mock):
    events = raw_events(claude_node, funded[0], {
        "model": "claude-sonnet-4-5", "max_tokens": 2048, "messages": HELLO,
        "thinking": {"type": "enabled", "budget_tokens": 1024}}, **{"anthropic-beta": "interleaved-thinking-2025-05-14"})
    names = [n for n, _ in events]
    assert names == ["message_start", "ping", "content_block_start", "content_block_delta", "content_block_delta",
                     "content_block_stop", *TEXT_BLOCK, "message_delta", "message_stop"]
    assert events[2][1]["content_block"]["type"] == "thinking"
    assert events[3][1]["delta"] == {"type": "thinking_delta", "thinking": "mock thinking"}
    assert events[4][1]["delta"] == {"type": "signature_delta", "signature": "sig-mock"}
    assert [d["index"] for n, d in events if n.startswith("content_block")] == [0] * 4 + [1] * 7
    assert events[-2][1]["usage"]["output_tokens"] == 5
    sent = httpx.get(f"http://127.0.0.1:{mock.port}/_mock/stats").json()
    assert sent["last_body"]["thinking"] == {"type": "enabled", "budget_tokens": 1024}  # as the client sent it
    assert sent["last_headers"]["X-Api-Key"] and "Authorization" not in sent["last_headers"]
    assert sent["last_headers"]["Anthropic-Beta"] == "interleaved-thinking-2025-05-14"  # Claude Code's betas pass


def test_thinking_signature_survives_the_sdk(claude_node, funded):
    msg = sdk(claude_node, funded[0]).messages.create(
        model="claude-sonnet-4-5", max_tokens=2048, messages=HELLO,
        thinking={"type": "enabled", "budget_tokens": 1024})
    assert msg.content[0].type == "thinking" and msg.content[0].signature == "sig-mock"


@pytest.mark.parametrize("model", ["mock/chat-1", "anthropic/claude-sonnet-4.5"])
def test_cut_stream_is_billed_to_the_cut_like_chat(claude_node, redis_url, funded, mock, model):
    """Two content deltas, then the provider drops the connection: the SDK raises on the error
    event, and the charge is the prompt estimate plus what was relayed, as for a chat client."""
    key, account_id, _ = funded
    configure(mock, cut_after=2)
    before = wallet(redis_url, account_id)
    got = []
    with pytest.raises(anthropic.APIStatusError) as info:
        with sdk(claude_node, key).messages.stream(model=model, max_tokens=100, messages=HELLO) as s:
            for text in s.text_stream:
                got.append(text)
    assert "".join(got) == "tok0 tok1 "
    assert info.value.body["error"]["code"] == "upstream_error"
    prompt = sizing.prompt_tokens(to_chat({"model": model, "max_tokens": 100, "messages": HELLO}))
    cut = prompt * PROMPT + estimate_tokens(len("tok0 tok1 ")) * COMPLETION
    assert charged(redis_url, account_id, before) == cut
    before = wallet(redis_url, account_id)
    chat = openai.OpenAI(base_url=claude_node.base, api_key=key, max_retries=0)
    with pytest.raises(openai.APIError):
        for _ in chat.chat.completions.create(model=model, messages=HELLO, max_tokens=100, stream=True):
            pass
    assert charged(redis_url, account_id, before) == cut
