"""What a stranger can send to /v1/responses: every odd body is a 4xx in the spec's error shape,
never a 5xx (hypothesis), and a huge one (90,000 input items, 20,000 tools) costs the node's
loop at most 50 ms (measured as tests/handlers/test_body_work.py does: its translation runs
off the loop like the Messages route's)."""
from __future__ import annotations

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tests.gateway import seed
from tests.handlers.test_body_work import HealthPoller
from tests.test_event_loop_blocking import LoopLag, assert_loop_free

pytestmark = pytest.mark.timeout(300)

_JSON = st.recursive(st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1) | st.floats(allow_nan=False) | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                     max_leaves=8)
_ITEM = st.fixed_dictionaries({}, optional={
    "type": st.sampled_from(["message", "function_call", "function_call_output", "custom_tool_call", "reasoning",
                             "additional_tools", "item_reference", "web_search_call", "x"]) | _JSON,
    "role": st.sampled_from(["user", "assistant", "system", "developer", "tool"]) | _JSON,
    "content": _JSON | st.lists(st.fixed_dictionaries({"type": st.sampled_from(
        ["input_text", "output_text", "input_image", "input_file", "refusal", "x"]) | _JSON,
        "text": _JSON, "image_url": _JSON}), max_size=3),
    "call_id": _JSON, "name": _JSON, "arguments": _JSON, "output": _JSON, "input": _JSON, "tools": _JSON})
_BODY = st.fixed_dictionaries({"model": st.just("mock/chat-1") | _JSON}, optional={
    "input": st.lists(_ITEM, max_size=4) | _JSON, "instructions": _JSON, "tools": _JSON
    | st.lists(st.fixed_dictionaries({"type": st.sampled_from(["function", "custom", "namespace", "web_search"]),
                                      "name": _JSON, "parameters": _JSON, "tools": _JSON}), max_size=3),
    "tool_choice": _JSON, "max_output_tokens": _JSON, "reasoning": _JSON, "text": _JSON, "stream": _JSON,
    "previous_response_id": _JSON, "store": _JSON, "parallel_tool_calls": _JSON})


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(body=_BODY)
def test_odd_bodies_are_4xx_never_5xx(resp_node_once, body):
    node, key = resp_node_once
    r = httpx.post(node.base + "/responses", headers={"Authorization": f"Bearer {key}"},
                   content=orjson.dumps(body), timeout=30)
    assert r.status_code < 500, (body, r.text)
    if r.status_code >= 400:
        err = r.json()["error"]
        assert set(err) >= {"message", "type", "code"} and r.status_code in (400, 402, 404, 429)
    elif body.get("stream") is not True:
        assert r.json()["object"] == "response"


@pytest.fixture
def resp_node_once(resp_node, redis_url):
    key, _, _ = seed(redis_url, balance="100000000", rpm=600)
    return resp_node, key


@pytest.mark.serial  # it measures time: nothing else may run meanwhile (tests/parallel.py)
def test_huge_bodies_hold_no_loop(resp_node, redis_url):
    broke, _, _ = seed(redis_url, balance="0", rpm=600)
    funded, _, _ = seed(redis_url, balance="100000000", rpm=600)
    items = orjson.dumps({"model": "mock/chat-1", "input": [
        {"role": "user" if i % 2 == 0 else "assistant", "content": "x"} for i in range(90_000)]})
    tools = orjson.dumps({"model": "mock/chat-1", "input": "x", "tools": [
        {"type": "function", "name": f"t{i}", "parameters": {"type": "object"}} for i in range(512)] + [
        {"type": "namespace", "name": "n", "tools": [{"type": "custom", "name": f"c{i}"} for i in range(20_000)]}]})
    assert len(items) > 2_000_000
    codes = []
    with HealthPoller(resp_node), LoopLag(resp_node) as lag:
        for body, key in [(items, broke), (items, broke), (items, funded), (tools, funded)]:
            codes.append(httpx.post(resp_node.base + "/responses", content=body, timeout=120,
                                    headers={"Authorization": f"Bearer {key}"}).status_code)
    assert codes == [402, 402, 200, 400], codes  # 20,512 tools: past the 512 a request may hold
    assert_loop_free(lag)
