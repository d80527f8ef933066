"""The pipelined script connection (upgate/store/script_channel.py) against a private redis-server."""

import asyncio

import pytest
import redis
from redis.exceptions import ConnectionError, NoScriptError, ResponseError, TimeoutError

from upgate.store import connection as store

pytestmark = pytest.mark.timeout(60)

ECHO = "return ARGV[1]"
SLOW = "local t = redis.call('TIME'); local s = t[1] * 1e6 + t[2]; " \
       "repeat t = redis.call('TIME') until t[1] * 1e6 + t[2] - s > tonumber(ARGV[1]) * 1000; return 'slept'"


def run(redis_url, test, **options):
    global _BEFORE
    _BEFORE = _ids(redis_url)

    async def body():
        client = store.connect_async(redis_url)
        if options:
            client.scripts._timeout_s = options["timeout_s"]
        try:
            echo = await client.script_load(ECHO)
            slow = await client.script_load(SLOW)
            return await test(client, echo, slow)
        finally:
            await client.aclose()
    return asyncio.run(body())


_BEFORE: set = set()


def _ids(redis_url) -> set:
    base = redis_url.split("@")[-1].replace("redis://", "")
    plain = redis.Redis.from_url("redis://" + base)
    try:
        return {c["id"] for c in plain.client_list()}
    finally:
        plain.close()


def script_connections(r) -> list[dict]:
    """The connections opened by this test's client that ran a script last (other tests of the
    session may leave connections of their own open on the same server)."""
    return [c for c in r.client_list() if c["cmd"] == "evalsha" and c["id"] not in _BEFORE]


def test_concurrent_calls_each_get_their_own_reply_over_one_connection(redis_url, r):
    async def test(client, echo, _slow):
        replies = await asyncio.gather(*(client.scripts.execute("EVALSHA", echo, 0, f"call-{i}") for i in range(500)))
        assert replies == [f"call-{i}".encode() for i in range(500)]
        assert len(script_connections(r)) == 1
    run(redis_url, test)


def test_error_replies_raise_what_redis_py_would_and_the_channel_goes_on(redis_url):
    async def test(client, echo, _slow):
        with pytest.raises(NoScriptError):
            await client.scripts.execute("EVALSHA", "0" * 40, 0)
        with pytest.raises(ResponseError, match="boom"):
            await client.eval("return redis.error_reply('boom')", 0)  # the pool's path, for contrast
        bad = await client.script_load("return redis.error_reply('boom')")
        results = await asyncio.gather(client.scripts.execute("EVALSHA", bad, 0), client.scripts.execute("EVALSHA", echo, 0, "after"),
                                       return_exceptions=True)
        assert isinstance(results[0], ResponseError) and "boom" in str(results[0])
        assert results[1] == b"after"
    run(redis_url, test)


def test_a_cancelled_caller_does_not_shift_the_next_reply(redis_url):
    async def test(client, echo, slow):
        waiting = asyncio.ensure_future(client.scripts.execute("EVALSHA", slow, 0, 150))
        await asyncio.sleep(0.05)
        waiting.cancel()
        assert await client.scripts.execute("EVALSHA", echo, 0, "mine") == b"mine"
        assert waiting.cancelled()
    run(redis_url, test)


def test_the_loop_polls_while_a_reply_is_due_and_sleeps_past_the_spin_window(redis_url):
    async def test(client, echo, slow):
        channel = client.scripts
        assert await client.scripts.execute("EVALSHA", echo, 0, "fast") == b"fast"
        await asyncio.sleep(0.01)
        assert not channel._spinning  # the reply is in: nothing keeps the loop awake

        call = asyncio.ensure_future(client.scripts.execute("EVALSHA", slow, 0, 100))  # a reply 100 ms away
        await asyncio.sleep(0)
        assert channel._spinning
        await asyncio.sleep(0.03)  # past the window: the loop sleeps until the reply comes
        assert not channel._spinning and not call.done()
        assert await call == b"slept"
    run(redis_url, test)


def test_no_spin_while_replies_are_slower_than_the_window(redis_url):
    """A store whose replies take longer than the window (far away, loaded) is not worth
    polling for: the loop would burn the window and sleep anyway."""
    async def test(client, echo, slow):
        channel = client.scripts
        for _ in range(3):
            assert await client.scripts.execute("EVALSHA", slow, 0, 20) == b"slept"
        call = asyncio.ensure_future(client.scripts.execute("EVALSHA", echo, 0, "x"))
        await asyncio.sleep(0)
        assert not channel._spinning
        await call
        spun = False
        for _ in range(2000):  # fast replies bring the average down: polling comes back
            call = asyncio.ensure_future(client.scripts.execute("EVALSHA", echo, 0, "x"))
            await asyncio.sleep(0)
            spun = channel._spinning
            await call
            if spun:
                break
        assert spun
    run(redis_url, test)


def test_a_killed_connection_fails_the_calls_in_flight_and_the_next_call_reconnects(redis_url, r):
    async def test(client, echo, slow):
        assert await client.scripts.execute("EVALSHA", echo, 0, "first") == b"first"
        (conn,) = script_connections(r)
        r.client_pause(2000, all=False)  # holds scripts (writes), not CLIENT KILL
        try:
            in_flight = asyncio.ensure_future(client.scripts.execute("EVALSHA", echo, 0, "held"))
            await asyncio.sleep(0.05)
            r.client_kill_filter(_id=conn["id"])
        finally:
            r.client_unpause()
        with pytest.raises(ConnectionError):
            await in_flight
        assert await client.scripts.execute("EVALSHA", echo, 0, "again") == b"again"
        assert [c["id"] for c in script_connections(r)] != [conn["id"]]
    run(redis_url, test)


def test_a_reply_later_than_the_timeout_fails_every_call_in_flight_then_recovers(redis_url):
    async def test(client, echo, slow):
        results = await asyncio.gather(client.scripts.execute("EVALSHA", slow, 0, 600), client.scripts.execute("EVALSHA", echo, 0, "queued"),
                                       return_exceptions=True)
        assert all(isinstance(x, TimeoutError) for x in results), results
        assert await client.scripts.execute("EVALSHA", echo, 0, "later") == b"later"  # a fresh connection
    run(redis_url, test, timeout_s=0.2)


def test_a_store_that_is_down_is_a_connection_error_not_a_hang():
    async def body():
        client = store.connect_async("redis://127.0.0.1:1/0")
        try:
            with pytest.raises(ConnectionError):
                await client.scripts.execute("EVALSHA", "0" * 40, 0)
        finally:
            await client.aclose()
    asyncio.run(body())


def test_the_channel_logs_in_as_the_url_says(redis_url, r):
    r.acl_setuser("gateway", enabled=True, passwords=["+s3cret"], keys=["*"], commands=["+@all"])
    try:
        url = redis_url.replace("redis://", "redis://gateway:s3cret@")

        async def test(client, echo, _slow):
            assert await client.scripts.execute("EVALSHA", echo, 0, "hi") == b"hi"
            assert [c["user"] for c in script_connections(r)] == ["gateway"]
        run(url, test)
        with pytest.raises(redis.AuthenticationError):
            run(redis_url.replace("redis://", "redis://gateway:wrong@"), test)
    finally:
        r.acl_deluser("gateway")


def test_the_connection_survives_garbage_collection(redis_url, r):
    """The channel takes over the transport of a connection redis-py opened; collecting that
    Connection object must not close the transport under it."""
    import gc

    async def test(client, echo, _slow):
        assert await client.scripts.execute("EVALSHA", echo, 0, "one") == b"one"
        (before,) = script_connections(r)
        gc.collect()
        await asyncio.sleep(0.05)
        assert await client.scripts.execute("EVALSHA", echo, 0, "two") == b"two"
        assert [c["id"] for c in script_connections(r)] == [before["id"]]
    run(redis_url, test)
