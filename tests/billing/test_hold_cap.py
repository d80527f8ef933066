"""A model's max_output_tokens caps the output its hold is sized for: through a running gateway
with the real openai client, a wallet that covers any answer the capped model can give is
admitted, while an uncapped model of the same prices still holds the spec's 4096 tokens."""
from __future__ import annotations

from decimal import Decimal

import openai
import pytest

from tests.gateway import load_catalog, seed
from upgate.billing import sizing
from upgate.catalog import rules as catalog, store as catalog_store
from upgate.store import connection as store

HELLO = [{"role": "user", "content": "Hello there, gateway!"}]
# 0.6 toman a completion token: 2,000 tokens hold 1,200 toman, 4,096 tokens 2,457.6
CAPPED = """
[[models]]
id = "mock/capped"
provider = "mock"
upstream_model = "mock-chat-1"
prompt_toman_per_million = "150000"
completion_toman_per_million = "600000"
capabilities = ["chat"]
max_output_tokens = 2000

[[models]]
id = "mock/uncapped"
provider = "mock"
upstream_model = "mock-chat-1"
prompt_toman_per_million = "150000"
completion_toman_per_million = "600000"
capabilities = ["chat"]
"""


@pytest.fixture
def gw(redis_url, make_node):
    load_catalog(redis_url)  # (make_node loaded it already; ours replaces it before the node starts)
    catalog_store.store(store.connect_sync(redis_url), catalog.parse(CAPPED, {"mock"}))
    return make_node()


def _client(gw, key):
    return openai.OpenAI(base_url=gw.base, api_key=key, max_retries=0,
                         default_headers={"X-Svc-Include-Meta": "1"})


def test_a_capped_model_holds_only_what_it_can_answer(gw, redis_url):
    key, _, _ = seed(redis_url, balance="1500")  # covers 2,000 output tokens, not 4,096
    c = _client(gw, key)
    out = c.chat.completions.create(model="mock/capped", messages=HELLO)
    assert out.choices[0].message.content
    model = gw.ctx.catalog.resolve("mock/capped")
    body = {"model": "mock/capped", "messages": HELLO}
    hold = Decimal(out.model_extra["svc"]["hold_toman"])
    assert hold == Decimal(sizing.hold_micro(body, [model])) / 1_000_000
    assert hold == Decimal("1201.65")  # 2,000 × 0.6 + the prompt's 11 estimated tokens × 0.15
    # a max_tokens beyond the cap changes nothing: the model still cannot give more
    out = c.chat.completions.create(model="mock/capped", messages=HELLO, max_tokens=50_000)
    assert Decimal(out.model_extra["svc"]["hold_toman"]) == hold
    # the same prices without a cap hold 4,096 tokens, which this wallet does not cover
    with pytest.raises(openai.APIStatusError) as e:
        c.chat.completions.create(model="mock/uncapped", messages=HELLO)
    assert e.value.status_code == 402


def test_a_fallback_list_caps_each_model_by_its_own_limit(gw, redis_url):
    key, _, _ = seed(redis_url, balance="100000")
    out = _client(gw, key).chat.completions.create(
        model="mock/capped", messages=HELLO, extra_body={"models": ["mock/uncapped"]})
    # the uncapped entry is the dearer hold (4,096 tokens), so the list holds that
    assert Decimal(out.model_extra["svc"]["hold_toman"]) == Decimal("2459.25")  # 4,096 × 0.6 + 1.65
