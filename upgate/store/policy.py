"""Is this Redis fit to hold money? (docs/redis.md)

A Redis whose `maxmemory-policy` may evict keys (`allkeys-lru` is a common default of managed
caches) silently drops wallets, holds and refs when memory runs short: money lost without an
error. `upgate serve` and every `upgate-admin` command that writes refuse such a store, naming
the policy and the fix; `UPGATE_ALLOW_EVICTION=1` overrides (tests only). A store without AOF or
RDB persistence loses everything on a restart: that is warned about, at start-up and in /healthz.

The policy is read with CONFIG GET, or from INFO memory where CONFIG is disabled (managed
services often rename it away). On a Cluster every master is asked. The embedded memory://
store is exempt (it never evicts, and it never persists either: it is for the demo).
"""
from __future__ import annotations

import logging
import os

import redis
import redis.exceptions as rexc

log = logging.getLogger("upgate")

ALLOW_ENV = "UPGATE_ALLOW_EVICTION"


class EvictingStore(ValueError):
    """The store may evict keys; the message names the policy and the fix."""


def _nodes(client) -> list:
    """One sync client per master (a single server is its own)."""
    if isinstance(client, redis.RedisCluster):
        return [node.redis_connection or client.get_redis_connection(node) for node in client.get_primaries()]
    return [client]


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def eviction_policy(node) -> str:
    """`maxmemory-policy` of one server: CONFIG GET, else INFO memory (CONFIG renamed away)."""
    try:
        reply = node.config_get("maxmemory-policy")
        value = reply.get("maxmemory-policy", reply.get(b"maxmemory-policy"))
        if value is not None:
            return _text(value)
    except rexc.ResponseError:  # unknown command: CONFIG is disabled
        pass
    return _text(node.info("memory").get("maxmemory_policy", "unknown"))


def persistence(node) -> dict:
    """{"aof": bool, "rdb": bool | None} of one server (None: unknown, CONFIG disabled)."""
    info = node.info("persistence")
    aof = str(info.get("aof_enabled", 0)) == "1"
    try:
        reply = node.config_get("save")
        save = _text(reply.get("save", reply.get(b"save", "")))
        rdb: bool | None = bool(save.strip())
    except rexc.ResponseError:
        rdb = None
    return {"aof": aof, "rdb": rdb}


def check(client, url: str, env=None) -> list[str]:
    """Raise EvictingStore when a master may evict (unless allowed); return warnings (no
    persistence). Store errors propagate: the caller decides what an unreachable store means."""
    env = os.environ if env is None else env
    if url.startswith("memory://"):
        return []
    warnings = []
    for node in _nodes(client):
        try:
            policy = eviction_policy(node)
            p = persistence(node)
        except rexc.ResponseError as e:  # an ACL that allows neither CONFIG nor INFO
            warnings.append(f"could not read Redis's maxmemory-policy ({e}): make sure it is noeviction "
                            f"and that AOF is on (docs/redis.md)")
            continue
        if policy != "noeviction":
            if env.get(ALLOW_ENV) == "1":
                warnings.append(f"Redis maxmemory-policy is {policy} (allowed by {ALLOW_ENV}=1, tests only)")
            else:
                raise EvictingStore(
                    f"Redis maxmemory-policy is {policy}: it may evict wallets and holds (money) when "
                    f"memory runs short. Set it to noeviction (CONFIG SET maxmemory-policy noeviction, "
                    f"and in redis.conf or your provider's settings); see docs/redis.md")
        if not p["aof"] and p["rdb"] is False:
            warnings.append("Redis has neither AOF nor RDB persistence: a restart loses every wallet "
                            "(appendonly yes, appendfsync everysec; see docs/redis.md)")
    return sorted(set(warnings))
