"""Request records: what every admitted billable request cost, without any of its content.

settle.lua / release.lua write the record in the step that closes the request's hold (the
ledger hands it over as ARGV), so no round trip is added to the hot path. Each account keeps its
records in ``keyspace.requests(acct)``, a list, oldest first, of packed records
(upgate/billing/request_record.py says the bytes); the same step files the request id in the
request index (listpack-sized hash buckets per UTC day, in the account's own slot), and drops
the records older than UPGATE_REQUEST_LOG_DAYS or beyond UPGATE_REQUEST_LOG_MAX per account.
Refused requests' records are a list of their own (``keyspace.refused``, lua/keep_refused.lua),
in the same form and index. Records kept before the packed form (sorted sets of JSON arrays,
``keyspace.requests_v1`` / ``refused_v1``, and one index hash per day) are read too, until the
retention takes them: nothing to migrate.

``find(request_id)`` needs no scan: one lua/request_get.lua call on a single Redis, one per
master on a Redis Cluster (each reading its own slots' index shards and records).
"""
from __future__ import annotations

import weakref

import redis

from upgate.store import connection as store, keyspace, lua_library
from upgate.services.account_rules import AccountError, UnknownAccount, normalize_id
from upgate.billing import request_record
from upgate.billing.request_record import (  # noqa: F401  (part of this module's API)
    DAY_MS, FIELDS, PUBLIC, decode, encode, kept_keys, new)

MAX_LIMIT = 1000
_BYTES_CLIENTS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _bytes(client):
    """`client`, or one to the same store that answers bytes: records are packed bytes, which a
    decode_responses client (some tests', some tools') would fail to decode."""
    if isinstance(client, redis.RedisCluster):
        kw = client.nodes_manager.connection_kwargs
        if not kw.get("decode_responses"):
            return client
        if client not in _BYTES_CLIENTS:
            node = client.get_default_node()
            _BYTES_CLIENTS[client] = redis.RedisCluster(host=node.host, port=node.port)
        return _BYTES_CLIENTS[client]
    pool = client.connection_pool
    if not pool.connection_kwargs.get("decode_responses"):
        return client
    if client not in _BYTES_CLIENTS:
        _BYTES_CLIENTS[client] = redis.Redis(connection_pool=redis.ConnectionPool(
            connection_class=pool.connection_class, **{**pool.connection_kwargs, "decode_responses": False}))
    return _BYTES_CLIENTS[client]


class UnknownRequest(AccountError):
    """No record of this request is kept (never made, or older than the retention)."""

    reason = "request_unknown"


class InvalidLimit(AccountError):
    field = "limit"
    reason = "limit_range"


def _sources(acct: str) -> tuple[str, str, str, str]:
    """Where the account's records are: the billed and refused lists, and the sorted sets of
    the same from before the packed form."""
    return (*kept_keys(acct), keyspace.requests_v1(acct), keyspace.refused_v1(acct))


def list_requests(client, account_id: str, limit: int = 50) -> list[dict]:
    """The account's kept request records, newest first: billed and refused ones together."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidLimit(f"limit must be a whole number from 1 to {MAX_LIMIT}, got {limit!r}", high=MAX_LIMIT)
    acct = normalize_id(account_id)
    client = _bytes(client)
    billed, refused, old_billed, old_refused = _sources(acct)
    pipe = client.pipeline(transaction=False)
    pipe.exists(keyspace.wallet(acct))
    pipe.lrange(billed, -limit, -1)
    pipe.lrange(refused, -limit, -1)
    pipe.zrevrange(old_billed, 0, limit - 1)
    pipe.zrevrange(old_refused, 0, limit - 1)
    exists, *sets = pipe.execute()
    if not exists:
        raise UnknownAccount(f"unknown account {acct}")
    # each list is oldest first: reversed, every source is newest first; a stable sort by time
    # keeps a list's own order between records of the same millisecond
    raws = [r for s in (sets[0][::-1], sets[1][::-1], *sets[2:]) for r in s]
    raws.sort(key=request_record.time_of, reverse=True)
    return [decode(acct, r) for r in raws[:limit]]


def count_window(client, ids: list[str], lo_ms: int, hi_ms: int, batch: int = 500) -> dict[str, int]:
    """How many records (billed and refused) each account keeps from `lo_ms` up to (not
    including) `hi_ms`."""
    client = _bytes(client)
    out: dict[str, int] = {}
    for i in range(0, len(ids), batch):
        chunk = ids[i:i + batch]
        rows = _window(client, chunk, lo_ms, hi_ms, 0)
        out.update((acct, sum(n for n, _ in parts)) for acct, parts in zip(chunk, rows))
    return out


def account_window(client, ids: list[str], lo_ms: int, hi_ms: int, per_account: int):
    """(record, time ms) of each account's records (billed and refused) in [lo_ms, hi_ms),
    newest first within each set, at most `per_account` of each set: one pipeline for `ids`."""
    for acct, raw, ms in account_window_raw(client, ids, lo_ms, hi_ms, per_account):
        yield decode(acct, raw), ms


def account_window_raw(client, ids: list[str], lo_ms: int, hi_ms: int, per_account: int):
    """`account_window` as (account id, stored record, time ms), for a caller that decodes
    (`decode`) only the records it shows."""
    client = _bytes(client)
    for acct, parts in zip(ids, _window(client, ids, lo_ms, hi_ms, max(1, per_account))):
        for _n, raws in parts:
            for raw in raws:
                yield acct, raw, request_record.time_of(raw)


def _window(client, ids: list[str], lo_ms: int, hi_ms: int, limit: int) -> list[list[tuple[int, list]]]:
    """Per account, per source: (how many records in [lo, hi), the newest `limit` of them,
    newest first). One pipeline: a lua/records_window.lua call per list, ZCOUNT/ZREVRANGEBYSCORE
    per old sorted set."""
    script = store.script("records_window")

    def send():
        pipe = client.pipeline(transaction=False)
        for acct in ids:
            billed, refused, old_billed, old_refused = _sources(acct)
            for lst in (billed, refused):
                pipe.execute_command(*script.command((lst,), (lo_ms, hi_ms, limit)))
            for old in (old_billed, old_refused):
                pipe.zcount(old, lo_ms, f"({hi_ms}")
                if limit:
                    pipe.zrevrangebyscore(old, f"({hi_ms}", lo_ms, start=0, num=limit)
        return pipe.execute()

    res = iter(lua_library.call_sync(client, send))
    out = []
    for _ in ids:
        parts = []
        for _lst in range(2):
            got = next(res)
            parts.append((int(got[0]), list(reversed(got[1:]))))
        for _old in range(2):
            n = int(next(res))
            parts.append((n, next(res) if limit else []))
        out.append(parts)
    return out


def find(client, request_id: str, *, keep_days: int | None = None) -> dict:
    """The record of one request, by the id alone (X-Svc-Request-Id), or `UnknownRequest`.
    `keep_days`: how far back to look at least (default: UPGATE_REQUEST_LOG_DAYS); as far as
    any node keeps records in any case."""
    rid = request_id.strip() if isinstance(request_id, str) else ""
    if not rid or len(rid) > 64 or not rid.isprintable():
        raise UnknownRequest(f"no record of request {request_id!r}")
    client = _bytes(client)
    found = _lookup(client, rid, keep_days)
    if found is not None and int(found[0]) == 1:
        return decode(request_record.account_of(found[1]), found[2])
    if found is not None:  # an index entry from before the packed form: its record is in a sorted set
        acct, _, t = store.text(found[1]).partition("|")
        pipe = client.pipeline(transaction=False)
        for old in _sources(acct)[2:]:  # billed or refused: one round trip for both
            pipe.zrangebyscore(old, t, t)
        for raw in (r for got in pipe.execute() for r in got):
            if request_record.request_id_of(raw) == rid:
                return decode(acct, raw)
    raise UnknownRequest(f"no record of request {rid} (never made, or older than the retention)")


def _days(keep_days: int, published: int = 0) -> list[str]:
    """The UTC day numbers an index entry kept now can be filed under (newest first): back as far
    as the longest retention of this reader (`keep_days`) and of every node that has served on
    this store (`published`: keyspace.REQUEST_LOG_DAYS), whichever is longer."""
    import time

    keep_days = max(keep_days, published)
    today = int(time.time() * 1000) // DAY_MS
    return [str(d) for d in range(today + 1, today - keep_days - 2, -1)]


def _lookup(client, rid: str, keep_days: int | None = None):
    """request_get.lua's answer for the id: [1, account key, record], [2, old index entry] or None.
    On a single Redis ONE call: the script reads the nodes' published retention itself."""
    if keep_days is None:
        from upgate.settings import from_env

        keep_days = from_env().request_log_days
    script = store.script("request_get")
    tail = (keyspace.tag("")[:-1], "}" + keyspace.REQS, "}" + keyspace.WALLET, "}" + keyspace.REFUSED)
    key = request_record.rid_key(rid)
    if not isinstance(client, redis.RedisCluster):
        days = ",".join(_days(keep_days))
        call = script.command((), (key, rid, "", days, keyspace.REQ_INDEX, "", *tail, keyspace.REQUEST_LOG_DAYS))
        return lua_library.call_sync(client, lambda: client.execute_command(*call)) or None
    days = ",".join(_days(keep_days, int(client.zscore(keyspace.REQUEST_LOG_DAYS, "days") or 0)))
    groups: dict[str, tuple[object, list[str]]] = {}
    for slot_no in range(keyspace.SLOTS):
        node = client.get_node_from_key(keyspace.REQ_SHARD[0] + keyspace.slot_tag(slot_no) + "}")
        groups.setdefault(node.name, (node, []))[1].append(keyspace.slot_tag(slot_no))
    for node, tags in groups.values():
        call = script.command((), (key, rid, ",".join(tags), days, *keyspace.REQ_SHARD, *tail))
        found = lua_library.call_sync(client, lambda: client.execute_command(*call, target_nodes=node))
        if found:
            return found
    return None


# ---- what an account holder sees (the dashboard) -------------------------------------------------

CUSTOMER_HIDDEN = ("provider",)  # which upstream served a request is the business's, not the client's


def for_customer(record: dict) -> dict:
    """A record as its account holder sees it: without the provider."""
    return {k: v for k, v in record.items() if k not in CUSTOMER_HIDDEN}


def find_own(client, account_id: str, request_id: str) -> dict:
    """`find`, limited to one account: another account's request is refused exactly like one
    that does not exist (same error, same message)."""
    rid = request_id.strip() if isinstance(request_id, str) else ""
    record = find(client, request_id)
    if record["account_id"] != normalize_id(account_id):
        raise UnknownRequest(f"no record of request {rid} (never made, or older than the retention)")
    return for_customer(record)
