"""Top-up orders in Redis: creating one, finding it (by id, by a gateway's authority), listing,
and ending an unpaid one. An order is a hash in its account's slot (keyspace.order), so
lua/credit.lua marks it paid in the step that credits it; `paid` is never written here.

Lifecycle: pending → paid | failed | expired (a failed order may still become paid when the bank
says so: the callback proves nothing either way). The order object of CUSTOMERS.md:
{"id", "account_id", "amount_toman", "gateway", "status", "authority", "ref_id", "card_pan",
"created_at", "paid_at", "transaction_id"}.
"""
from __future__ import annotations

import secrets
import time

import redis

from upgate.billing import jalali, money
from upgate.services.account_rules import AccountError, NotFound, normalize_id
from upgate.store import connection as store, keyspace

STATUSES = ("pending", "paid", "failed", "expired")
SCAN_MAX = 5000  # orders one filtered listing call looks at
FIELDS = ("id", "account_id", "amount_toman", "gateway", "status", "authority", "ref_id", "card_pan",
          "created_at", "paid_at", "transaction_id")


class UnknownOrder(NotFound):
    """No such order (or, for a customer, not theirs: the same answer)."""

    field = "order"
    reason = "order_unknown"


class InvalidStatus(AccountError):
    field = "status"
    reason = "invalid"


class InvalidCursor(AccountError):
    field = "cursor"
    reason = "cursor_invalid"


def new_id() -> str:
    return "ord_" + secrets.token_hex(12)


def _time(ms) -> str | None:
    return jalali.utc_iso(int(ms) / 1000) if ms not in (None, "") else None


def decode(raw: dict) -> dict:
    """The stored hash → the order object (and `_reason`, `_created_ms`: internal)."""
    h = store.text_map(raw) if raw and not isinstance(next(iter(raw)), str) else dict(raw)
    return {
        "id": h["id"], "account_id": h["account_id"], "amount_toman": money.fmt(int(h["amount"])),
        "gateway": h["gateway"], "status": h["status"], "authority": h.get("authority") or None,
        "ref_id": h.get("ref_id") or None, "card_pan": h.get("card_pan") or None,
        "created_at": _time(h.get("created_ms")), "paid_at": _time(h.get("paid_ms")),
        "transaction_id": h.get("transaction_id") or None,
        "_reason": h.get("reason") or None, "_created_ms": int(h.get("created_ms") or 0),
        "_ref": h.get("ref") or None, "_amount": int(h["amount"]),
    }


def from_pairs(pairs) -> dict:
    """An HGETALL handed over by a Lua step (a flat [k, v, k, v …] list) → the order object."""
    return public(decode(dict(zip(pairs[::2], pairs[1::2]))))


def public(order: dict) -> dict:
    return {k: order[k] for k in FIELDS}


def _member(account_id: str, order_id: str) -> str:
    return f"{account_id}|{order_id}"


def create(client, account_id: str, amount_micro: int, gateway: str) -> dict:
    """A new pending order (no authority yet). Its owner lookup is written first, so no order
    exists that `show` cannot find; then the order and its listings."""
    acct = normalize_id(account_id)
    order_id, now_ms = new_id(), int(time.time() * 1000)
    client.set(keyspace.order_owner(order_id), acct)
    pipe = client.pipeline(transaction=not isinstance(client, redis.RedisCluster))
    pipe.hset(keyspace.order(acct, order_id), mapping={
        "id": order_id, "account_id": acct, "amount": amount_micro, "gateway": gateway,
        "status": "pending", "created_ms": now_ms})
    pipe.zadd(keyspace.orders(acct), {order_id: now_ms})
    pipe.execute()
    client.zadd(keyspace.PAYMENTS_ALL, {_member(acct, order_id): now_ms})
    client.zadd(keyspace.PAYMENTS_OPEN, {_member(acct, order_id): now_ms})
    return get(client, order_id)


def set_authority(client, order: dict, authority: str) -> dict:
    """The gateway opened the payment: the order learns its authority and its credit's ref, and
    the authority finds the order."""
    acct, order_id = order["account_id"], order["id"]
    client.hset(keyspace.order(acct, order_id), mapping={
        "authority": authority, "ref": f"{order['gateway']}:{authority}"})
    client.set(keyspace.payment_authority(order["gateway"], authority), _member(acct, order_id))
    return get(client, order_id)


def get(client, order_id: str, account_id: str | None = None) -> dict:
    """The order (with internal fields); UnknownOrder when there is none — or when `account_id`
    is given and the order is another account's (a customer must not learn it exists)."""
    if not isinstance(order_id, str) or not order_id.startswith("ord_") or len(order_id) > 64:
        raise UnknownOrder(f"unknown order {str(order_id)[:64]}")
    owner = client.get(keyspace.order_owner(order_id))
    if owner is None or (account_id is not None and store.text(owner) != account_id):
        raise UnknownOrder(f"unknown order {order_id}")
    raw = client.hgetall(keyspace.order(store.text(owner), order_id))
    if not raw:
        raise UnknownOrder(f"unknown order {order_id}")
    return decode(raw)


def by_authority(client, gateway: str, authority: str) -> dict | None:
    """The order a gateway's authority belongs to, None when none (a forged or foreign one)."""
    found = client.get(keyspace.payment_authority(gateway, authority))
    if found is None:
        return None
    acct, _, order_id = store.text(found).partition("|")
    raw = client.hgetall(keyspace.order(acct, order_id))
    return decode(raw) if raw else None


def end(client, order: dict, status: str, reason: str) -> dict:
    """pending → failed | expired (lua/order_status.lua, which emits payment.failed); an order
    that is paid or already ended is left as it is. Returns the order as it is now."""
    acct = order["account_id"]
    store.script("order_status").call_sync(
        client, [keyspace.order(acct, order["id"]),
                 *keyspace.outbox_keys(acct, isinstance(client, redis.RedisCluster))],
        [status, reason[:200], acct])
    return get(client, order["id"])


def close(client, order: dict) -> None:
    """The reconciler has nothing more to do for this order."""
    client.zrem(keyspace.PAYMENTS_OPEN, _member(order["account_id"], order["id"]))


def open_orders(client, limit: int = 1000) -> list[tuple[str, str]]:
    """(account id, order id) of the orders the reconciler still looks at, oldest first."""
    out = []
    for raw in client.zrange(keyspace.PAYMENTS_OPEN, 0, limit - 1):
        acct, _, order_id = store.text(raw).partition("|")
        out.append((acct, order_id))
    return out


def open_fairly(client, per_account: int, scan: int = 20_000) -> list[tuple[str, str]]:
    """The open orders a reconciliation pass verifies: at most `per_account` of each account,
    its oldest first; every account's first before any account's second, and so on (one
    account's thousand orders cannot push another's paid one out of the pass)."""
    by_account: dict[str, list[str]] = {}
    for acct, order_id in open_orders(client, scan):
        mine = by_account.setdefault(acct, [])
        if len(mine) < per_account:
            mine.append(order_id)
    out = []
    for rank in range(per_account):
        out += [(acct, ids[rank]) for acct, ids in by_account.items() if len(ids) > rank]
    return out


def _check_status(status):
    if status is not None and status not in STATUSES:
        raise InvalidStatus(f"status must be one of {', '.join(STATUSES)}, got {status!r}")
    return status


def list_orders(client, *, account_id: str | None = None, status: str | None = None,
                cursor: str | None = None, limit: int = 50) -> dict:
    """Orders newest first: {"data": [order], "next_cursor"}. `cursor` is where the last page
    stopped, "<created ms>:<index member>". A filtered listing looks at SCAN_MAX orders at most
    per call, so a rare status never makes one call read every order: the page may then be
    short, with a next_cursor to go on from."""
    _check_status(status)
    if account_id is not None:
        acct = normalize_id(account_id)
        if not client.exists(keyspace.wallet(acct)):
            from upgate.services.account_rules import UnknownAccount

            raise UnknownAccount(f"unknown account {acct}")
        index, member = keyspace.orders(acct), (lambda m: (acct, m))
    else:
        index, member = keyspace.PAYMENTS_ALL, (lambda m: m.split("|", 1))
    top, top_ms, last = "+inf", None, None
    if cursor:
        ms, _, last = cursor.partition(":")
        if not (ms.isdigit() and last):
            raise InvalidCursor("cursor is malformed: pass next_cursor as it was given")
        top, top_ms = ms, int(ms)
    data, offset, batch, seen, scanned = [], 0, min(max(limit, 50), SCAN_MAX), None, 0
    while len(data) < limit:
        if scanned >= SCAN_MAX:
            return {"data": [public(o) for o in data], "next_cursor": seen}
        raws = client.zrevrangebyscore(index, top, "-inf", start=offset, num=batch, withscores=True)
        offset += len(raws)
        # the cursor's own score: members already shown sort at or above the last one
        fresh = [(store.text(m), int(s)) for m, s in raws
                 if not (top_ms is not None and int(s) == top_ms and store.text(m) >= last)]
        pipe = client.pipeline(transaction=False)
        for m, _s in fresh:
            pipe.hgetall(keyspace.order(*member(m)))
        for (m, score), raw in zip(fresh, pipe.execute() if fresh else []):
            scanned += 1
            seen = f"{score}:{m}" if status is not None else seen
            if raw:
                o = decode(raw)
                if status is None or o["status"] == status:
                    data.append(o)
                    seen = f"{score}:{m}"
            if len(data) >= limit:
                break
        if len(raws) < batch:
            break
    next_cursor = seen if len(data) >= limit else None
    return {"data": [public(o) for o in data], "next_cursor": next_cursor}
