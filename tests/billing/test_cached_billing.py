"""Cached prompt tokens and provider-reported cost, end to end: the real `openai` client → a
running node → the mock provider reporting `prompt_tokens_details` / `usage.cost`; money
checked to the micro-toman, on JSON answers and streams, and in the usage report."""
from __future__ import annotations

import json
import time

import openai
import pytest
import redis

from tests.gateway import CATALOG, Node, seed, test_settings as node_settings
from upgate.billing import jalali, money
from upgate.catalog import rules as catalog, store as catalog_store
from upgate.services import records, usage
from upgate.store import connection as store, keyspace
from upgate.upstream.providers import Provider

PROMPT = [{"role": "user", "content": "x" * 400}]  # the mock counts 400 // 4 = 100 prompt tokens
PRICE = {"prompt": 150_000, "cached": 15_000, "write": 187_500, "completion": 600_000}  # micro-toman/token


def cached_catalog() -> str:
    text = CATALOG.read_text()
    head = 'id = "mock/chat-1"\nprovider = "mock"\n'
    assert head in text
    return text.replace(head, head + 'cached_prompt_toman_per_million = "15000"\n'
                                     'cache_write_toman_per_million = "187500"\n', 1)


def load(redis_url, node) -> None:
    version = catalog_store.store(store.connect_sync(redis_url), catalog.parse(cached_catalog(), {"mock", "dead"}))
    deadline = time.monotonic() + 5
    while node.ctx.catalog.version != version and time.monotonic() < deadline:
        time.sleep(0.02)
    assert node.ctx.catalog.version == version


def balance(redis_url, account_id) -> int:
    return int(redis.Redis.from_url(redis_url).hget(keyspace.wallet(account_id), "balance"))


def expected(prompt=100, cached=0, write=0, completion=5) -> int:
    return ((prompt - cached - write) * PRICE["prompt"] + cached * PRICE["cached"]
            + write * PRICE["write"] + completion * PRICE["completion"])


def chat(node, key, stream: bool, **mock):
    c = openai.OpenAI(base_url=node.base, api_key=key, max_retries=0)
    if not stream:
        return c.chat.completions.create(model="mock/chat-1", messages=PROMPT, extra_body={"mock": mock}).usage
    last = None
    for chunk in c.chat.completions.create(model="mock/chat-1", messages=PROMPT, stream=True,
                                           stream_options={"include_usage": True}, extra_body={"mock": mock}):
        last = chunk.usage or last
    return last


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_cached_tokens_are_charged_at_their_prices(node, redis_url, stream):
    load(redis_url, node)
    key, account_id, _ = seed(redis_url, balance="100000")
    cases = [({}, expected()),  # nothing cached: all at the prompt price
             ({"cached_tokens": 64}, expected(cached=64)),
             ({"cached_tokens": 64, "cache_write_tokens": 20}, expected(cached=64, write=20)),
             ({"cache_write_tokens": 100}, expected(write=100)),
             ({"cached_tokens": 1000}, expected(cached=100)),  # more than the prompt: capped to it
             ({"cached_tokens": 10, "cost": "5"}, expected(cached=10))]  # bill_by tokens: cost ignored
    for mock, cost in cases:
        before = balance(redis_url, account_id)
        reported = chat(node, key, stream, **mock)
        assert reported.prompt_tokens == 100 and reported.completion_tokens == 5
        if "cached_tokens" in mock:  # relayed to the client as the provider wrote it
            assert reported.prompt_tokens_details.cached_tokens == mock["cached_tokens"]
        assert before - balance(redis_url, account_id) == cost, mock
    assert expected(cached=64, write=20) == 10_110_000  # 16 × 150000 + 64 × 15000 + 20 × 187500 + 5 × 600000

    day = jalali.day_key(time.time())
    report = usage.report(usage.fetch(store.connect_sync(redis_url), account_id, [day]), "model")
    totals = report["totals"]
    assert totals["requests"] == len(cases) and totals["prompt_tokens"] == 100 * len(cases)
    assert totals["cached_tokens"] == 64 + 64 + 100 + 10
    kept = records.list_requests(store.connect_sync(redis_url), account_id)  # newest first
    assert [x["cached_tokens"] for x in kept] == [10, 100, 0, 64, 64, 0]
    assert [x["cost_toman"] for x in kept] == [money.fmt(cost) for _, cost in reversed(cases)]


def test_holds_stay_at_the_full_prompt_price(node, redis_url):
    load(redis_url, node)
    model = node.ctx.catalog.resolve("mock/chat-1")
    from upgate.billing import sizing

    body = {"model": "mock/chat-1", "messages": PROMPT, "max_tokens": 5}
    hold = sizing.hold_micro(body, [model])
    assert hold == sizing.prompt_tokens(body) * PRICE["prompt"] + 5 * PRICE["completion"]


@pytest.fixture
def cost_node(redis_url, mock, tmp_path):
    """A node whose mock provider bills by provider cost, after a sync recorded its rate."""
    from tests.gateway import load_catalog

    load_catalog(redis_url)
    source = {"data": [{"id": "mock-chat-1", "pricing": {"prompt": "0.0000025", "completion": "0.00001"}}]}
    (tmp_path / "src.json").write_text(json.dumps(source))
    outcome = catalog_store.sync(store.connect_sync(redis_url), str(tmp_path / "src.json"), provider="mock",
                                 usd_toman="65000", markup="1.2", confirmed=True,
                                 provider_names={"mock", "dead"})
    assert outcome.applied
    providers = {"mock": Provider(name="mock", base_url=mock.base_url, api_key="sk-mock-SECRET123",
                                  dialect="openai", available=True, bill_by="provider_cost")}
    node = Node(node_settings(redis_url), providers)
    yield node
    node.close()


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_provider_cost_billing(cost_node, redis_url, stream):
    key, account_id, _ = seed(redis_url, balance="100000")
    before = balance(redis_url, account_id)
    chat(cost_node, key, stream, cost="0.0001234", cached_tokens=50)
    # 0.0001234 USD × 65000 × 1.2 = 9.6252 toman, whatever the tokens
    assert before - balance(redis_url, account_id) == 9_625_200
    before = balance(redis_url, account_id)
    chat(cost_node, key, stream)  # no cost reported: the synced token prices
    # prompt 2.5 × 78000 = 195000 toman/M, completion 10 × 78000 = 780000 toman/M
    assert before - balance(redis_url, account_id) == 100 * 195_000 + 5 * 780_000


def test_bill_by_is_checked_in_the_providers_file(tmp_path):
    from upgate.upstream.providers import ProvidersError, load_providers

    path = tmp_path / "providers.toml"
    path.write_text('[providers.openrouter]\nbase_url = "https://openrouter.ai/api/v1"\nbill_by = "provider_cost"\n'
                    '[providers.openai]\nbase_url = "https://api.openai.com/v1"\n')
    got = load_providers(path, environ={})
    assert (got["openrouter"].bill_by, got["openai"].bill_by) == ("provider_cost", "tokens")
    path.write_text('[providers.openrouter]\nbase_url = "https://openrouter.ai/api/v1"\nbill_by = "cost"\n')
    with pytest.raises(ProvidersError, match="bill_by must be one of: tokens, provider_cost"):
        load_providers(path, environ={})
