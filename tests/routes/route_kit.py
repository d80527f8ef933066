"""Helpers for the route suites: three mock providers on their own loops (each with its own
switches), an unreachable one, a catalog of models with several routes, and gateway nodes."""
from __future__ import annotations

import time
import urllib.request

import orjson
import pytest

from tests.gateway import MockProvider, Node, seed, test_settings
from upgate.catalog import rules as catalog, store as catalog_store
from upgate.services import accounts, records
from upgate.store import connection as store
from upgate.upstream.providers import Provider

PROMPT, COMPLETION = 150_000, 600_000  # toman per million tokens, every model below
KEYS = {"POOL_KEY_A": "sk-pool-AAAA1111", "POOL_KEY_B": "sk-pool-BBBB2222"}

CATALOG = """
[[models]]
id = "mock/r-order"
routes = [
  { provider = "dead", upstream_model = "m", priority = 0 },
  { provider = "two", upstream_model = "m", priority = 1 },
  { provider = "one", upstream_model = "m", priority = 2 },
]
prompt_toman_per_million = "150000"
completion_toman_per_million = "600000"

[[models]]
id = "mock/r-weights"
routes = [
  { provider = "one", upstream_model = "m", weight = 3 },
  { provider = "two", upstream_model = "m", weight = 1 },
]
prompt_toman_per_million = "150000"
completion_toman_per_million = "600000"

[[models]]
id = "mock/r-pair"
routes = [
  { provider = "two", upstream_model = "m", priority = 0 },
  { provider = "one", upstream_model = "m", priority = 1 },
]
prompt_toman_per_million = "150000"
completion_toman_per_million = "600000"

[[models]]
id = "mock/r-slow"
routes = [
  { provider = "three", upstream_model = "m", priority = 0 },
  { provider = "one", upstream_model = "m", priority = 1 },
]
prompt_toman_per_million = "150000"
completion_toman_per_million = "600000"

[[models]]
id = "mock/pooled"
provider = "pool"
upstream_model = "m"
prompt_toman_per_million = "150000"
completion_toman_per_million = "600000"

[[models]]
id = "mock/single"
provider = "two"
upstream_model = "m"
prompt_toman_per_million = "150000"
completion_toman_per_million = "600000"
"""


def configure(mock: MockProvider, **switches) -> None:
    """The mock's default switches (`{}` clears them)."""
    urllib.request.urlopen(urllib.request.Request(
        f"http://127.0.0.1:{mock.port}/_mock/config", data=orjson.dumps(switches), method="POST"), timeout=5)


def reset(mock: MockProvider) -> None:
    urllib.request.urlopen(urllib.request.Request(
        f"http://127.0.0.1:{mock.port}/_mock/reset", data=b"{}", method="POST"), timeout=5)


def served(mock: MockProvider) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{mock.port}/_mock/stats", timeout=5) as r:
        return orjson.loads(r.read())["requests"]


class Routed:
    """The providers `one`, `two`, `three` (three mocks), `dead` (nothing listens) and `pool`
    (a fourth mock behind a pool of two keys), the routed catalog, a funded key, and nodes."""

    def __init__(self, mocks: dict[str, MockProvider], redis_url: str):
        self.mocks, self.redis_url = mocks, redis_url
        self.client = store.connect_sync(redis_url)
        names = {"one", "two", "three", "dead", "pool"}
        catalog_store.store(self.client, catalog.parse(CATALOG, names))
        self.providers = {n: mocks[n].provider(n) for n in ("one", "two", "three")}
        self.providers["dead"] = Provider(name="dead", base_url="http://127.0.0.1:9/v1", api_key="x",
                                          dialect="openai", available=True)
        pool = mocks["pool"].provider("pool")
        self.providers["pool"] = Provider(name="pool", base_url=pool.base_url, api_key=KEYS["POOL_KEY_A"],
                                          dialect="openai", available=True, keys=tuple(KEYS.items()))
        self.nodes: list[Node] = []
        self.key, self.account_id, _ = seed(redis_url, balance="10000000", rpm=600)

    def node(self, **overrides) -> Node:
        n = Node(test_settings(self.redis_url, **overrides), self.providers)
        self.nodes.append(n)
        return n

    def more_keys(self, n: int) -> list[str]:
        """`n` more keys of the account (600 rpm each: the most a key may have)."""
        from tests.gateway import PEPPER
        from upgate.services import keys

        return [keys.create_key(self.client, PEPPER, self.account_id, rpm=600)[0] for _ in range(n)]

    def balance_micro(self) -> int:
        return accounts.show(self.client, self.account_id)["balance_micro"]

    def record(self, request_id: str) -> dict:
        return records.find(self.client, request_id)

    def close(self) -> None:
        for n in self.nodes:
            n.close()


@pytest.fixture(scope="module")
def route_mocks():
    mocks = {n: MockProvider() for n in ("one", "two", "three", "pool")}
    yield mocks
    for m in mocks.values():
        m.close()


@pytest.fixture
def routed(redis_url, route_mocks):
    for m in route_mocks.values():
        reset(m)
    env = Routed(route_mocks, redis_url)
    yield env
    env.close()


def chat(node: Node, key: str, model: str, **extra):
    import httpx

    body = {"model": model, "messages": [{"role": "user", "content": "hello world!"}], **extra}
    return httpx.post(node.base + "/chat/completions", json=body,
                      headers={"Authorization": f"Bearer {key}"}, timeout=30)


def wait_for(check, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


def cost_micro(usage: dict) -> int:
    """The catalog price of an answer, micro-toman (every model above has the same prices)."""
    return usage["prompt_tokens"] * PROMPT + usage["completion_tokens"] * COMPLETION
