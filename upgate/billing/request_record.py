"""A request record's shape and its stored form: what settle.lua / release.lua write for every
admitted billable request (no content, ever). The billing path builds one per request
(``new``, ``encode``); upgate/services/records.py reads them back for the operator's faces.

Refused requests (a 4xx/5xx answered with an X-Svc-Request-Id once the key was known, that no
hold's settle or release recorded) leave a smaller record of the same shape: ``refused`` builds
it, ``keep_refused`` writes it (one call of lua/keep_refused.lua, only on the refusal's path,
after the answer went out), at most REFUSED_MAX per account in ``keyspace.refused``, filed in
the same request index, so a lookup by id finds either kind. Faces go through these functions
and services/records.py, never the keys, so the stored encoding can change under them."""
from __future__ import annotations

import logging
import time

import orjson

from upgate.billing import jalali, money
from upgate.store import connection as store, keyspace

log = logging.getLogger("upgate")
REFUSED_MAX = 1000  # refused records kept per account (CUSTOMERS.md)

# the stored array's order (account id and formatting are added when read)
FIELDS = ("request_id", "time", "key_id", "key_prefix", "model", "answered_model", "provider",
          "stream", "status", "code", "prompt_tokens", "completion_tokens", "cached_tokens",
          "hold_toman", "cost_toman", "ttfb_ms", "duration_ms", "route")  # route: refused ones only
PUBLIC = ("request_id", "time", "account_id", "key_id", "key_prefix", "model", "answered_model",
          "provider", "stream", "status", "code", "prompt_tokens", "completion_tokens",
          "cached_tokens", "hold_toman", "cost_toman", "ttfb_ms", "duration_ms", "route", "refused")
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
    values["refused"] = "route" in values  # only a refused record carries its route
    values["time"] = jalali.utc_iso(values["time"] / 1000)
    values["stream"] = bool(values["stream"])
    values["hold_toman"] = money.fmt(values["hold_toman"])
    values["cost_toman"] = money.fmt(values["cost_toman"])
    return {k: values.get(k) for k in PUBLIC}


# ---- refused requests --------------------------------------------------------------------------

def refused(*, request_id: str, account_id: str, key_id: str, key_prefix: str | None, route: str,
            model: str | None, status: int, code: str | None, stream: bool = False,
            duration_ms: int | None = None) -> dict:
    """A refused request's record in the handler's form: no tokens, no cost, no content."""
    return {**new(request_id=request_id, account_id=account_id, key_id=key_id, key_prefix=key_prefix,
                  model=model, stream=stream, status=status, code=code, duration_ms=duration_ms),
            "route": route}


def encode_refused(record: dict, now_ms: int) -> str:
    """`encode`, with the route last (what tells a refused record from a billed one)."""
    return encode(record, now_ms)[:-1] + "," + orjson.dumps(record["route"]).decode() + "]"


async def keep_refused(client, record: dict, *, sharded: bool, keep_days: int,
                       now_ms: int | None = None) -> None:
    """Write a refused request's record (one call, off the served path). A store that does not
    answer loses the record, never the answer: it is logged, not raised."""
    acct = record["account_id"]
    now_ms = int(time.time() * 1000) if now_ms is None else int(now_ms)
    try:
        await store.script("keep_refused")(
            client, [keyspace.refused(acct)],
            [encode_refused(record, now_ms), record["request_id"], acct,
             keyspace.request_index_prefix(acct, sharded), now_ms, keep_days * DAY_MS, REFUSED_MAX])
    except Exception as e:  # noqa: BLE001 (a record is never worth an error of its own)
        log.warning("refused request %s not recorded (%s)", record["request_id"], type(e).__name__)


def kept_keys(account_id: str) -> tuple[str, str]:
    """The account's two record sets (billed, refused), for services/records.py's reads."""
    return keyspace.requests(account_id), keyspace.refused(account_id)
