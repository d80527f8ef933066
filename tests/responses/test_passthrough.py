"""A provider that speaks the Responses API (`responses = true`): the client's body goes to its
/v1/responses as sent (built-in tools and unknown fields included, the model renamed, `store`
false), and its answer and events come back through the same billing path: held from
max_output_tokens, settled on its usage, a cut stream billed to the cut."""
from __future__ import annotations

import httpx
import openai
import orjson
import pytest

from tests.anthropic.conftest import COMPLETION, PROMPT
from tests.anthropic.test_messages_sdk import FIVE, charged, configure, last_upstream
from tests.handlers.test_proxy import wallet
from tests.responses.conftest import client
from upgate.billing import sizing

TOOL = {"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {}}}


@pytest.mark.parametrize("stream", [False, True])
def test_the_body_goes_as_sent_and_is_billed_by_its_usage(resp_node, redis_url, funded, mock, stream):
    key, account_id, _ = funded
    before = wallet(redis_url, account_id)
    c = client(resp_node, key)
    ask = dict(model="native/resp-1", input="Hello there, gateway!", max_output_tokens=100, store=True,
               tools=[TOOL, {"type": "web_search"}], extra_body={"vendor_knob": 1})
    if stream:
        with c.responses.stream(**ask) as s:
            kinds = [e.type for e in s]
            out = s.get_final_response()
        assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    else:
        out = c.responses.create(**ask)
    assert out.output_text == FIVE and out.model == "native/resp-1" and out.usage.output_tokens == 5
    sent = last_upstream(mock)["last_body"]
    assert sent == {**{k: v for k, v in ask.items() if k != "extra_body"}, "vendor_knob": 1,
                    "model": "mock-resp-1", "stream": stream, "store": False,
                    "tools": [TOOL]}  # web_search left out: the provider bills it per call, no hold here does
    assert charged(redis_url, account_id, before) == 5 * PROMPT + 5 * COMPLETION


def test_built_in_tools_are_left_out_and_named_even_for_a_provider_that_serves_them(resp_node, funded, mock):
    """A provider bills web_search, image_generation, code_interpreter … per call, which no hold or
    charge of the gateway counts: a customer could use them unpaid, so they never go upstream."""
    r = httpx.post(resp_node.base + "/responses", headers={"Authorization": f"Bearer {funded[0]}"},
                   json={"model": "native/resp-1", "input": "x", "tool_choice": {"type": "web_search"},
                         "tools": [{"type": "web_search"}, {"type": "image_generation"},
                                   {"type": "namespace", "name": "ns", "tools": [TOOL, {"type": "code_interpreter"}]}]})
    assert r.status_code == 200
    assert r.headers["X-Svc-Dropped-Tools"] == "web_search, image_generation, code_interpreter"
    sent = last_upstream(mock)["last_body"]
    assert sent["tools"] == [{"type": "namespace", "name": "ns", "tools": [TOOL]}] and sent["tool_choice"] == "auto"


@pytest.mark.parametrize("stream", [False, True])
def test_function_and_custom_calls_come_back(resp_node, funded, mock, stream):
    configure(mock, tool_calls=True)
    c = client(resp_node, funded[0])
    for tool, kind in ((TOOL, "function_call"), ({"type": "custom", "name": "exec"}, "custom_tool_call")):
        if stream:
            with c.responses.stream(model="native/resp-1", input="x", tools=[tool]) as s:
                list(s)
                out = s.get_final_response()
        else:
            out = c.responses.create(model="native/resp-1", input="x", tools=[tool])
        item = out.output[0]
        assert item.type == kind and item.name == tool["name"] and item.call_id == f"call_mock{item.call_id[9:]}"
        if kind == "function_call":
            assert orjson.loads(item.arguments) == {"t": FIVE}
        else:
            assert item.input == FIVE


def test_a_cut_stream_is_billed_to_the_cut(resp_node, redis_url, funded, mock):
    key, account_id, _ = funded
    configure(mock, cut_after=2)
    before = wallet(redis_url, account_id)
    with client(resp_node, key).responses.stream(model="native/resp-1", input="Hello there, gateway!") as s:
        events = list(s)
    assert events[-1].type == "response.failed"
    assert [e.delta for e in events if e.type == "response.output_text.delta"] == ["tok0 ", "tok1 "]
    # as the chat route bills a cut: the prompt estimate, and 10 characters relayed → 3 tokens
    estimate = sizing.prompt_tokens({"messages": [{"role": "user", "content": "Hello there, gateway!"}]})
    assert charged(redis_url, account_id, before) == estimate * PROMPT + 3 * COMPLETION


def test_a_provider_error_is_the_spec_s(resp_node, funded, mock):
    configure(mock, status=429)
    with pytest.raises(openai.RateLimitError) as info:
        client(resp_node, funded[0]).responses.create(model="native/resp-1", input="x")
    assert info.value.code == "upstream_rate_limited"


def test_the_dropped_tools_header_stays_small(resp_node, funded, mock):
    """512 distinct built-in tool types are named 16 at most: a reverse proxy's header buffer
    (4–8 KB by default) would turn a 33 KB header into its own 502."""
    tools = [{"type": f"builtin_{i:03d}_" + "x" * 50} for i in range(512)]
    r = httpx.post(resp_node.base + "/responses", headers={"Authorization": f"Bearer {funded[0]}"},
                   json={"model": "native/resp-1", "input": "x", "tools": tools})
    assert r.status_code == 200
    shown = r.headers["X-Svc-Dropped-Tools"]
    assert len(shown) < 1200 and shown.startswith("builtin_000_") and shown.endswith(", ...")
