"""A request record's shape and its stored form: what settle.lua / release.lua / reap.lua write
for every admitted billable request (no content, ever), and what a refused request leaves. The
billing path builds one per request (``new``, ``encode``); upgate/services/records.py reads them
back for the operator's and the customer's faces (``decode``). Nothing else knows the bytes.

The stored form (one element of the account's records list, lua/_lib.lua keep_record) is packed
so that a million records take ~120 MiB of Redis with their index, not ~410 (docs/money.md):

    byte 0      0x40 | 0x20 when the id is the gateway's own "req_" + 24 hex
                     | 0x80 when the key id is 16 hex (keys.create_key's) | the index width
    id          12 bytes (the hex, packed), or 1 length byte + the id's text
    key id      8 bytes (the hex, packed) when 0x80, else in the text
    time        6 bytes, Unix ms, big-endian
    the rest    text fields joined by 0x1F (encode's order); "" is null (or 0 for counts and
                amounts; 200 for the status, whose null is "-"), a key prefix without its "sk-up-",
                an answered model equal to the asked one "=", a provider that is the model's
                first part ("openai" of "openai/gpt-4o") "/"

A refused request (a 4xx/5xx answered with an X-Svc-Request-Id once the key was known, that
no hold's settle or release recorded) leaves a smaller record of the same form with one more
field, its route: ``refused`` builds it, ``keep_refused`` writes it (one call of
lua/keep_refused.lua, after the answer went out) to the account's refused list, at most
REFUSED_MAX, filed in the same request index, so a lookup by id finds either kind.

Records written before this form are compact JSON arrays (FIELDS order, first byte "["):
``decode`` reads both, so nothing needs migrating; they leave with the retention.
"""
from __future__ import annotations

import logging
import time
import uuid
from functools import lru_cache

import orjson

from upgate.billing import jalali, money
from upgate.store import connection as store, keyspace

log = logging.getLogger("upgate")
REFUSED_MAX = 1000  # refused records kept per account (CUSTOMERS.md)

# the JSON form's array order (records written before the packed form)
FIELDS = ("request_id", "time", "key_id", "key_prefix", "model", "answered_model", "provider",
          "stream", "status", "code", "prompt_tokens", "completion_tokens", "cached_tokens",
          "hold_toman", "cost_toman", "ttfb_ms", "duration_ms", "route")  # route: refused ones only
PUBLIC = ("request_id", "time", "account_id", "key_id", "key_prefix", "model", "answered_model",
          "provider", "stream", "status", "code", "prompt_tokens", "completion_tokens",
          "cached_tokens", "hold_toman", "cost_toman", "ttfb_ms", "duration_ms", "route", "refused")
DAY_MS = 86_400_000  # the request index has hashes per UTC day (lua/_lib.lua keep_record)

SEP = "\x1f"
KEY_PREFIX = "sk-up-"  # every key's prefix starts so (upgate/services/keys.py): stored without it


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


def rid_key(request_id: str) -> bytes:
    """The id as the index and the record store it (lua/_lib.lua rid_key does the same)."""
    return _own_id(request_id) or request_id.encode()[:255]


def _own_id(rid: str) -> bytes | None:
    """The 12 bytes of one of the gateway's own ids ("req_" + 24 lowercase hex), else None.
    (24 characters that fromhex turns into 12 bytes are 24 hex digits; islower refuses capitals.)"""
    if len(rid) == 28 and rid[:4] == "req_" and rid.islower():
        try:
            key = bytes.fromhex(rid[4:])
        except ValueError:
            return None
        if len(key) == 12:
            return key
    return None


@lru_cache(maxsize=8192)
def acct_key(account_id: str) -> bytes:
    """The account id as the index stores it: a UUID's 16 bytes (lua/_lib.lua acct_key)."""
    try:
        u = uuid.UUID(account_id)
    except ValueError:
        return account_id.encode()
    return u.bytes if str(u) == account_id else account_id.encode()


def account_of(key: bytes) -> str:
    return str(uuid.UUID(bytes=key)) if len(key) == 16 else key.decode()


def encode(record: dict, now_ms: int) -> bytes:
    """The handler's record (amounts in micro-toman as `hold_micro`/`cost_micro`) → the stored
    form, with the time `now_ms` (index width 0: keep_record sets it). Per request, on the hot
    path: ~2 µs, plain indexing and one join."""
    return pack(record, now_ms)[0]


def pack(record: dict, now_ms: int) -> tuple[bytes, bytes]:
    """(``encode``'s bytes, ``rid_key`` of the record's id): what settle.lua takes, made once."""
    r = record
    rid, key_id = r["request_id"] or "", r["key_id"]
    rkey = None
    if len(rid) == 28 and rid[:4] == "req_" and rid.islower():  # _own_id, inline: the hot path
        try:
            rkey = bytes.fromhex(rid[4:])
        except ValueError:
            pass
    if rkey is not None and len(rkey) == 12:
        flags, head = 0x60, rkey
    else:
        rkey = rid.encode()[:255]
        flags, head = 0x40, bytes((len(rkey),)) + rkey
    if key_id and len(key_id) == 16 and key_id.islower():
        try:
            packed = bytes.fromhex(key_id)
        except ValueError:
            packed = b""
        if len(packed) == 8:
            flags, head, key_id = flags | 0x80, head + packed, ""
    prefix, model, answered, provider = r["key_prefix"], r["model"], r["answered_model"], r["provider"]
    if prefix:
        prefix = prefix[6:] if prefix[:6] == KEY_PREFIX and prefix[6:7] not in ("", "=") else "=" + prefix
    if answered is not None and answered == model:
        answered = "="
    if provider and model and model.partition("/")[0] == provider and "/" in model:
        provider = "/"
    status, ttfb, duration = r["status"], r["ttfb_ms"], r["duration_ms"]
    # one f-string (its fields formatted in C): a separator per field, "" for null and 0
    body = (f"{key_id or ''}\x1f{prefix or ''}\x1f{model or ''}\x1f{answered or ''}\x1f{provider or ''}"
            f"\x1f{'1' if r['stream'] else ''}\x1f{'' if status == 200 else '-' if status is None else status}"
            f"\x1f{r['code'] or ''}\x1f{r['prompt_tokens'] or ''}\x1f{r['completion_tokens'] or ''}"
            f"\x1f{r['cached_tokens'] or ''}\x1f{r['hold_micro'] or ''}\x1f{r['cost_micro'] or ''}"
            f"\x1f{'' if ttfb is None else ttfb}\x1f{'' if duration is None else duration}")
    route = r.get("route")
    if route is not None:  # a refused request's: the 16th field says it is one
        body += SEP + route
    if body.count(SEP) != (14 if route is None else 15):  # a separator inside a field (never in ids the gateway makes)
        fields = (key_id or "", prefix or "", model or "", answered or "", provider or "",
                  "1" if r["stream"] else "", "" if status == 200 else "-" if status is None else str(status),
                  r["code"] or "", r["prompt_tokens"] or "", r["completion_tokens"] or "",
                  r["cached_tokens"] or "", r["hold_micro"] or "", r["cost_micro"] or "",
                  "" if ttfb is None else ttfb, "" if duration is None else duration)
        if route is not None:
            fields += (route,)
        body = SEP.join(str(f).replace(SEP, "?") for f in fields)
    return b"%c%b%b%b" % (flags, head, int(now_ms).to_bytes(6, "big"), body.encode()), rkey


def _int(x: str):
    return int(x) if x else None


def _unpack(raw: bytes) -> tuple[str, str, int, list[str]]:
    """(request id, key id or "", time ms, body fields) of a stored record in the packed form."""
    if raw[0] & 0x20:
        rid, p = "req_" + raw[1:13].hex(), 13
    else:
        n = raw[1]
        rid, p = raw[2:2 + n].decode(), 2 + n
    key_id = ""
    if raw[0] & 0x80:
        key_id, p = raw[p:p + 8].hex(), p + 8
    return rid, key_id, int.from_bytes(raw[p:p + 6], "big"), raw[p + 6:].decode().split(SEP)


def time_of(raw) -> int:
    """The time (Unix ms) of a stored record, in either form."""
    raw = raw if isinstance(raw, bytes) else raw.encode()
    if raw[:1] == b"[":
        return int(orjson.loads(raw)[1])
    p = 13 if raw[0] & 0x20 else 2 + raw[1]
    p += 8 if raw[0] & 0x80 else 0
    return int.from_bytes(raw[p:p + 6], "big")


def request_id_of(raw) -> str:
    """The request id of a stored record, in either form."""
    raw = raw if isinstance(raw, bytes) else raw.encode()
    return orjson.loads(raw)[0] if raw[:1] == b"[" else _unpack(raw)[0]


def decode(account_id: str, raw) -> dict:
    """A stored record (either form) as the faces show it: PUBLIC's fields, amounts in toman."""
    raw = raw if isinstance(raw, bytes) else raw.encode()
    if raw[:1] == b"[":
        values = dict(zip(FIELDS, orjson.loads(raw)))
        values["account_id"] = account_id
        values["refused"] = "route" in values  # only a refused record carries its route
        values["time"] = jalali.utc_iso(values["time"] / 1000)
        values["stream"] = bool(values["stream"])
        values["hold_toman"] = money.fmt(values["hold_toman"])
        values["cost_toman"] = money.fmt(values["cost_toman"])
        return {k: values.get(k) for k in PUBLIC}
    rid, packed_key, t, f = _unpack(raw)
    (key_id, prefix, model, answered, provider, stream, status, code, prompt, completion, cached,
     hold, cost, ttfb, duration) = f[:15]
    route = f[15] if len(f) > 15 else None
    if prefix:
        prefix = prefix[1:] if prefix[0] == "=" else KEY_PREFIX + prefix
    if provider == "/":
        provider = model.split("/", 1)[0]
    return {"request_id": rid, "time": jalali.utc_iso(t / 1000), "account_id": account_id,
            "key_id": packed_key or key_id or None, "key_prefix": prefix or None, "model": model or None,
            "answered_model": (model or None) if answered == "=" else (answered or None),
            "provider": provider or None, "stream": stream == "1",
            "status": None if status == "-" else int(status) if status else 200,
            "code": code or None, "prompt_tokens": int(prompt or 0),
            "completion_tokens": int(completion or 0), "cached_tokens": int(cached or 0),
            "hold_toman": money.fmt(int(hold or 0)), "cost_toman": money.fmt(int(cost or 0)),
            "ttfb_ms": _int(ttfb), "duration_ms": _int(duration), "route": route,
            "refused": route is not None}


# ---- refused requests --------------------------------------------------------------------------

def refused(*, request_id: str, account_id: str, key_id: str, key_prefix: str | None, route: str,
            model: str | None, status: int, code: str | None, stream: bool = False,
            duration_ms: int | None = None) -> dict:
    """A refused request's record in the handler's form: no tokens, no cost, no content."""
    return {**new(request_id=request_id, account_id=account_id, key_id=key_id, key_prefix=key_prefix,
                  model=model, stream=stream, status=status, code=code, duration_ms=duration_ms),
            "route": route}


def keep_refused_call(record: dict, now_ms: int, *, sharded: bool, keep_days: int) -> tuple[tuple, tuple]:
    """(KEYS, ARGV) of lua/keep_refused.lua for a record of ``refused``."""
    acct = record["account_id"]
    return ((keyspace.wallet(acct), keyspace.refused(acct)),
            (*pack(record, now_ms), acct_key(acct), keyspace.request_index_prefix(acct, sharded), int(now_ms),
             keep_days * DAY_MS, REFUSED_MAX))


async def keep_refused(client, record: dict, *, sharded: bool, keep_days: int,
                       now_ms: int | None = None) -> None:
    """Write a refused request's record (one call, off the served path). A store that does not
    answer loses the record, never the answer: it is logged, not raised."""
    now_ms = int(time.time() * 1000) if now_ms is None else int(now_ms)
    try:
        keys, args = keep_refused_call(record, now_ms, sharded=sharded, keep_days=keep_days)
        await store.script("keep_refused")(client, keys, args)
    except Exception as e:  # noqa: BLE001 (a record is never worth an error of its own)
        log.warning("refused request %s not recorded (%s)", record["request_id"], type(e).__name__)


def kept_keys(account_id: str) -> tuple[str, str]:
    """The account's two record lists (billed, refused), for services/records.py's reads."""
    return keyspace.requests(account_id), keyspace.refused(account_id)
