"""Request records: what every admitted billable request cost, without any of its content.

settle.lua / release.lua write the record in the step that closes the request's hold (the
ledger hands it over as ARGV), so no round trip is added to the hot path. Each account keeps its
records in ``keyspace.requests(acct)``, a sorted set scored by time (ms) whose members are
compact JSON arrays (``FIELDS`` order, amounts in micro-toman); the same step files the request
id in the request index ``keyspace.request_index(acct, sharded)`` (request id → "<account>|<time
ms>"), which lives in the account's own slot, and drops the records (and their index entries)
older than UPGATE_REQUEST_LOG_DAYS or beyond UPGATE_REQUEST_LOG_MAX per account.

``find(request_id)`` needs no scan: one HGET on a single Redis; on a Redis Cluster one
lua/request_find.lua call per master, each reading its own slots' index shards.
"""
from __future__ import annotations

import orjson
import redis

from upgate.store import connection as store, keyspace, lua_library
from upgate.services.account_rules import AccountError, UnknownAccount, normalize_id
from upgate.billing.request_record import (  # noqa: F401  (part of this module's API)
    DAY_MS, FIELDS, PUBLIC, decode, encode, kept_keys, new)

MAX_LIMIT = 1000


class UnknownRequest(AccountError):
    """No record of this request is kept (never made, or older than the retention)."""

    reason = "request_unknown"


class InvalidLimit(AccountError):
    field = "limit"
    reason = "limit_range"


def list_requests(client, account_id: str, limit: int = 50) -> list[dict]:
    """The account's kept request records, newest first: billed and refused ones together."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidLimit(f"limit must be a whole number from 1 to {MAX_LIMIT}, got {limit!r}", high=MAX_LIMIT)
    acct = normalize_id(account_id)
    pipe = client.pipeline(transaction=False)
    pipe.exists(keyspace.wallet(acct))
    for kept in kept_keys(acct):
        pipe.zrevrange(kept, 0, limit - 1, withscores=True)
    exists, *sets = pipe.execute()
    if not exists:
        raise UnknownAccount(f"unknown account {acct}")
    newest = sorted((pair for s in sets for pair in s), key=lambda pair: -pair[1])[:limit]
    return [decode(acct, raw) for raw, _ in newest]


def count_window(client, ids: list[str], lo_ms: int, hi_ms: int, batch: int = 500) -> dict[str, int]:
    """How many records (billed and refused) each account keeps from `lo_ms` up to (not
    including) `hi_ms`."""
    out: dict[str, int] = {}
    for i in range(0, len(ids), batch):
        chunk = ids[i:i + batch]
        pipe = client.pipeline(transaction=False)
        for acct in chunk:
            for kept in kept_keys(acct):
                pipe.zcount(kept, lo_ms, f"({hi_ms}")
        counts = [int(n) for n in pipe.execute()]
        width = len(counts) // max(1, len(chunk))
        out.update((acct, sum(counts[j * width:(j + 1) * width])) for j, acct in enumerate(chunk))
    return out


def account_window(client, ids: list[str], lo_ms: int, hi_ms: int, per_account: int):
    """(record, time ms) of each account's records (billed and refused) in [lo_ms, hi_ms),
    newest first within each set, at most `per_account` of each set: one pipeline for `ids`."""
    pipe = client.pipeline(transaction=False)
    owners = []
    for acct in ids:
        for kept in kept_keys(acct):
            pipe.zrevrangebyscore(kept, f"({hi_ms}", lo_ms, start=0, num=max(1, per_account), withscores=True)
            owners.append(acct)
    for acct, rows in zip(owners, pipe.execute()):
        for raw, score in rows:
            yield decode(acct, raw), int(score)


def find(client, request_id: str, *, keep_days: int | None = None) -> dict:
    """The record of one request, by the id alone (X-Svc-Request-Id), or `UnknownRequest`.
    `keep_days`: how far back to look at least (default: UPGATE_REQUEST_LOG_DAYS); as far as
    any node keeps records in any case."""
    rid = request_id.strip() if isinstance(request_id, str) else ""
    if not rid or len(rid) > 64 or not rid.isprintable():
        raise UnknownRequest(f"no record of request {request_id!r}")
    entry = _lookup(client, rid, keep_days)
    if entry is not None:
        acct, _, t = store.text(entry).partition("|")
        pipe = client.pipeline(transaction=False)
        for kept in kept_keys(acct):  # billed or refused: one round trip for both
            pipe.zrangebyscore(kept, t, t)
        for raw in (r for found in pipe.execute() for r in found):
            if orjson.loads(raw)[0] == rid:
                return decode(acct, raw)
    raise UnknownRequest(f"no record of request {rid} (never made, or older than the retention)")


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
    days = _days(client, keep_days)
    if not isinstance(client, redis.RedisCluster):
        pipe = client.pipeline(transaction=False)
        for day in days:
            pipe.hget(keyspace.REQ_INDEX + day, rid)
        return next((hit for hit in pipe.execute() if hit), None)
    script = store.script("request_find")
    groups: dict[str, tuple[object, list[str]]] = {}
    for slot_no in range(keyspace.SLOTS):
        node = client.get_node_from_key(keyspace.REQ_SHARD[0] + keyspace.slot_tag(slot_no) + "}")
        groups.setdefault(node.name, (node, []))[1].append(keyspace.slot_tag(slot_no))
    for node, tags in groups.values():
        call = script.command((), (rid, ",".join(tags), ",".join(days), *keyspace.REQ_SHARD))
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
