"""A request record's shape and its stored form: what settle.lua / release.lua write for every
admitted billable request (no content, ever). The billing path builds one per request
(``new``, ``encode``); upgate/services/records.py reads them back for the operator's faces."""
from __future__ import annotations

import orjson

from upgate.billing import jalali, money

# the stored array's order (account id and formatting are added when read)
FIELDS = ("request_id", "time", "key_id", "key_prefix", "model", "answered_model", "provider",
          "stream", "status", "code", "prompt_tokens", "completion_tokens", "cached_tokens",
          "hold_toman", "cost_toman", "ttfb_ms", "duration_ms")
PUBLIC = ("request_id", "time", "account_id", "key_id", "key_prefix", "model", "answered_model",
          "provider", "stream", "status", "code", "prompt_tokens", "completion_tokens",
          "cached_tokens", "hold_toman", "cost_toman", "ttfb_ms", "duration_ms")
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
    values["time"] = jalali.utc_iso(values["time"] / 1000)
    values["stream"] = bool(values["stream"])
    values["hold_toman"] = money.fmt(values["hold_toman"])
    values["cost_toman"] = money.fmt(values["cost_toman"])
    return {k: values.get(k) for k in PUBLIC}
