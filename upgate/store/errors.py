"""Which store errors mean "unreachable or refusing writes for now" (answer 503, journal a
settlement, retry later) and which would only repeat: shared by the ledger, its reaper and
journal, and the handlers."""
from __future__ import annotations

import redis.exceptions as rexc

from upgate.store import connection as store

_STORE_DOWN = (rexc.ConnectionError, rexc.TimeoutError, rexc.ClusterDownError, OSError)
# Error replies that mean "the store takes no writes right now", not "this call is wrong": out
# of memory, a read-only replica (failover), a failed RDB save, a busy script, loading, a cluster
# resharding or without a master. Redis refuses a script at its first write, so nothing applied.
_REFUSING = frozenset(("OOM", "READONLY", "MISCONF", "BUSY", "LOADING", "TRYAGAIN", "CLUSTERDOWN",
                       "MASTERDOWN", "NOREPLICAS"))


# What a store call may raise: redis-py's errors, its RedisClusterException (not a RedisError:
# the whole cluster unreachable, among others) and the OS's. Catch these, then ask store_unavailable.
STORE_ERRORS = (rexc.RedisError, rexc.RedisClusterException, OSError)


def store_unavailable(exc: BaseException) -> bool:
    """True when `exc` means the store is unreachable or refusing writes for now (503, journal,
    retry later), False for an error that retrying would only repeat. A Redis Cluster counts as
    unreachable when no node answers (RedisClusterException) or when commands keep bouncing
    between nodes (ClusterError: a resharding or failover in progress)."""
    if isinstance(exc, (*_STORE_DOWN, rexc.OutOfMemoryError, rexc.ReadOnlyError, rexc.TryAgainError,
                        rexc.ClusterError)):
        return True
    if store.cluster_unreachable(exc):
        return True
    return isinstance(exc, rexc.ResponseError) and str(exc).split(" ", 1)[0] in _REFUSING
