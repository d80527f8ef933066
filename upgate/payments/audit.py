"""The audit's payment check (upgate-admin audit, GET /admin/v1/audit): every paid order has its
one `payment` transaction, and every `payment` transaction its paid order. Both are written by
the one step of lua/credit.lua, so a mismatch means something changed behind its back.

Cost: per batch of accounts one pipeline (each account's order ids and transaction log: top-ups
only, never charges, so short), then one for the orders of the accounts that have any."""
from __future__ import annotations

import orjson

from upgate.payments.service import ACTOR
from upgate.store import connection as store, keyspace


def _txns(raws) -> list[dict]:
    out = []
    for raw in raws:
        _t, kind, amount, _after, rest = store.text(raw).split("|", 4)
        extra = orjson.loads(rest)
        out.append({"id": extra.get("id"), "kind": kind, "amount": int(amount), "ref": extra.get("ref"),
                    "actor": extra.get("actor")})
    return out


def check(client, account_ids: list[str]) -> list[dict]:
    """[{"account_id", "order_id", "ref", "problem"}] for the accounts given."""
    pipe = client.pipeline(transaction=False)
    for acct in account_ids:
        pipe.zrange(keyspace.orders(acct), 0, -1)
        pipe.lrange(keyspace.transactions(acct), 0, -1)
    replies = pipe.execute()
    wanted = [(acct, store.text(o)) for i, acct in enumerate(account_ids) for o in replies[2 * i]]
    pipe = client.pipeline(transaction=False)
    for acct, oid in wanted:
        pipe.hmget(keyspace.order(acct, oid), "status", "ref", "amount", "transaction_id")
    found: dict[str, list] = {}
    for (acct, oid), fields in zip(wanted, pipe.execute() if wanted else []):
        found.setdefault(acct, []).append((oid, fields))
    problems = []
    for i, acct in enumerate(account_ids):
        payments = {t["ref"]: t for t in _txns(replies[2 * i + 1]) if t["actor"] == ACTOR}
        paid_refs = set()
        for oid, (status, ref, amount, txn_id) in found.get(acct, ()):
            if store.text(status or b"") != "paid":
                continue
            ref = store.text(ref or b"")
            paid_refs.add(ref)
            t = payments.get(ref)
            if t is None or t["kind"] != "topup" or t["amount"] != int(amount or 0) or t["id"] != store.text(txn_id or b""):
                problems.append({"account_id": acct, "order_id": oid, "ref": ref,
                                 "problem": "paid order without its payment transaction"})
        for ref, t in payments.items():
            if ref not in paid_refs:
                problems.append({"account_id": acct, "order_id": None, "ref": ref,
                                 "problem": "payment transaction without a paid order"})
    return problems
