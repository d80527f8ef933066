"""Transactions: every change of a wallet's balance other than a request's charge (an opening
balance, a top-up, an adjustment), recorded in the same atomic step as the change itself
(lua/credit.lua), idempotently by the caller's ref.

Each account keeps, in its own slot: the transaction log ``keyspace.transactions(acct)`` (a
list, oldest first, never trimmed), the refs ``keyspace.refs(acct)`` (ref → the transaction it
made, for ever) and, in the wallet hash, the lifetime counters ``credited`` (Σ transactions,
kept by credit.lua) and ``charged`` (Σ charges, kept by settle.lua): balance == credited −
charged at every moment.

Durable once acknowledged: when the account's master has replicas, a call returns only after
at least one replica has the write (WAIT, on the connection that wrote it); when none confirms
within REPLICA_WAIT_MS, ``NotDurable`` is raised instead of a result (the write may be lost in a
failover; repeating the call with the same ref is safe and waits again).
"""
from __future__ import annotations

import secrets
import unicodedata

import orjson
import redis

from upgate.i18n import numbers
from upgate.billing import jalali, money
from upgate.store import connection as store, keyspace, lua_library
from upgate.services.account_rules import (AccountError, BalanceOutOfRange, InvalidAmount, UnknownAccount,
                                  check_month, normalize_id, parse_amount)

MAX_REF = 128  # characters
MAX_NOTE = 500  # characters
REPLICA_WAIT_MS = 2000  # how long a top-up waits for a replica to confirm it
KINDS = ("opening", "topup", "adjustment")
MIGRATION_NOTE = "balance when transactions began to be recorded"


class InvalidRef(AccountError):
    """A ref is empty, longer than MAX_REF characters or holds a non-printable character."""

    field = "ref"
    reason = "ref_invalid"


class InvalidNote(AccountError):
    """A note is missing where required, too long, or holds a control character."""

    field = "note"


class IdempotencyConflict(AccountError):
    """The ref was already used for a transaction of another kind or amount."""

    field = "ref"
    reason = "idempotency_conflict"


class UnknownOrder(AccountError):
    """A payment's credit names an order that does not exist (lua/credit.lua code 5)."""

    field = "order"
    reason = "order_unknown"


class OrderMismatch(AccountError):
    """A payment's credit does not match its order's amount or ref (lua/credit.lua code 6):
    nothing was credited."""

    field = "order"
    reason = "order_mismatch"


class NotDurable(Exception):
    """The transaction was applied on the master, but no replica confirmed it in time: a
    failover now could lose it. ``result`` is what the call would have returned."""

    def __init__(self, message: str, result: dict):
        super().__init__(message)
        self.result = result


# ---- pure helpers -----------------------------------------------------------------------------

def normalize_ref(ref):
    """The one form a ref is stored and compared in (docs/money.md): surrounding whitespace
    stripped and Unicode NFC, so "r ", " r" and the NFD spelling of a ref are that ref, on
    every face (CLI, API and its Idempotency-Key header, console). Anything not text is
    returned as it is, for check_ref to refuse."""
    return unicodedata.normalize("NFC", ref).strip() if isinstance(ref, str) else ref


def check_ref(ref) -> str | None:
    """None, or the normalized ref if it is 1 to MAX_REF printable characters; else `InvalidRef`."""
    if ref is None:
        return None
    ref = normalize_ref(ref)
    if not isinstance(ref, str) or not ref or len(ref) > MAX_REF or not ref.isprintable():
        shown = ref if isinstance(ref, str) and len(ref) <= 40 else f"{str(ref)[:40]}…"
        raise InvalidRef(f"ref must be 1 to {MAX_REF} printable characters (no control "
                         f"characters), got {shown!r}", high=MAX_REF)
    return ref


def check_note(note, *, required: bool = False) -> str | None:
    """None (no note), or the note unchanged if it is at most MAX_NOTE printable characters;
    `InvalidNote` otherwise, and when `required` and missing."""
    if note is None or (isinstance(note, str) and not note.strip()):
        if required:
            raise InvalidNote("an adjustment needs a note saying why (--note TEXT)", reason="note_missing")
        return None
    if not isinstance(note, str) or len(note) > MAX_NOTE or not note.isprintable():
        raise InvalidNote(f"note must be at most {MAX_NOTE} printable characters (no control characters)",
                          reason="note_too_long", high=MAX_NOTE)
    return note


def decode(account_id: str, raw) -> dict:
    """A stored record ("<time ms>|<kind>|<amount>|<balance after>|<json>") → the transaction
    object of OPERATORS.md (amounts as six-fractional-digit strings, time ISO UTC)."""
    t, kind, amount, after, rest = store.text(raw).split("|", 4)
    extra = orjson.loads(rest)
    return {"id": extra.get("id"), "account_id": account_id, "time": jalali.utc_iso(int(t) / 1000),
            "kind": kind, "amount_toman": money.fmt(int(amount)),
            "balance_after_toman": money.fmt(int(after)), "ref": extra.get("ref"),
            "note": extra.get("note"), "actor": extra.get("actor"), "_ms": int(t),
            "_micro": int(amount)}


def public(txn: dict) -> dict:
    """The transaction without the internal `_ms`/`_micro` fields."""
    return {k: v for k, v in txn.items() if not k.startswith("_")}


def _record_json(ref, note, actor) -> str:
    return orjson.dumps({"id": "txn_" + secrets.token_hex(10), "ref": ref, "note": note,
                         "actor": actor}).decode()


def migration_json() -> str:
    return _record_json(None, MIGRATION_NOTE, "migration")


def is_migration(txn: dict) -> bool:
    """The opening the migration gave an account from before transactions: its balance then,
    money received long before, never a payment of the day it was recorded."""
    return txn.get("actor") == "migration" and txn.get("note") == MIGRATION_NOTE and txn.get("ref") is None


# ---- the step ---------------------------------------------------------------------------------

def _node_client(client, key: str):
    """The plain client of the node that owns `key` (the client itself on one Redis)."""
    if isinstance(client, redis.RedisCluster):
        return client.get_redis_connection(client.get_node_from_key(key))
    return client


def _replicas(node) -> int:
    try:
        return int(node.info("replication").get("connected_slaves", 0))
    except redis.ResponseError:  # the embedded store answers no INFO section
        return 0


def credit(client, acct: str, kind: str, amount_micro: int, *, ref: str | None = None,
           note: str | None = None, actor: str = "cli", order_id: str | None = None,
           bank: dict | None = None) -> dict:
    """Apply one transaction (validated by the caller) through lua/credit.lua and wait for a
    replica where there is one. Returns {"transaction", "balance_toman", "replayed"}.
    `order_id` (a payment's credit, upgate/payments/): the order is checked against the
    credit and marked paid with `bank` ({"ref_id", "card_pan"}) in the same step."""
    script = store.script("credit")
    wallet = keyspace.wallet(acct)
    keys = [wallet, keyspace.refs(acct), keyspace.transactions(acct),
            *keyspace.outbox_keys(acct, isinstance(client, redis.RedisCluster))]
    args = [kind, amount_micro, money.MAX_MICRO, ref or "", _record_json(ref, note, actor), migration_json(), acct]
    if order_id is not None:
        keys.append(keyspace.order(acct, order_id))
        args.append(orjson.dumps(bank or {}).decode())
    node = _node_client(client, wallet)
    replicas = _replicas(node)

    def send():
        pipe = node.pipeline(transaction=False)  # the script and its WAIT on one connection
        script.queue(pipe, keys, args)
        if replicas:
            pipe.execute_command("WAIT", 1, REPLICA_WAIT_MS)
        return pipe.execute()

    replies = lua_library.call_sync(node, send)
    code, balance, raw = int(replies[0][0]), int(replies[0][1]), replies[0][2]
    if code == 1:
        raise UnknownAccount(f"unknown account {acct}")
    if code == 2:
        raise BalanceOutOfRange(
            f"refused: balance {money.fmt(balance)} + {money.fmt(amount_micro)} toman would pass "
            f"the limit of ±{money.fmt(money.MAX_MICRO)} toman (2^53 micro-toman)")
    if code == 4:
        first = decode(acct, raw)
        raise IdempotencyConflict(
            f"ref {ref!r} was already used for a {first['kind']} of {numbers.exact_toman(first['amount_toman'])} toman "
            f"({first['id']}); nothing was changed")
    if code == 5:
        raise UnknownOrder(f"unknown order {order_id}")
    if code == 6:
        raise OrderMismatch(f"order {order_id} is not for {money.fmt(amount_micro)} toman with ref "
                            f"{ref!r}; nothing was credited")
    if code not in (0, 3):
        raise RuntimeError(f"credit.lua returned an unknown code {code}")
    result = {"transaction": public(decode(acct, raw)) if raw else None,
              "balance_toman": money.fmt(balance), "replayed": code == 3}
    if replicas and int(replies[1]) < 1:
        again = ("repeat it with the same ref to confirm it" if ref else
                 "do NOT repeat it (it has no ref); check `account transactions` after the failover")
        raise NotDurable(f"recorded on the master, but no replica confirmed it within "
                         f"{REPLICA_WAIT_MS} ms: a failover now could lose it; {again}", result)
    return result


def _amount(amount_text) -> int:
    micro = parse_amount(amount_text if isinstance(amount_text, str) else str(amount_text),
                         allow_negative=True, what="amount_toman")
    if micro == 0:
        raise InvalidAmount("an amount of zero changes nothing", reason="amount_zero")
    return micro


def topup(client, account_id: str, amount_text, *, ref: str | None = None, note: str | None = None,
          actor: str = "cli") -> dict:
    """Money the customer paid: a `topup` of `amount_text` toman (> 0). A negative amount is
    recorded as an `adjustment` (what `account topup` did before `account adjust` existed).
    Idempotent by `ref`; refused (nothing written) on an unknown account, a bad amount, ref or
    note, a ref used for another kind or amount, or a balance beyond ±2^53 micro-toman."""
    micro = _amount(amount_text)
    ref, note = check_ref(ref), check_note(note)
    acct = normalize_id(account_id)
    return _audited(client, credit(client, acct, "topup" if micro > 0 else "adjustment", micro, ref=ref,
                                   note=note, actor=actor), actor, ref)


def adjust(client, account_id: str, amount_text, *, note: str, ref: str | None = None,
           actor: str = "cli") -> dict:
    """A credit or debit that is not a payment (≠ 0), with the note saying why."""
    micro = _amount(amount_text)
    ref, note = check_ref(ref), check_note(note, required=True)
    acct = normalize_id(account_id)
    return _audited(client, credit(client, acct, "adjustment", micro, ref=ref, note=note, actor=actor), actor, ref)


def _audited(client, result: dict, actor: str, ref: str | None) -> dict:
    """The operator's top-up or adjustment in the admin log: the balance before and after, or a
    replay (the same ref again: nothing changed, not a second top-up)."""
    from upgate.services import admin_log

    tx = result["transaction"]
    after = money.parse_toman(result["balance_toman"], allow_negative=True)
    amount = money.parse_toman(tx["amount_toman"], allow_negative=True)
    changed = not result["replayed"]
    admin_log.record(client, actor, "account.topup" if tx["kind"] == "topup" else "account.adjust",
                     tx["account_id"], {"amount_toman": tx["amount_toman"], "ref": ref, "transaction_id": tx["id"]},
                     before={"balance_toman": money.fmt(after - amount)} if changed else None,
                     after={"balance_toman": result["balance_toman"]} if changed else None,
                     replay=result["replayed"], note=tx["note"])
    return result


def migrate(client, account_id: str) -> None:
    """Give an account from before transactions its opening transaction (no-op otherwise)."""
    acct = normalize_id(account_id)
    store.script("credit").call_sync(
        client, [keyspace.wallet(acct), keyspace.refs(acct), keyspace.transactions(acct),
                 *keyspace.outbox_keys(acct, isinstance(client, redis.RedisCluster))],
        ["migrate", 0, money.MAX_MICRO, "", "{}", migration_json(), acct])


# ---- reads ------------------------------------------------------------------------------------

def month_bounds_ms(month: str) -> tuple[int, int]:
    """[start, end) of a Jalali month in Unix ms (Tehran midnights)."""
    first, last = jalali.parse_month(month)
    start = jalali.tehran_day_bounds(_noon(first))[0]
    end = jalali.tehran_day_bounds(_noon(last))[1]
    return int(start * 1000), int(end * 1000)


def _noon(jday) -> float:
    from datetime import datetime, time as dtime

    return datetime.combine(jday.togregorian(), dtime(12), jalali.TEHRAN).timestamp()


def list_transactions(client, account_id: str, month: str | None = None) -> list[dict]:
    """The account's transactions, newest first; only those of one Jalali month if given."""
    acct = normalize_id(account_id)
    if month is not None:
        month = check_month(month)
    pipe = client.pipeline(transaction=False)
    pipe.exists(keyspace.wallet(acct))
    pipe.lrange(keyspace.transactions(acct), 0, -1)
    exists, raws = pipe.execute()
    if not exists:
        raise UnknownAccount(f"unknown account {acct}")
    txns = [decode(acct, r) for r in raws]
    if month is not None:
        start, end = month_bounds_ms(month)
        txns = [t for t in txns if start <= t["_ms"] < end]
    return [public(t) for t in reversed(txns)]


CSV_FIELDS = ("id", "account_id", "time", "kind", "amount_toman", "balance_after_toman", "ref",
              "note", "actor")
