"""Redis connections (real, cluster or embedded) and the Lua script registry.

URL forms (``UPGATE_REDIS_URL``):
- ``redis://host:port/db`` (or ``rediss://``) — one Redis server.
- ``redis+cluster://host:port`` — a Redis Cluster, discovered from that seed node.
- ``memory://`` — the embedded in-process store (fakeredis with Lua via lupa) for the demo
  and fast unit tests. Sync and async clients opened in one process share its data.
"""
from __future__ import annotations

from functools import lru_cache
from importlib import resources
from pathlib import Path

import redis
import redis.asyncio as aioredis
from redis.exceptions import NoScriptError

_MEMORY_SERVER = None


def _memory_server():
    global _MEMORY_SERVER
    if _MEMORY_SERVER is None:
        import fakeredis

        _MEMORY_SERVER = fakeredis.FakeServer()
    return _MEMORY_SERVER


def reset_memory() -> None:
    """Forget the embedded store (tests)."""
    global _MEMORY_SERVER
    _MEMORY_SERVER = None


def is_cluster(url: str) -> bool:
    return url.startswith("redis+cluster://")


def _cluster_seed(url: str) -> str:
    return "redis://" + url[len("redis+cluster://"):]


def connect_async(url: str):
    """The asyncio client the gateway uses on its hot path (hiredis parser when installed)."""
    if url.startswith("memory://"):
        import fakeredis

        return fakeredis.FakeAsyncRedis(server=_memory_server())
    # No automatic retries: a retried EVALSHA whose first reply was lost would run admit twice.
    # Settle retries itself (it is idempotent by hold id); everything else fails fast to a 503.
    # On a cluster this also turns off redis-py's 10 retries on timeouts and connection errors;
    # MOVED and ASK are redirects, followed whatever the retry count.
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff

    if is_cluster(url):
        return aioredis.RedisCluster.from_url(_cluster_seed(url), max_connections=512,
                                              retry=Retry(NoBackoff(), 0), socket_timeout=5,
                                              socket_connect_timeout=2)
    return aioredis.Redis.from_url(url, max_connections=512, health_check_interval=0,
                                   retry=Retry(NoBackoff(), 0), socket_timeout=5,
                                   socket_connect_timeout=2)


def connect_sync(url: str):
    """The blocking client the operator CLI and tests use."""
    if url.startswith("memory://"):
        import fakeredis

        return fakeredis.FakeRedis(server=_memory_server())
    if is_cluster(url):
        # no command retries: a top-up (topup.lua) sent again after a lost reply would apply twice
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        return redis.RedisCluster.from_url(_cluster_seed(url), retry=Retry(NoBackoff(), 0))
    return redis.Redis.from_url(url)  # a single node: redis-py sets no retries on from_url


def pubsub_async(client):
    """A pub/sub handle. On a cluster PUBLISH reaches every node, so any one node will do."""
    if isinstance(client, aioredis.RedisCluster):
        node = client.get_default_node()
        return aioredis.Redis(host=node.host, port=node.port).pubsub()
    return client.pubsub()


# ---- Lua scripts -------------------------------------------------------------------------

LIB = "_lib"  # shared helpers prepended to every script that asks for them (Redis has no import)


def _lua_dir():
    """Installed: package data `upgate.lua`. Source checkout (tests run from the repo root,
    which shadows the install): the top-level `lua/` beside the package."""
    try:
        return resources.files("upgate.lua")
    except ModuleNotFoundError:
        return Path(__file__).resolve().parent.parent / "lua"


@lru_cache(maxsize=None)
def script_source(name: str) -> str:
    folder = _lua_dir()
    text = folder.joinpath(name + ".lua").read_text(encoding="utf-8")
    if "--! uses _lib" in text:
        text = folder.joinpath(LIB + ".lua").read_text(encoding="utf-8") + "\n" + text
    return text


class Script:
    """One Lua script, called by SHA. A NOSCRIPT reply (Redis restarted or flushed) reloads it."""

    def __init__(self, name: str):
        import hashlib

        self.name = name
        self.source = script_source(name)
        self.sha = hashlib.sha1(self.source.encode()).hexdigest()

    async def __call__(self, client, keys: list[str], args: list):
        try:
            return await client.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            await client.script_load(self.source)
            return await client.evalsha(self.sha, len(keys), *keys, *args)

    def call_sync(self, client, keys: list[str], args: list):
        try:
            return client.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            client.script_load(self.source)
            return client.evalsha(self.sha, len(keys), *keys, *args)

    def queue(self, pipe, keys: list[str], args: list) -> None:
        """Add this script to a pipeline (one round trip with its neighbours)."""
        pipe.evalsha(self.sha, len(keys), *keys, *args)


@lru_cache(maxsize=None)
def script(name: str) -> Script:
    return Script(name)
