"""Shared fixtures: a private redis-server per test session (flushed per test), a local
Redis Cluster for the cluster suites, and the embedded store for pure unit tests."""
from __future__ import annotations

import pytest
import redis

from tests.procs import RedisCluster, RedisServer
from upgate import store


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
