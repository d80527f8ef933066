"""Odd `type` values a stranger can put in a Responses body: each is a 400 in the spec's error
shape, never a 500 (an unhashable item type raised TypeError; a tool type that is no token went
into the X-Svc-Dropped-Tools header, which Tornado refuses for CR/LF or non-Latin-1 text)."""
from __future__ import annotations

import httpx
import orjson
import pytest

BODIES = {
    "item type a list": {"input": [{"type": ["message"]}]},
    "item type an object": {"input": [{"type": {"a": 1}}]},
    "tool type with CR LF": {"input": "hi", "tools": [{"type": "a\r\nSet-Cookie: x=1"}]},
    "tool type in Persian": {"input": "hi", "tools": [{"type": "جستجو"}]},
    "tool type a list": {"input": "hi", "tools": [{"type": ["web_search"]}]},
    "tool without a type": {"input": "hi", "tools": [{"name": "x"}]},
}


@pytest.mark.parametrize("name", BODIES)
def test_odd_types_are_400(resp_node, funded, name):
    body = {"model": "mock/chat-1", **BODIES[name]}
    r = httpx.post(resp_node.base + "/responses", headers={"Authorization": f"Bearer {funded[0]}"},
                   content=orjson.dumps(body), timeout=30)
    assert r.status_code == 400, (name, r.status_code, r.text)
    assert r.json()["error"]["code"] == "invalid_request"
    assert "x-svc-dropped-tools" not in r.headers


def test_a_built_in_tool_is_still_named_as_dropped(resp_node, funded):
    body = {"model": "mock/chat-1", "input": "hi", "tools": [{"type": "web_search_preview"}, {"type": "mcp"}]}
    r = httpx.post(resp_node.base + "/responses", headers={"Authorization": f"Bearer {funded[0]}"},
                   content=orjson.dumps(body), timeout=30)
    assert r.status_code == 200 and r.headers["x-svc-dropped-tools"] == "web_search_preview, mcp"
