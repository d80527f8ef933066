"""A provider of the `anthropic` dialect serving /v1/chat/completions (the reverse translation),
its cache tokens priced at the catalog's cache prices, and catalog aliases on every route."""
from __future__ import annotations

import httpx
import openai
import pytest

from tests.anthropic.conftest import CACHED, COMPLETION, PROMPT, WRITE, sdk
from tests.anthropic.test_messages_sdk import HELLO, charged, configure, last_upstream
from tests.handlers.test_proxy import wallet

FIVE = "tok0 tok1 tok2 tok3 tok4 "


def chat(node, key) -> openai.OpenAI:
    return openai.OpenAI(base_url=node.base, api_key=key, max_retries=0)


@pytest.mark.parametrize("stream", [False, True])
def test_chat_client_through_an_anthropic_provider(claude_node, redis_url, funded, mock, stream):
    key, account_id, _ = funded
    before = wallet(redis_url, account_id)
    ask = [{"role": "system", "content": "Be brief."}, *HELLO]
    if stream:
        chunks = list(chat(claude_node, key).chat.completions.create(
            model="claude-sonnet-4-5", messages=ask, stream=True, stream_options={"include_usage": True}))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        usage = chunks[-1].usage
        assert {c.model for c in chunks} == {"claude-sonnet-4-5"}  # the name it asked by
    else:
        out = chat(claude_node, key).chat.completions.create(model="claude-sonnet-4-5", messages=ask)
        text, usage = out.choices[0].message.content, out.usage
        # the answer names the model as the client asked for it (DESIGN.md, "Model names")
        assert out.model == "claude-sonnet-4-5" and out.choices[0].finish_reason == "stop"
    assert text == FIVE
    sent = last_upstream(mock)
    body, headers = sent["last_body"], sent["last_headers"]
    assert body["model"] == "claude-sonnet-4-5-20250929" and body["system"] == "Be brief."
    assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "Hello there, gateway!"}]}]
    assert body["max_tokens"] == 4096  # the Messages API requires it; the spec's default hold
    assert headers["Anthropic-Version"] == "2023-06-01" and headers["X-Api-Key"] == "sk-mock-SECRET123"
    assert "Authorization" not in headers
    prompt = 5 + 2  # the mock counts the system prompt too (9 chars → 2)
    assert (usage.prompt_tokens, usage.completion_tokens) == (prompt, 5)
    assert charged(redis_url, account_id, before) == prompt * PROMPT + 5 * COMPLETION


def test_cache_tokens_priced_like_the_chat_dialect(claude_node, redis_url, funded, mock):
    """3 input + 1 read from the cache + 1 written to it, 5 output: Anthropic reports the cache
    apart from input_tokens, the chat dialect inside prompt_tokens; the charge is the same."""
    key, account_id, _ = funded
    configure(mock, cached_tokens=1, cache_write_tokens=1)
    expected = 3 * PROMPT + 1 * CACHED + 1 * WRITE + 5 * COMPLETION
    before = wallet(redis_url, account_id)
    msg = sdk(claude_node, key).messages.create(model="claude-sonnet-4-5", max_tokens=100, messages=HELLO)
    assert (msg.usage.input_tokens, msg.usage.cache_read_input_tokens, msg.usage.cache_creation_input_tokens) == (3, 1, 1)
    assert charged(redis_url, account_id, before) == expected
    before = wallet(redis_url, account_id)
    chat(claude_node, key).chat.completions.create(model="mock/chat-cached", messages=HELLO)  # openai dialect
    assert charged(redis_url, account_id, before) == expected
    before = wallet(redis_url, account_id)
    sdk(claude_node, key).messages.create(model="claude-3-5-haiku-20241022", max_tokens=100, messages=HELLO)
    assert charged(redis_url, account_id, before) == expected  # Messages → chat dialect: the same


def test_aliases_resolve_on_every_route(claude_node, funded):
    key = funded[0]
    rec = httpx.get(claude_node.base + "/models/claude-sonnet-4-5").json()
    assert rec["id"] == "anthropic/claude-sonnet-4.5"
    out = chat(claude_node, key).chat.completions.create(model="claude-3-5-haiku-20241022", messages=HELLO)
    assert out.model == "claude-3-5-haiku-20241022"  # named as asked; billed as mock/chat-cached
    with pytest.raises(openai.NotFoundError) as info:
        chat(claude_node, key).chat.completions.create(model="claude-sonnet-4-6", messages=HELLO)
    assert info.value.code == "model_not_found"


@pytest.mark.parametrize("stream", [False, True])
def test_a_route_of_another_dialect_takes_over(claude_node, redis_url, funded, stream):
    """A model whose first route (an openai-dialect provider) is down fails over to its
    anthropic-dialect route inside the same hold: each attempt speaks its own dialect."""
    key, account_id, _ = funded
    before = wallet(redis_url, account_id)
    client = sdk(claude_node, key)
    ask = dict(model="anthropic/claude-routed", max_tokens=100, messages=HELLO)
    if stream:
        with client.messages.stream(**ask) as s:
            msg = s.get_final_message()
    else:
        msg = client.messages.create(**ask)
    assert msg.content[0].text == FIVE
    assert charged(redis_url, account_id, before) == 5 * PROMPT + 5 * COMPLETION
