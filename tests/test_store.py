import redis

from upgate import store


def test_private_redis_is_not_the_shared_one(redis_server, r):
    assert redis_server.port != 6379
    r.set("x", "1")
    assert r.get("x") == "1"


def test_cluster_fixture_routes_tagged_keys_to_one_slot(cluster_url):
    c = store.connect_sync(cluster_url)
    c.set("{a:1}:wallet", "1")
    c.set("{a:1}:keys", "2")
    assert c.keyslot("{a:1}:wallet") == c.keyslot("{a:1}:keys")
    assert c.get("{a:1}:keys") == b"2"


def test_memory_store_shares_data_between_sync_and_async(memory_url):
    import asyncio

    store.connect_sync(memory_url).set("k", "v")

    async def read():
        return await store.connect_async(memory_url).get("k")

    assert asyncio.run(read()) == b"v"
