"""The Responses request translation (upgate/responses/request.py), on what Codex really sends
(captured from the pinned version, tests/agents/fixtures/codex_*.json): its default model's
`additional_tools` item with namespaced tools and a JavaScript `exec` custom tool, and the
classic function tools with `web_search`."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from upgate.errors import GatewayError
from upgate.handlers.requests import validate
from upgate.responses.request import to_chat

FIXTURES = Path(__file__).parents[1] / "agents" / "fixtures"


def captured(name: str) -> dict:
    return json.loads((FIXTURES / f"codex_{name}.json").read_text())["body"]


def test_codex_default_model_shape():
    body = captured("tool_output")
    chat = to_chat(body)
    validate(chat, "chat")
    names = [t["function"]["name"] for t in chat["tools"]]
    assert "exec" in names and "spawn_agent" in names  # namespaces flattened
    assert chat.custom_tools == {"exec"} and chat.dropped_tools == ()
    exec_tool = chat["tools"][names.index("exec")]["function"]
    assert exec_tool["parameters"]["properties"] == {"input": {"type": "string"}}
    roles = [m["role"] for m in chat["messages"]]
    assert roles[0] == "system"  # developer messages are system messages
    call, output = chat["messages"][-2:]
    assert call["tool_calls"][0]["function"] == {"name": "exec", "arguments": '{"input":"text(\\"upgate-tool-loop\\")"}'}
    assert output["role"] == "tool" and "upgate-tool-loop" in output["content"]
    assert chat["reasoning_effort"] == body["reasoning"]["effort"] and chat["parallel_tool_calls"] is False
    assert chat["stream_options"] == {"include_usage": True}
    for dropped in ("store", "include", "prompt_cache_key", "client_metadata", "input", "text"):
        assert dropped not in chat


def test_codex_classic_shape():
    body = captured("classic_tool_output")
    chat = to_chat(body)
    validate(chat, "chat")
    assert chat.dropped_tools == ("web_search",)
    names = [t["function"]["name"] for t in chat["tools"]]
    assert names[0] == "exec_command" and "web_search" not in names
    call, output = chat["messages"][-2:]
    assert call["tool_calls"][0]["function"]["arguments"] == '{"cmd":"echo upgate-tool-loop"}'
    assert output["tool_call_id"] == call["tool_calls"][0]["id"]


def test_parts_and_formats():
    chat = to_chat({"model": "m", "instructions": "Be brief.", "max_output_tokens": 50,
                    "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}}},
                    "input": [{"role": "user", "content": [
                        {"type": "input_text", "text": "Look:"},
                        {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]},
                        {"type": "reasoning", "id": "rs_1", "summary": []},
                        {"role": "assistant", "content": [{"type": "output_text", "text": "A cat."}]}]})
    assert chat["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Look:"},
                                     {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]},
        {"role": "assistant", "content": "A cat."}]
    assert chat["max_tokens"] == 50
    assert chat["response_format"] == {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}


@pytest.mark.parametrize("body, words", [
    ({"model": "m", "input": "x", "previous_response_id": "resp_1"}, "stateless"),
    ({"model": "m", "input": "x", "conversation": "conv_1"}, "stateless"),
    ({"model": "m", "input": [{"type": "item_reference", "id": "msg_1"}]}, "stateless"),
    ({"model": "m", "input": 3}, "`input` must be"),
    ({"model": "m", "input": [{"type": "telepathy"}]}, "'telepathy'"),
    ({"model": "m", "input": [{"role": "robot", "content": "x"}]}, "role must be"),
])
def test_refused(body, words):
    with pytest.raises(GatewayError) as info:
        to_chat(body)
    assert info.value.code == "invalid_request" and words in info.value.message
