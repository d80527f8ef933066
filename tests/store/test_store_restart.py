"""After Redis restarts, no request fails on a connection opened before the restart (issue 21
point 5; the Cluster, issue 27): a real redis-server (or every node of a Cluster) is killed and
started again on its port and directory, and once it answers, a burst of requests through the
gateway sees only 200s."""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
import redis

from tests.gateway import Node, load_catalog, seed
from tests.gateway import test_settings as settings_for
from tests.procs import RedisServer

pytestmark = pytest.mark.timeout(120)

HELLO = [{"role": "user", "content": "Hi"}]


def burst(node, key: str, n: int = 64) -> list[int]:
    """n concurrent requests of every kind that reaches the store: JSON, stream, the account."""
    h = {"Authorization": f"Bearer {key}"}

    def one(i: int) -> int:
        with httpx.Client(base_url=node.base, timeout=30) as x:
            if i % 3 == 0:
                return x.get("/svc/me", headers=h).status_code
            body = {"model": "mock/chat-1", "messages": HELLO, "stream": i % 3 == 1}
            return x.post("/chat/completions", json=body, headers=h).status_code
    with ThreadPoolExecutor(16) as pool:
        return list(pool.map(one, range(n)))


def restart(server: RedisServer) -> None:
    server.stop()  # SIGKILL: every pooled connection of the gateway is now stale
    server.start()  # same port, same directory: the append-only file brings the data back
    deadline = time.monotonic() + 10
    while redis.Redis(port=server.port).get("probe") is None and time.monotonic() < deadline:
        time.sleep(0.05)


def test_a_burst_after_a_redis_restart_gets_no_503(mock):
    server = RedisServer(extra=["--appendonly", "yes", "--appendfsync", "always"]).start()
    try:
        load_catalog(server.url)
        key, _, _ = seed(server.url, balance="1000000", rpm=600)
        redis.Redis(port=server.port).set("probe", 1)
        node = Node(settings_for(server.url), {"mock": mock.provider()})
        try:
            assert set(burst(node, key)) == {200}  # the pools hold many connections now
            restart(server)
            codes = burst(node, key)
            assert codes.count(503) == 0, codes
            assert set(codes) == {200}, codes
        finally:
            node.close()
    finally:
        server.close()


@pytest.mark.cluster
def test_a_burst_after_a_cluster_restart_gets_no_503(redis_cluster, cluster_url, mock):
    """As on one Redis: every request after the restart answers 200 (none 503, none 500).
    The client comes back reset from the outage's errors; redis-py sent its first requests to
    random masters and, at the 5th MOVED, dropped the connections the others were using."""
    load_catalog(cluster_url)
    key, _, _ = seed(cluster_url, balance="1000000", rpm=600)
    node = Node(settings_for(cluster_url), {"mock": mock.provider()})
    try:
        assert set(burst(node, key)) == {200}
        redis_cluster.stop()
        redis_cluster.restart()  # every node back on its port, with its data, cluster_state:ok
        codes = burst(node, key)
        assert set(codes) == {200}, codes
    finally:
        node.close()
