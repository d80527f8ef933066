"""What Claude Code really sends (captured from the pinned version through a logging proxy,
tests/agents/fixtures/claude_code_*.json, credentials and machine ids removed), without the
CLI: every shape is accepted, passed as it is to an anthropic-dialect upstream, translated
where chat completions has a meaning, dropped where it has none (docs/client-guide.md)."""
from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.agents.conftest import configure
from tests.anthropic.test_messages_sdk import last_upstream
from upgate.messages.request import to_chat

FIXTURES = Path(__file__).with_name("fixtures")


def captured(name: str) -> dict:
    return json.loads((FIXTURES / f"claude_code_{name}.json").read_text())


@pytest.mark.parametrize("name", ["first_turn", "tool_result", "catalog_id", "budgeted_thinking"])
def test_every_captured_shape_translates(name):
    body = captured(name)["body"]
    chat = to_chat(body)
    roles = [m["role"] for m in chat["messages"]]
    # the system blocks, then the conversation with its system message where Claude Code put it
    assert roles[0] == "system" and chat["messages"][0]["content"].startswith("x-anthropic-billing-header")
    inner = [i for i, m in enumerate(body["messages"]) if m["role"] == "system"]
    assert roles.count("system") == 1 + len(inner)
    # defer_loading tools are not in the model's context: left out, the rest kept
    kept = [t["name"] for t in body["tools"] if not t.get("defer_loading")]
    assert [t["function"]["name"] for t in chat["tools"]] == kept
    assert "DeferredToolPlaceholder" not in kept
    thinking = body["thinking"]
    if thinking["type"] == "enabled":
        assert chat["reasoning"] == {"max_tokens": thinking["budget_tokens"]}
    if "output_config" in body:
        assert chat["reasoning_effort"] == body["output_config"]["effort"]
    assert chat["user"] == body["metadata"]["user_id"] and chat["max_tokens"] == body["max_tokens"]
    for dropped in ("context_management", "output_config", "thinking", "metadata", "system", "cache_control"):
        assert dropped not in chat
    assert "cache_control" not in json.dumps(chat)


def test_a_tool_result_round_trips_to_chat():
    chat = to_chat(captured("tool_result")["body"])
    call, result = chat["messages"][-2:]
    assert call["tool_calls"][0]["function"]["name"] == "Bash"
    assert result == {"role": "tool", "tool_call_id": call["tool_calls"][0]["id"], "content": "upgate-tool-loop"}


@pytest.mark.parametrize("model, native", [("claude-opus-5-5", True), ("mock/chat-1", False)])
def test_the_captured_request_over_http(demo_node, account, mock, model, native):
    """The first turn as Claude Code posts it (`?beta=true`, its headers): an anthropic upstream
    receives the body as sent (the model renamed) with its anthropic-beta; a chat upstream the
    translation. The stream names the model as Claude Code asked for it."""
    cap = captured("first_turn")
    headers = {k: v for k, v in cap["headers"].items() if k.lower() != "accept"}
    body = {**cap["body"], "model": model}
    r = httpx.post(demo_node.url + cap["uri"], headers={**headers, "Authorization": f"Bearer {account[0]}"},
                   json=body, timeout=30)
    assert r.status_code == 200, r.text
    start = json.loads(r.text.split("\n")[1][len("data: "):])
    assert start["type"] == "message_start" and start["message"]["model"] == model
    sent = last_upstream(mock)
    upstream = sent["last_body"]
    if native:
        assert upstream == {**body, "model": "mock-claude-1"}
        assert sent["last_headers"]["Anthropic-Beta"] == headers["Anthropic-Beta"]
        # message_start carries the provider's own input count, not the gateway's estimate
        assert start["message"]["usage"]["input_tokens"] == upstream_input_tokens(upstream)
    else:
        assert [m["role"] for m in upstream["messages"]] == ["system", "user", "system"]
        assert upstream["reasoning_effort"] == "medium" and "thinking" not in upstream
        assert "Anthropic-Beta" not in sent["last_headers"]


def upstream_input_tokens(body: dict) -> int:
    """The mock's count (characters // 4 of the message and system texts, upgate/mock)."""
    from upgate.mock.behaviour import prompt_tokens

    return prompt_tokens([body["messages"], body["system"]])


def test_an_unsupported_role_is_refused_in_anthropics_words(demo_node, account, mock):
    """Claude Code's fallback for a refused mid-conversation system message matches Anthropic's
    wording; any role Anthropic refuses gets it."""
    configure(mock)
    r = httpx.post(demo_node.url + "/v1/messages?beta=true", headers={"x-api-key": account[0]},
                   json={"model": "mock/chat-1", "max_tokens": 10,
                         "messages": [{"role": "user", "content": "a"}, {"role": "tool", "content": "b"}]})
    assert r.status_code == 400
    assert r.json()["error"]["message"] == "messages.1.role: Input should be 'user' or 'assistant'"
