"""X-Svc-Include-Meta on a stream: the svc block goes on the chunk that carries the provider's
final usage, whatever else that chunk carries, once the stream is settled. LiteLLM (and others)
send the usage on a chunk with `"choices": [{"index": 0, "delta": {}}]`; a scripted provider
plays those shapes to a real gateway, read with the real openai client."""
from __future__ import annotations

from decimal import Decimal

import openai
import pytest

from tests.gateway import Node, load_catalog, seed
from tests.gateway import test_settings as settings_for
from tests.scripted_upstream import ScriptedUpstream, content, event
from tests.handlers.test_proxy import HELLO, cost, wallet

pytestmark = pytest.mark.timeout(120)
FINISH = {"id": "x", "object": "chat.completion.chunk",
          "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}


def _usage(completion: int, prompt: int = 5) -> dict:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _with_usage(chunk: dict, completion: int) -> dict:
    return {**chunk, "usage": _usage(completion)}


@pytest.fixture
def gw(redis_url):
    up = ScriptedUpstream()
    load_catalog(redis_url)
    node = Node(settings_for(redis_url), {"mock": up.provider()})
    key, account_id, _ = seed(redis_url, balance="100000")
    yield node, up, key, account_id
    node.close()
    up.close()


def _stream(node, key, meta=True, **kw) -> list:
    headers = {"X-Svc-Include-Meta": "1"} if meta else {}
    c = openai.OpenAI(base_url=node.base, api_key=key, max_retries=0, default_headers=headers)
    return list(c.chat.completions.create(model="mock/chat-1", messages=HELLO, stream=True, **kw))


def _text(chunks) -> str:
    return "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)


def _svc(chunks) -> list[tuple[int, dict]]:
    return [(i, ch.model_extra["svc"]) for i, ch in enumerate(chunks) if (ch.model_extra or {}).get("svc")]


def _check_billed(redis_url, account_id, svc: dict, completion: int) -> None:
    charged = cost("mock/chat-1", 5, completion)
    assert Decimal(svc["cost_toman"]) == Decimal(charged) / 1_000_000
    w = wallet(redis_url, account_id)
    assert (100_000_000_000 - w["balance"], w["held"]) == (charged, 0)


def test_litellms_usage_chunk_with_an_empty_delta_gets_the_svc_block(gw, redis_url):
    node, up, key, account_id = gw
    up.script = [(0.01, event(content("Hello ")) + event(content("world"))), (0.01, event(FINISH)),
                 (0.01, event(_with_usage({**content(""), "choices": [{"index": 0, "delta": {}}]}, 7))),
                 (0.01, event(b"[DONE]"))]
    chunks = _stream(node, key)
    assert _text(chunks) == "Hello world"
    [(at, svc)] = _svc(chunks)
    assert at == len(chunks) - 1  # the last chunk: the usage chunk, with its choices kept
    assert chunks[-1].usage.completion_tokens == 7 and chunks[-1].choices[0].index == 0
    assert svc["model"] == "mock/chat-1" and svc["request_id"].startswith("req_")
    _check_billed(redis_url, account_id, svc, 7)


def test_usage_on_every_chunk_keeps_the_order_and_meta_goes_on_the_last(gw, redis_url):
    node, up, key, account_id = gw
    up.script = [(0.01, event(_with_usage(content(f"t{i} "), i))) for i in range(1, 9)] + \
        [(0.01, event(_with_usage(FINISH, 8))), (0.01, event(b"[DONE]"))]
    chunks = _stream(node, key, stream_options={"include_usage": True})
    assert _text(chunks) == "".join(f"t{i} " for i in range(1, 9))
    assert [ch.usage.completion_tokens for ch in chunks] == list(range(1, 9)) + [8]
    [(at, svc)] = _svc(chunks)
    assert at == len(chunks) - 1 and chunks[-1].choices[0].finish_reason == "stop"
    _check_billed(redis_url, account_id, svc, 8)


def test_content_after_a_usage_chunk_keeps_its_order_and_meta_rides_on_a_usage_chunk_of_ours(
        gw, redis_url):
    node, up, key, account_id = gw
    up.script = [(0.01, event(_with_usage(content("first "), 3))), (0.05, event(content("second"))),
                 (0.01, event(FINISH)), (0.01, event(b"[DONE]"))]
    chunks = _stream(node, key)
    assert _text(chunks) == "first second"
    [(at, svc)] = _svc(chunks)
    assert at == len(chunks) - 1 and chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 3
    _check_billed(redis_url, account_id, svc, 3)


def test_without_meta_the_usage_chunk_with_choices_is_relayed_as_before(gw, redis_url):
    node, up, key, account_id = gw
    last = _with_usage({**content(""), "choices": [{"index": 0, "delta": {}}]}, 4)
    up.script = [(0.01, event(content("Hi"))), (0.01, event(last)), (0.01, event(b"[DONE]"))]
    chunks = _stream(node, key, meta=False, stream_options={"include_usage": True})
    assert _text(chunks) == "Hi" and chunks[-1].usage.completion_tokens == 4 and not _svc(chunks)
    up.script = [(0.01, event(content("Hi"))), (0.01, event(last)), (0.01, event(b"[DONE]"))]
    chunks = _stream(node, key, meta=False)  # not asked for: the usage is left out
    assert _text(chunks) == "Hi" and all(ch.usage is None for ch in chunks)


def test_a_held_chunk_with_content_still_reaches_the_client_when_the_stream_fails(gw, redis_url):
    node, up, key, account_id = gw
    up.script = [(0.01, event(_with_usage(content("kept"), 2))), (0.05, event(b"{not json"))]
    got = []
    with pytest.raises(openai.APIError):
        c = openai.OpenAI(base_url=node.base, api_key=key, max_retries=0,
                          default_headers={"X-Svc-Include-Meta": "1"})
        for ch in c.chat.completions.create(model="mock/chat-1", messages=HELLO, stream=True):
            got.append(ch)
    assert _text(got) == "kept"
    w = wallet(redis_url, account_id)
    assert (100_000_000_000 - w["balance"], w["held"]) == (cost("mock/chat-1", 5, 2), 0)
