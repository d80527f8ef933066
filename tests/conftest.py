"""Shared fixtures: a private redis-server per test session (flushed per test), a local
Redis Cluster for the cluster suites, and the embedded store for pure unit tests."""
from __future__ import annotations

import pytest
import redis

from tests.procs import RedisCluster, RedisServer
from upgate.store import connection as store

pytest_plugins = ["tests.parallel"]  # workers, groups and tests that run alone (pytest-xdist)


@pytest.fixture(scope="session")
def redis_server():
    server = RedisServer().start()
    yield server
    server.close()


@pytest.fixture
def redis_url(redis_server) -> str:
    """A clean private Redis for this test."""
    redis.Redis(port=redis_server.port).flushall()
    return redis_server.url


@pytest.fixture
def r(redis_url):
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


@pytest.fixture(scope="session")
def redis_cluster():
    cluster = RedisCluster().start()
    yield cluster
    cluster.close()


@pytest.fixture
def cluster_url(redis_cluster) -> str:
    redis_cluster.flush()
    return redis_cluster.url


@pytest.fixture
def memory_url():
    store.reset_memory()
    yield "memory://"
    store.reset_memory()


# ---- end-to-end: the mock provider and gateway nodes ----------------------------------------

@pytest.fixture(scope="session")
def mock_provider():
    from tests.gateway import MockProvider

    mock = MockProvider()
    yield mock
    mock.close()


@pytest.fixture
def mock(mock_provider):
    """The mock provider with its switches reset for this test."""
    import urllib.request

    urllib.request.urlopen(urllib.request.Request(
        f"http://127.0.0.1:{mock_provider.port}/_mock/reset", data=b"{}", method="POST"), timeout=5)
    return mock_provider


@pytest.fixture
def make_node(redis_url, mock):
    """Factory: start gateway nodes on the private Redis with the test catalog loaded."""
    from tests.gateway import Node, load_catalog, test_settings
    from upgate.upstream.providers import Provider

    nodes = []
    load_catalog(redis_url)

    def make(load=True, **overrides):
        providers = {"mock": mock.provider(),
                     "dead": Provider(name="dead", base_url="http://127.0.0.1:9/v1", api_key="x",
                                      dialect="openai", available=True)}
        node = Node(test_settings(redis_url, **overrides), providers)
        nodes.append(node)
        return node

    yield make
    for n in nodes:
        n.close()


@pytest.fixture
def node(make_node):
    return make_node()


@pytest.fixture
def receiver():
    """A webhook receiver on loopback (tests/webhook_receiver.py), closed after the test."""
    from tests.webhook_receiver import Receiver

    rcv = Receiver()
    yield rcv
    rcv.close()
