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

from upgate import jalali, keyspace, lua_library, money, store
from upgate.accounts import AccountError, UnknownAccount, normalize_id

# the stored array's order (account id and formatting are added when read)
FIELDS = ("request_id", "time", "key_id", "key_prefix", "model", "answered_model", "provider",
          "stream", "status", "code", "prompt_tokens", "completion_tokens", "cached_tokens",
          "hold_toman", "cost_toman", "ttfb_ms", "duration_ms")
PUBLIC = ("request_id", "time", "account_id", "key_id", "key_prefix", "model", "answered_model",
          "provider", "stream", "status", "code", "prompt_tokens", "completion_tokens",
          "cached_tokens", "hold_toman", "cost_toman", "ttfb_ms", "duration_ms")
MAX_LIMIT = 1000
DAY_MS = 86_400_000  # the request index has one hash per UTC day (lua/_lib.lua keep_record)


# the handler's form (upgate/handlers/proxy.py builds it): amounts in micro-toman
_BLANK = {"request_id": None, "account_id": None, "key_id": None, "key_prefix": None, "model": None,
          "answered_model": None, "provider": None, "stream": False, "status": None, "code": None,
          "prompt_tokens": 0, "completion_tokens": 0, "cached_tokens": 0, "hold_micro": 0,
          "cost_micro": 0, "ttfb_ms": None, "duration_ms": None}


def new(**fields) -> dict:
    """A record in the handler's form with every field: those given, the rest empty."""
    unknown = set(fields) - set(_BLANK)
    if unknown:
        raise TypeError(f"not request record fields: {sorted(unknown)}")
    return {**_BLANK, **fields}


class UnknownRequest(AccountError):
    """No record of this request is kept (never made, or older than the retention)."""


class InvalidLimit(AccountError):
    field = "limit"


def encode(record: dict, now_ms: int) -> str:
    """The handler's record (amounts in micro-toman as `hold_micro`/`cost_micro`) → the stored
    compact array, with the time `now_ms`. (Per request, on the hot path: plain indexing.)"""
    r = record
    return orjson.dumps([
        r["request_id"], int(now_ms), r["key_id"], r["key_prefix"], r["model"], r["answered_model"],
        r["provider"], 1 if r["stream"] else 0, r["status"], r["code"], r["prompt_tokens"],
        r["completion_tokens"], r["cached_tokens"], r["hold_micro"], r["cost_micro"], r["ttfb_ms"],
        r["duration_ms"]]).decode()


def decode(account_id: str, raw) -> dict:
    values = dict(zip(FIELDS, orjson.loads(raw)))
    values["account_id"] = account_id
    values["time"] = jalali.utc_iso(values["time"] / 1000)
    values["stream"] = bool(values["stream"])
    values["hold_toman"] = money.fmt(values["hold_toman"])
    values["cost_toman"] = money.fmt(values["cost_toman"])
    return {k: values.get(k) for k in PUBLIC}


def list_requests(client, account_id: str, limit: int = 50) -> list[dict]:
    """The account's kept request records, newest first."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidLimit(f"limit must be a whole number from 1 to {MAX_LIMIT}, got {limit!r}")
    acct = normalize_id(account_id)
    pipe = client.pipeline(transaction=False)
    pipe.exists(keyspace.wallet(acct))
    pipe.zrevrange(keyspace.requests(acct), 0, limit - 1)
    exists, raws = pipe.execute()
    if not exists:
        raise UnknownAccount(f"unknown account {acct}")
    return [decode(acct, r) for r in raws]


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
        for raw in client.zrangebyscore(keyspace.requests(acct), t, t):
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
