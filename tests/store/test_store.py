import pytest

from upgate.store import connection as store


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


def test_cluster_clients_never_retry_a_command(cluster_url):
    """A retried EVALSHA whose first reply was lost would run admit (or a top-up) twice: every
    cluster client is built without command retries, the async one with room for bursts."""
    sync = store.connect_sync(cluster_url)
    assert sync.retry.get_retries() == 0
    sync.close()
    client = store.connect_async(cluster_url)
    assert client.retry.get_retries() == 0
    assert client.connection_kwargs["max_connections"] >= 512


def test_cluster_clients_still_follow_moved(cluster_url):
    """Without retries a MOVED reply is still followed (it is a redirect, not a retry)."""
    import asyncio

    key = "{a:moved}:wallet"
    sync = store.connect_sync(cluster_url)
    sync.set(key, "1")
    slot = sync.keyslot(key)
    owner = sync.nodes_manager.slots_cache[slot][0]
    wrong = next(n for n in sync.get_primaries() if n.name != owner.name)
    sync.nodes_manager.slots_cache[slot] = [wrong]  # a stale slot map: the next call gets MOVED
    assert sync.get(key) == b"1"
    assert sync.nodes_manager.slots_cache[slot][0].name == owner.name
    sync.close()

    async def follow():
        client = store.connect_async(cluster_url)
        await client.initialize()
        bad = next(n for n in client.get_primaries() if n.name != owner.name)
        client.nodes_manager.slots_cache[slot] = [bad]
        try:
            return await client.get(key), client.nodes_manager.slots_cache[slot][0].name
        finally:
            await client.aclose()

    assert asyncio.run(follow()) == (b"1", owner.name)


def test_cluster_pubsub_keeps_the_credentials_and_tls_of_the_url():
    """The event subscription on a cluster opens its own connection: it must log in (and use
    TLS) like every other one, or a protected cluster would never deliver a revocation."""
    import redis.asyncio as aioredis

    client = store.connect_async("rediss+cluster://ops:s3cret@127.0.0.1:7000?ssl_cert_reqs=none")
    assert isinstance(client, aioredis.RedisCluster)
    pool = store.pubsub_async(client).connection_pool
    assert pool.connection_kwargs["username"] == "ops" and pool.connection_kwargs["password"] == "s3cret"
    assert pool.connection_kwargs["ssl_cert_reqs"] == "none"
    assert pool.connection_class is aioredis.SSLConnection
    plain = store.pubsub_async(store.connect_async("redis+cluster://127.0.0.1:7000")).connection_pool
    assert plain.connection_class is aioredis.Connection and plain.connection_kwargs.get("password") is None


def test_async_client_packs_commands_in_c_and_they_work(redis_url):
    """The hot path's commands are packed by hiredis: same bytes as redis-py, same answers."""
    import asyncio

    from redis.asyncio.connection import Connection

    client = store.connect_async(redis_url)
    conn = client.connection_pool.make_connection()
    args = ("EVALSHA", "a" * 40, 2, "{a:1}:wallet", "{a:1}:holds", 123456789, "x y", b"\xff")
    assert conn.pack_command(*args) == [b"".join(Connection.pack_command(conn, *args))]  # redis-py's own
    assert conn.pack_command("SCRIPT LOAD", "return 1")[0].startswith(b"*3\r\n$6\r\nSCRIPT\r\n$4\r\nLOAD\r\n")

    async def roundtrip():
        await client.set("k", "välue")
        sha = await client.script_load("return ARGV[1] .. KEYS[1]")
        got = await client.scripts.execute("EVALSHA", sha, 1, "k", 42), await client.get("k")
        await client.aclose()
        return got

    assert asyncio.run(roundtrip()) == (b"42k", "välue".encode())
    tls = store.connect_async("rediss://127.0.0.1:1/0")
    assert issubclass(tls.connection_pool.connection_class, __import__("redis").asyncio.SSLConnection)


@pytest.mark.serial  # 1,324 connects on one loop against a 2 s connect timeout: CPU-starved by other workers, some time out
def test_a_burst_past_the_pool_waits_for_a_connection_instead_of_failing():
    """Thousands of streams opening at once send more commands than the pool has connections:
    they queue for one (bounded) rather than fail with MaxConnectionsError (a 503). On a server of
    its own whose accept queue takes the whole pool at once (a production Redis is set so, see
    docs/redis.md): the suite's shared server, busy with other workers, would drop SYNs past its
    default 511 and turn this test into one about connect timeouts."""
    import asyncio

    from tests.procs import RedisServer

    server = RedisServer(extra=["--tcp-backlog", "2048", "--maxclients", "4096"]).start()

    async def burst():
        client = store.connect_async(server.url)
        pool = client.connection_pool
        try:
            got = await asyncio.gather(*(client.incr("burst") for _ in range(pool.max_connections + 300)))
            return got, len(pool._available_connections) + len(pool._in_use_connections), pool.max_connections
        finally:
            await client.aclose()

    try:
        got, opened, cap = asyncio.run(burst())
    finally:
        server.stop()
    assert sorted(got) == list(range(1, cap + 301)) and opened <= cap


def test_a_reset_cluster_client_sends_a_burst_to_each_key_s_master(cluster_url):
    """After a Cluster restart the async client is reset (no node map, no default node) and the
    next requests arrive at once. redis-py 8.1 chose their node before rediscovering the
    cluster: a random master, MOVED, and on every 5th MOVED it dropped every connection, the
    ones the other requests were reading from included (ConnectionError, AttributeError)."""
    import asyncio

    sync = store.connect_sync(cluster_url)
    keys = [f"burst:{i}" for i in range(96)]
    for k in keys:
        sync.set(k, k)
    sync.close()

    async def burst():
        client = store.connect_async(cluster_url)
        try:
            await client.initialize()
            await client.aclose()  # what an error during the restart leaves behind
            return await asyncio.gather(*(client.get(k) for k in keys), return_exceptions=True)
        finally:
            await client.aclose()

    assert asyncio.run(burst()) == [k.encode() for k in keys]
