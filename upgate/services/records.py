"""Request records: what every admitted billable request cost, without any of its content.

settle.lua / release.lua write the record in the step that closes the request's hold (the
ledger hands it over as ARGV), so no round trip is added to the hot path. Each account keeps its
records in ``keyspace.requests(acct)``, a list, oldest first, of packed records
(upgate/billing/request_record.py says the bytes); the same step files the request id in the
request index (listpack-sized hash buckets per UTC day, in the account's own slot), and drops
the records older than UPGATE_REQUEST_LOG_DAYS or beyond UPGATE_REQUEST_LOG_MAX per account.
Records kept before the packed form (a sorted set of JSON arrays, ``keyspace.requests_v1``, and
one index hash per day) are read too, after the new ones, until the retention takes them.

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
    DAY_MS, FIELDS, PUBLIC, decode, encode, new)

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


class InvalidLimit(AccountError):
    field = "limit"


def list_requests(client, account_id: str, limit: int = 50) -> list[dict]:
    """The account's kept request records, newest first."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidLimit(f"limit must be a whole number from 1 to {MAX_LIMIT}, got {limit!r}")
    return next(iter_requests(client, account_id, limit), [])


def iter_requests(client, account_id: str, batch: int = MAX_LIMIT):
    """Every kept record of the account, newest first, in lists of up to `batch` (about one
    round trip each): for a face that filters or exports more than `list_requests` gives."""
    acct = normalize_id(account_id)
    client = _bytes(client)
    key, old_key = keyspace.requests(acct), keyspace.requests_v1(acct)
    pipe = client.pipeline(transaction=False)
    pipe.exists(keyspace.wallet(acct))
    pipe.llen(key)
    pipe.lrange(key, -batch, -1)
    pipe.zrevrange(old_key, 0, batch - 1)
    exists, length, raws, olds = pipe.execute()
    if not exists:
        raise UnknownAccount(f"unknown account {acct}")
    out: list[dict] = []
    seen: set[str] = set()  # a trim of the list's head between two pages shifts it: no repeats
    end = length - len(raws)  # list positions below `end` are still to read
    while True:
        for r in reversed(raws):
            rec = decode(acct, r)
            if rec["request_id"] not in seen:
                seen.add(rec["request_id"])
                out.append(rec)
        if len(out) >= batch:
            yield out[:batch]
            out = out[batch:]
        if end <= 0:
            break
        raws = client.lrange(key, max(0, end - batch), end - 1)
        end = max(0, end - batch) if raws else 0
    at = 0
    while olds:  # records kept before the packed form, after every newer one
        out += [decode(acct, r) for r in olds]
        at += len(olds)
        while len(out) >= batch:
            yield out[:batch]
            out = out[batch:]
        olds = client.zrevrange(old_key, at, at + batch - 1) if len(olds) == batch else []
    if out:
        yield out


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
    if found is not None:  # an index entry from before the packed form: its record is in the sorted set
        acct, _, t = store.text(found[1]).partition("|")
        for raw in client.zrangebyscore(keyspace.requests_v1(acct), t, t):
            if request_record.request_id_of(raw) == rid:
                return decode(acct, raw)
    raise UnknownRequest(f"no record of request {rid} (never made, or older than the retention)")


def keep(client, account_id: str, record: dict, *, now_ms: int | None = None) -> bool:
    """Keep one request record (the handler's form, ``new``) that no hold closes, off the hot
    path (lua/record_keep.lua; the gateway's handlers use ``Ledger.keep_record``). False: no such
    account."""
    import time

    from upgate.settings import from_env

    s = from_env()
    acct = normalize_id(account_id)
    keys, args = request_record.keep_call(acct, record, now_ms or int(time.time() * 1000),
                                          keep_days=s.request_log_days, keep_max=s.request_log_max,
                                          sharded=isinstance(client, redis.RedisCluster))
    call = store.script("record_keep").command(keys, args)
    return int(lua_library.call_sync(client, lambda: client.execute_command(*call))) == 1


def _days(client, keep_days: int | None) -> list[str]:
    """The UTC day numbers an index entry kept now can be filed under (newest first): back as far
    as the longest retention of this reader (`keep_days`, default UPGATE_REQUEST_LOG_DAYS) and of
    every node that has served on this store (keyspace.REQUEST_LOG_DAYS), whichever is longer."""
    import time

    if keep_days is None:
        from upgate.settings import from_env

        keep_days = from_env().request_log_days
    published = client.zscore(keyspace.REQUEST_LOG_DAYS, "days")
    keep_days = max(keep_days, int(published or 0))
    today = int(time.time() * 1000) // DAY_MS
    return [str(d) for d in range(today + 1, today - keep_days - 2, -1)]


def _lookup(client, rid: str, keep_days: int | None = None):
    """request_get.lua's answer for the id: [1, account key, record], [2, old index entry] or None."""
    days = ",".join(_days(client, keep_days))
    script = store.script("request_get")
    tail = (keyspace.tag("")[:-1], "}" + keyspace.REQS, "}" + keyspace.WALLET)
    key = request_record.rid_key(rid)
    if not isinstance(client, redis.RedisCluster):
        call = script.command((), (key, rid, "", days, keyspace.REQ_INDEX, "", *tail))
        return lua_library.call_sync(client, lambda: client.execute_command(*call)) or None
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
