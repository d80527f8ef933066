"""Redis connections (real, cluster or embedded) and the Lua script registry.

URL forms (``UPGATE_REDIS_URL``):
- ``redis://host:port/db`` (or ``rediss://``) — one Redis server.
- ``redis+cluster://host:port`` (``rediss+cluster://`` with TLS) — a Redis Cluster,
  discovered from that seed node; user, password and ``?ssl_…`` options as for one server.
- ``memory://`` — the embedded in-process store (fakeredis with Lua via lupa) for the demo
  and fast unit tests. Sync and async clients opened in one process share its data.
"""
from __future__ import annotations

from functools import lru_cache

import hiredis
import redis
import redis.asyncio as aioredis
import redis.exceptions as rexc
from upgate.store import lua_library
from upgate.store.script_channel import ScriptChannel

_MEMORY_SERVER = None


def _memory_server():
    global _MEMORY_SERVER
    if _MEMORY_SERVER is None:
        import fakeredis

        _MEMORY_SERVER = fakeredis.FakeServer()
    return _MEMORY_SERVER


def text(value) -> str:
    """A reply from the store as str (clients without decode_responses answer bytes)."""
    return value.decode() if isinstance(value, bytes) else str(value)


def text_map(raw: dict) -> dict[str, str]:
    """A hash from the store (HGETALL) with str keys and values."""
    return {text(k): text(v) for k, v in raw.items()}


def reset_memory() -> None:
    """Forget the embedded store (tests)."""
    global _MEMORY_SERVER
    _MEMORY_SERVER = None


_CLUSTER_SCHEMES = {"redis+cluster://": "redis://", "rediss+cluster://": "rediss://"}


def is_cluster(url: str) -> bool:
    return url.startswith(tuple(_CLUSTER_SCHEMES))


def cluster_seed(url: str) -> str:
    scheme, _, rest = url.partition("://")
    return _CLUSTER_SCHEMES[scheme + "://"] + rest


def connect_async(url: str):
    """The asyncio client the gateway uses on its hot path (hiredis parser when installed)."""
    if url.startswith("memory://"):
        import fakeredis

        return fakeredis.FakeAsyncRedis(server=_memory_server())
    # No automatic retries: a script call sent again after its reply was lost would run twice.
    # Settle retries itself (it is idempotent by hold id); everything else fails fast to a 503.
    # On a cluster this also turns off redis-py's 10 retries on timeouts and connection errors;
    # MOVED and ASK are redirects, followed whatever the retry count.
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff

    if is_cluster(url):
        # reinitialize_steps=0: a MOVED moves its slot in the client's map (what it says); by
        # default every 5th MOVED also drops every connection of the client, the ones other
        # requests are using included, and those requests fail (docs/redis.md)
        return _Cluster.from_url(cluster_seed(url), max_connections=512, reinitialize_steps=0,
                                              retry=Retry(NoBackoff(), 0), socket_timeout=5,
                                              socket_connect_timeout=2, driver_info=_driver_info())
    # A blocking pool: a burst of more requests than connections (thousands of streams opening
    # at once) waits a moment for a free one instead of failing with MaxConnectionsError.
    pool = aioredis.BlockingConnectionPool.from_url(
        url, max_connections=1024, timeout=POOL_WAIT_S, health_check_interval=0, retry=Retry(NoBackoff(), 0),
        socket_timeout=5, socket_connect_timeout=2, driver_info=_driver_info(),
        connection_class=_SSLConnection if url.startswith("rediss:") else _Connection)
    client = _Redis(connection_pool=pool)
    client.auto_close_connection_pool = True  # as from_url does: aclose() closes the pool too
    return client


# redis-py finds an FCALL's slot by asking a node (COMMAND GETKEYS: FCALL's keys are "movable"),
# a round trip before every script call; its keys sit where EVALSHA's do, which it parses itself
_FCALL = ("FCALL", "FCALL_RO")


class _Cluster(aioredis.RedisCluster):
    async def execute_command(self, *args, **kwargs):
        # redis-py chooses a command's node before it (re)discovers the cluster, and without a
        # default node (a new client, or one reset after an error: a Cluster restart) it sends a
        # keyed command to a random master, which answers MOVED. Discover first: every command
        # then goes to its slot's master. (Its pipelines already do this.)
        if self._initialize:
            await self.initialize()
        return await super().execute_command(*args, **kwargs)

    async def _determine_slot(self, command: str, *args):
        if command.upper() in _FCALL:
            command = "EVALSHA"
        return await super()._determine_slot(command, *args)


class _SyncCluster(redis.RedisCluster):
    def determine_slot(self, *args):
        if str(args[0]).upper() in _FCALL:
            args = ("EVALSHA", *args[1:])
        return super().determine_slot(*args)


POOL_WAIT_S = 5  # then "No connection available": a 503, like any store failure


@lru_cache(maxsize=None)
def _driver_info():
    """What each connection tells Redis it is (CLIENT SETINFO), resolved once. Left to
    redis-py, every new pooled connection looks its version up in the installed package's
    metadata: file reads on the event loop whenever a burst grows the pool."""
    from redis.driver_info import DriverInfo

    from upgate import __version__

    return DriverInfo(lib_version=redis.__version__).add_upstream_driver("upgate", __version__)


# After Redis restarts, every pooled connection opened before is dead and fails its first
# command. The first such failure drops every idle pooled connection (all as old, so as dead),
# and a command that is safe to send twice is sent again on a new one: reads, and loading scripts.
# A write is never repeated (a lost reply may hide one that ran: a top-up would apply twice).
# Script calls, the hot path, go through the script channel, which sees its connection close
# at once and reconnects; settle retries itself (idempotent by hold id). docs/redis.md
_READS = frozenset(("GET", "MGET", "HGET", "HMGET", "HGETALL", "HLEN", "EXISTS", "TTL", "PTTL", "TYPE",
                    "ZRANGE", "ZRANGEBYSCORE", "ZSCORE", "ZCARD", "ZCOUNT", "SMEMBERS", "SISMEMBER",
                    "SCARD", "LRANGE", "LLEN", "SCAN", "HSCAN", "SSCAN", "ZSCAN", "PING", "INFO",
                    "SCRIPT LOAD", "FUNCTION LOAD"))


def _reads_only(commands) -> bool:
    return all(str(args[0]).upper() in _READS for args, _options in commands)


class _Pipeline(aioredis.client.Pipeline):
    async def execute(self, raise_on_error: bool = True):
        stack = list(self.command_stack)
        try:
            return await super().execute(raise_on_error)
        except rexc.ConnectionError:
            await self.connection_pool.disconnect(inuse_connections=False)
            if self.is_transaction or not stack or not _reads_only(stack):
                raise
            self.command_stack = stack  # (execute reset it)
            return await super().execute(raise_on_error)


class _Redis(aioredis.Redis):
    """A single-node client whose script calls (FCALL: the hot path) share one pipelined
    connection (script_channel.py); other commands and pipelines use the pool as usual, and
    reads among them are sent again once on a dead connection (_READS)."""

    def __init__(self, *, connection_pool, **kwargs):
        super().__init__(connection_pool=connection_pool, **kwargs)
        timeout = connection_pool.connection_kwargs.get("socket_timeout") or 5
        self.scripts = ScriptChannel(connection_pool, timeout)

    def fcall(self, function, numkeys, *keys_and_args):
        return self.scripts.execute("FCALL", function, numkeys, *keys_and_args)

    async def execute_command(self, *args, **options):
        try:
            return await super().execute_command(*args, **options)
        except rexc.ConnectionError:
            await self.connection_pool.disconnect(inuse_connections=False)
            if str(args[0]).upper() not in _READS:
                raise
            return await super().execute_command(*args, **options)

    def pipeline(self, transaction: bool = True, shard_hint=None) -> _Pipeline:
        return _Pipeline(self.connection_pool, self.response_callbacks, transaction, shard_hint)

    async def aclose(self, close_connection_pool=None):
        await self.scripts.close()
        await super().aclose(close_connection_pool)


class _PackInC:
    """redis-py's asyncio connection packs every command in Python (with its Encoder: ~5% of
    the gateway's CPU at saturation, bench/PROFILE.md); hiredis packs the same bytes in C. The
    gateway only sends str, bytes and int arguments, which both accept alike."""

    def pack_command(self, *args):
        first = args[0]
        if isinstance(first, str) and " " in first:  # "SCRIPT LOAD": the server wants two words
            args = (*first.split(), *args[1:])
        return [hiredis.pack_command(args)]


class _Connection(_PackInC, aioredis.Connection):
    pass


class _SSLConnection(_PackInC, aioredis.SSLConnection):
    pass


def connect_sync(url: str):
    """The blocking client the operator CLI and tests use."""
    if url.startswith("memory://"):
        import fakeredis

        return fakeredis.FakeRedis(server=_memory_server())
    if is_cluster(url):
        # no command retries: a top-up (topup.lua) sent again after a lost reply would apply twice
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        return _SyncCluster.from_url(cluster_seed(url), retry=Retry(NoBackoff(), 0))
    return redis.Redis.from_url(url)  # a single node: redis-py sets no retries on from_url


def pubsub_async(client):
    """A pub/sub handle. On a cluster PUBLISH reaches every node, so any one node will do: the
    client's default node, or its seed before it has reached the cluster (no I/O here, so this
    works while the whole cluster is down)."""
    if isinstance(client, aioredis.RedisCluster):
        node = client.get_default_node() or next(iter(client.nodes_manager.startup_nodes.values()))
        # the node's credentials and TLS settings, without the cluster-only connection options
        kwargs = {k: v for k, v in node.connection_kwargs.items() if k in _PUBSUB_OPTIONS or k.startswith("ssl_")}
        pool = aioredis.ConnectionPool(connection_class=node.connection_class, host=node.host, port=node.port,
                                       **kwargs)
        return aioredis.Redis(connection_pool=pool).pubsub()
    return client.pubsub()


_PUBSUB_OPTIONS = frozenset(("username", "password", "credential_provider", "socket_connect_timeout",
                             "socket_keepalive", "driver_info"))


async def slots_by_node(client, shard_name) -> list[tuple[object, list[int]]]:
    """Redis Cluster: the hash slots grouped by the node that owns them, for an index kept as one
    shard per slot (`shard_name(slot_no)` names the shard that lands in that slot): what a
    per-node scan script (lua/reap_scan.lua) is sent with. About 20 ms of work, so it yields to
    the loop now and then; callers cache it and rebuild it after a refusal (slots moved)."""
    import asyncio

    groups: dict[str, tuple[object, list[int]]] = {}
    for slot_no in range(16384):
        if slot_no % 2048 == 0:
            await asyncio.sleep(0)
        node = client.get_node_from_key(shard_name(slot_no))
        groups.setdefault(node.name, (node, []))[1].append(slot_no)
    return list(groups.values())


# ---- a whole cluster unreachable ---------------------------------------------------------

class ClusterUnreachable(rexc.ConnectionError):
    """No node of the Redis Cluster answers. redis-py reports that as RedisClusterException,
    which is not a RedisError; script calls re-raise it as this ConnectionError, so every caller
    that handles a single node going away handles a whole cluster going away the same way."""


# RedisClusterExceptions that are this program's own mistake, not the cluster's state: retrying
# or journaling them would only repeat them
_CLUSTER_MISTAKES = (rexc.CrossSlotTransactionError, rexc.InvalidPipelineStack)


def cluster_unreachable(exc: BaseException) -> bool:
    """True for redis-py's RedisClusterException when it means the cluster cannot be reached
    or has slots nobody serves ("Redis Cluster cannot be connected", "All slots are not
    covered", SlotNotCoveredError, no target node), False for a refusal of the call itself
    (keys of one call in two slots, a transaction across slots)."""
    return (isinstance(exc, rexc.RedisClusterException) and not isinstance(exc, _CLUSTER_MISTAKES)
            and "same key slot" not in str(exc))


# ---- Lua scripts -------------------------------------------------------------------------


class Script:
    """One script of lua/, called as a function of the library (lua_library.py). A store that
    has not got the library ("Function not found": restarted without persistence, flushed)
    is given it, and the call sent again: a function that was not found did not run."""

    def __init__(self, name: str):
        self.name = name
        self.function = lua_library.function_name(name)

    def command(self, keys, args) -> tuple:
        """The call as one command's arguments (for execute_command with target_nodes)."""
        return ("FCALL", self.function, len(keys), *keys, *args)

    async def __call__(self, client, keys: list[str], args: list):
        try:
            try:
                return await client.fcall(self.function, len(keys), *keys, *args)
            except rexc.ResponseError as e:
                if not lua_library.not_found(e):
                    raise
                await lua_library.load(client)
                return await client.fcall(self.function, len(keys), *keys, *args)
        except rexc.RedisClusterException as e:
            if cluster_unreachable(e):
                raise ClusterUnreachable(str(e)) from e
            raise

    def call_sync(self, client, keys: list[str], args: list):
        try:
            return lua_library.call_sync(client, lambda: client.fcall(self.function, len(keys), *keys, *args))
        except rexc.RedisClusterException as e:
            if cluster_unreachable(e):
                raise ClusterUnreachable(str(e)) from e
            raise

    def queue(self, pipe, keys: list[str], args: list) -> None:
        """Add this script to a pipeline (one round trip with its neighbours)."""
        pipe.fcall(self.function, len(keys), *keys, *args)


@lru_cache(maxsize=None)
def script(name: str) -> Script:
    return Script(name)
