"""lua/route_health.lua and the node's copy of it (upgate/routes/health.py) on a real Redis:
failures in a row, the cold period, a reset, a refused key, the events every node applies."""
from __future__ import annotations

import asyncio

import orjson
import pytest

from upgate.catalog.route_rules import Route
from upgate.routes.health import RouteHealth
from upgate.settings import Settings
from upgate.store import connection as store, keyspace

R = Route("p", "m")


@pytest.fixture
def run(redis_url):
    loop = asyncio.new_event_loop()
    yield lambda coro: loop.run_until_complete(coro)
    loop.close()


def health(redis_url, **kw) -> RouteHealth:
    return RouteHealth(store.connect_async(redis_url), Settings(redis_url=redis_url, **kw))


def test_failures_in_a_row_turn_a_route_cold_and_a_success_resets_them(redis_url, r, run):
    h = health(redis_url, route_failures=3, route_cooldown_s=30)
    assert [run(h.failed("x/y", R)) for _ in range(2)] == [False, False]
    assert h.failures("x/y", R) == 2 and h.cold_left("x/y", R) is None
    async def succeed():
        h.succeeded("x/y", R)  # a background reset, since this node knows of failures
        await asyncio.sleep(0.05)
    run(succeed())
    assert r.hget(keyspace.route_health("x/y"), "p|m:f") == "0"
    assert [run(h.failed("x/y", R)) for _ in range(3)] == [False, False, True]
    assert 29 < h.cold_left("x/y", R) <= 30
    assert 29_000 < r.pttl(keyspace.route_health("x/y")) <= 600_000
    assert run(h.failed("x/y", R)) is False  # while cold: no new period


def test_another_node_applies_the_events_and_reloads_from_the_store(redis_url, r, run):
    a, b = health(redis_url, route_failures=1), health(redis_url, route_failures=1)
    sub = r.pubsub()
    sub.subscribe(keyspace.CHANNEL)
    sub.get_message(timeout=1)
    run(a.failed("x/y", R))
    run(a.refuse_key("prov", "KEY_A"))
    events = []
    while (m := sub.get_message(timeout=1)) is not None:
        if m["type"] == "message":
            events.append(orjson.loads(m["data"]))
    for e in events:
        b.on_event(e)
    assert b.cold_left("x/y", R) is not None and b.key_out_left("prov", "KEY_A") is not None
    c = health(redis_url)
    run(c.reload())
    assert c.cold_left("x/y", R) is not None and c.key_out_left("prov", "KEY_A") is not None
    assert not any(v.startswith("sk-") for v in r.hgetall(keyspace.key_pool("prov")).values())


def test_route_health_on_a_redis_cluster(cluster_url, run):
    """One key per script call (its own hash tag), and a reload that scans every primary."""
    a = health(cluster_url, route_failures=1)
    for model in ("x/a", "y/b", "z/c"):  # spread over slots
        assert run(a.failed(model, R)) is True
    run(a.refuse_key("prov", "KEY_A"))
    b = health(cluster_url)
    run(b.reload())
    assert all(b.cold_left(m, R) is not None for m in ("x/a", "y/b", "z/c"))
    assert b.key_out_left("prov", "KEY_A") is not None
