"""Webhook events as the receiver sees them: the body, the signature, the retry schedule.
Pure functions, no I/O.

The Lua step that decides an event stores it as JSON in the account's outbox; `body` turns that
into the bytes the receiver gets, with the fields in the contract's order (OPERATORS.md,
"Webhooks"), once, when it enters the delivery stream: every attempt then sends the same bytes.
"""
from __future__ import annotations

import hashlib
import hmac
import random
import secrets
import time

import orjson

# type → the fields of its `data`, in order (nothing else is ever sent: no content, no key)
DATA_FIELDS: dict[str, tuple[str, ...]] = {
    "wallet.low_balance": ("account_id", "balance_toman", "available_toman", "low_balance_toman"),
    "wallet.topup": ("account_id", "transaction", "balance_toman"),
    "key.monthly_limit_reached": ("account_id", "key_id", "monthly_limit_toman", "spent_toman"),
    "account.suspended": ("account_id", "reason"),
    "account.resumed": ("account_id", "reason"),
    "payment.succeeded": ("account_id", "order"),
    "payment.failed": ("account_id", "order"),
    "ping": (),
}
TRANSACTION_FIELDS = ("id", "account_id", "time", "kind", "amount_toman", "balance_after_toman",
                      "ref", "note", "actor")
SIGNATURE_HEADER = "Upgate-Signature"


def split_entry(entry) -> tuple[str, bytes]:
    """An outbox entry "<event id> <json>" → (event id, json)."""
    raw = entry if isinstance(entry, bytes) else str(entry).encode()
    event_id, _, doc = raw.partition(b" ")
    return event_id.decode(), doc


def _ordered(d: dict, fields: tuple[str, ...]) -> dict:
    return {k: d.get(k) for k in fields}


def body(doc: bytes) -> bytes:
    """The event as stored by Lua → the body the receiver gets:
    {"id", "type", "created", "data": {the type's fields, in order}}."""
    d = orjson.loads(doc)
    data = d.get("data") or {}
    fields = DATA_FIELDS.get(d["type"], tuple(data))
    if "transaction_record" in data:  # credit.lua hands the transaction log's record over as it is
        from upgate.services.transactions import decode, public

        data["transaction"] = public(decode(data["account_id"], data.pop("transaction_record")))
    if "order_hash" in data:  # credit.lua / order_status.lua hand the order's hash over as it is
        from upgate.payments.orders import from_pairs

        data["order"] = from_pairs(data.pop("order_hash"))
    out = _ordered(data, fields)
    if isinstance(out.get("transaction"), dict):
        out["transaction"] = _ordered(out["transaction"], TRANSACTION_FIELDS)
    return orjson.dumps({"id": d["id"], "type": d["type"], "created": int(d["created"]), "data": out})


def ping(now: float | None = None) -> bytes:
    """The body of `upgate-admin webhook test`."""
    created = int(time.time() if now is None else now)
    return orjson.dumps({"id": "evt_" + secrets.token_hex(12), "type": "ping", "created": created,
                         "data": {}})


def signature(secret: str, body: bytes, t: int | None = None) -> str:
    """`Upgate-Signature`: t=<unix s>,v1=<hex HMAC-SHA256(secret, "<t>.<raw body>")>."""
    t = int(time.time()) if t is None else int(t)
    mac = hmac.new(secret.encode(), str(t).encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"t={t},v1={mac}"


def verify(secret: str, header: str, body: bytes, *, tolerance_s: int = 300, now: float | None = None) -> bool:
    """What a receiver does (docs/webhooks.md has it stand-alone): the signature matches the
    raw body and its time is within `tolerance_s` of now (a replayed old request fails)."""
    parts = dict(p.split("=", 1) for p in header.split(",") if "=" in p)
    try:
        t = int(parts["t"])
    except (KeyError, ValueError):
        return False
    now = time.time() if now is None else now
    if abs(now - t) > tolerance_s:
        return False
    expected = signature(secret, body, t).split("v1=", 1)[1]
    return hmac.compare_digest(expected, parts.get("v1", ""))


def backoff_s(attempts: int, base_s: float, max_s: float, rand=random.random) -> float:
    """Delay before the next attempt after `attempts` failed ones: base × 2^(attempts−1), at
    most max_s, of which a random half is taken off (jitter), so the retries of many events
    failing at once do not hit a recovering receiver together."""
    full = min(max_s, base_s * (2 ** min(max(attempts - 1, 0), 30)))
    return full * (0.5 + 0.5 * rand())
