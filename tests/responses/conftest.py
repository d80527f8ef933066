"""A gateway node with the Responses API on (UPGATE_RESPONSES=on), the mock on both dialects and
the Messages suite's catalog (tests/anthropic/conftest.py), and one with it off."""
from __future__ import annotations

import openai
import pytest

from tests.anthropic.conftest import EXTRA
from tests.gateway import CATALOG, Node, seed, test_settings
from upgate.catalog import rules as catalog, store as catalog_store
from upgate.store import connection as store
from upgate.upstream.providers import Provider


NATIVE = """
[[models]]
id = "native/resp-1"
provider = "native"
upstream_model = "mock-resp-1"
prompt_toman_per_million = "150000"
completion_toman_per_million = "600000"
capabilities = ["chat"]
"""


def _node(redis_url, mock, on: bool) -> Node:
    catalog_store.store(store.connect_sync(redis_url),
                        catalog.parse(CATALOG.read_text() + EXTRA + NATIVE, {"mock", "dead", "claude", "native"}))
    providers = {"mock": mock.provider(), "claude": mock.provider("claude", dialect="anthropic"),
                 "dead": Provider(name="dead", base_url="http://127.0.0.1:9/v1", api_key="x",
                                  dialect="openai", available=True),
                 # speaks the Responses API itself (providers file: responses = true)
                 "native": Provider(name="native", base_url=mock.base_url, api_key="sk-mock-SECRET123",
                                    dialect="openai", available=True, responses=True)}
    return Node(test_settings(redis_url, responses=on), providers)


@pytest.fixture
def resp_node(redis_url, mock):
    node = _node(redis_url, mock, True)
    yield node
    node.close()


@pytest.fixture
def off_node(redis_url, mock):
    node = _node(redis_url, mock, False)
    yield node
    node.close()


@pytest.fixture
def funded(redis_url):
    return seed(redis_url, balance="100000")


def client(node, key, **kw) -> openai.OpenAI:
    return openai.OpenAI(base_url=node.base, api_key=key, max_retries=0, **kw)
