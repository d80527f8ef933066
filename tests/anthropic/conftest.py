"""A gateway node with two providers on the mock: `mock` (openai dialect) and `claude` (the
anthropic dialect, the mock's /v1/messages), and a catalog whose Claude-like models carry the
aliases an agent sends by default."""
from __future__ import annotations

import anthropic
import pytest

from tests.gateway import CATALOG, Node, seed, test_settings
from upgate.catalog import rules as catalog, store as catalog_store
from upgate.store import connection as store
from upgate.upstream.providers import Provider

EXTRA = """
[[models]]
id = "anthropic/claude-sonnet-4.5"
provider = "claude"
upstream_model = "claude-sonnet-4-5-20250929"
prompt_toman_per_million = "150000"
completion_toman_per_million = "600000"
cached_prompt_toman_per_million = "15000"
cache_write_toman_per_million = "187500"
capabilities = ["chat"]
max_output_tokens = 64000
aliases = ["claude-sonnet-4-5", "claude-sonnet-4-5-20250929"]

[[models]]
id = "mock/chat-cached"
provider = "mock"
upstream_model = "mock-chat-1"
prompt_toman_per_million = "150000"
completion_toman_per_million = "600000"
cached_prompt_toman_per_million = "15000"
cache_write_toman_per_million = "187500"
capabilities = ["chat"]
aliases = ["claude-3-5-haiku-20241022"]

[[models]]
id = "anthropic/claude-routed"
routes = [{ provider = "dead", upstream_model = "dead-chat", priority = 0 },
          { provider = "claude", upstream_model = "claude-sonnet-4-5-20250929", priority = 1 }]
prompt_toman_per_million = "150000"
completion_toman_per_million = "600000"
capabilities = ["chat"]
"""
# prompt 150,000 / completion 600,000 toman per million = 150,000 / 600,000 micro-toman a token
PROMPT, COMPLETION, CACHED, WRITE = 150_000, 600_000, 15_000, 187_500


@pytest.fixture
def claude_node(redis_url, mock):
    catalog_store.store(store.connect_sync(redis_url),
                        catalog.parse(CATALOG.read_text() + EXTRA, {"mock", "dead", "claude"}))
    providers = {"mock": mock.provider(), "claude": mock.provider("claude", dialect="anthropic"),
                 "dead": Provider(name="dead", base_url="http://127.0.0.1:9/v1", api_key="x",
                                  dialect="openai", available=True)}
    node = Node(test_settings(redis_url), providers)
    yield node
    node.close()


@pytest.fixture
def funded(redis_url):
    return seed(redis_url, balance="100000")


def sdk(node, key, **kw) -> anthropic.Anthropic:
    """The real Anthropic SDK pointed at the gateway, as Claude Code is (ANTHROPIC_BASE_URL is
    the gateway's root: the SDK appends /v1/messages)."""
    return anthropic.Anthropic(base_url=node.url, api_key=key, max_retries=0, **kw)
