"""The data migrations, oldest first: what an older release left in the store that this one
reads otherwise. Each works on a batch of accounts (sorted ids) and is idempotent: run twice, the
second run changes nothing; interrupted, the same batch done again changes nothing it already
did. Each write is one atomic step in one account's or one phone's slot, made so that live
traffic on every node may go on meanwhile (a compare-and-set, a script that checks first).

A step: ``batch(client, ids, dry_run) -> changes`` for each batch, then ``finish(client, ids,
dry_run) -> changes`` once over every account (for what needs them all, such as which
accounts share a phone). `changes` counts what was (or, dry, would be) written.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from upgate.services import phones, transactions
from upgate.store import connection as store, keyspace


@dataclass(frozen=True)
class Step:
    version: int
    name: str
    summary: str
    batch: Callable
    finish: Callable | None = None


# ---- 1: money of record for accounts from before transactions ---------------------------------

def _counters(client, ids: list[str], dry_run: bool) -> int:
    """An account with no `credited` counter gets its opening transaction equal to its balance
    (lua/credit.lua, mode migrate: a no-op for an account that has one, whoever got there first)."""
    pipe = client.pipeline(transaction=False)
    for acct in ids:
        pipe.hmget(keyspace.wallet(acct), "balance", "credited")
    todo = [a for a, (bal, cred) in zip(ids, pipe.execute()) if bal is not None and cred is None]
    if not dry_run:
        for acct in todo:
            transactions.migrate(client, acct)
    return len(todo)


# ---- 2: canonical phones and the index phone → account ----------------------------------------

def _phones_of(client, ids: list[str]) -> list[tuple[str, str | None]]:
    pipe = client.pipeline(transaction=False)
    for acct in ids:
        pipe.hget(keyspace.wallet(acct), "phone")
    return [(a, store.text(p) if p is not None else None) for a, p in zip(ids, pipe.execute())]


def _canonical(stored: str | None) -> str | None:
    try:
        return phones.canonical(stored) if stored else None
    except phones.PhoneError:
        return None  # not a phone: kept as it is, indexed nowhere (it could never sign in)


def _spell(client, ids: list[str], dry_run: bool) -> int:
    """A phone stored as typed ("0912 123 4567") is written canonical, compare-and-set
    (lua/phone_set.lua): a phone changed meanwhile is left to its change."""
    changed = 0
    for acct, stored in _phones_of(client, ids):
        canon = _canonical(stored)
        if canon is None or canon == stored:
            continue
        if dry_run:
            changed += 1
        elif int(store.script("phone_set").call_sync(client, [keyspace.wallet(acct)], [stored, canon])) == 1:
            changed += 1
    return changed


def _index(client, ids: list[str], dry_run: bool) -> int:
    """Every phone → its one account, or "*" and the shared set when several hold it. Another
    account's entry is replaced only when that account no longer holds the phone (stale)."""
    by_phone: dict[str, list[str]] = {}
    for start in range(0, len(ids), 1000):
        for acct, stored in _phones_of(client, ids[start:start + 1000]):
            canon = _canonical(stored)
            if canon is not None:
                by_phone.setdefault(canon, []).append(acct)
    changed = 0
    for phone, owners in sorted(by_phone.items()):
        keys = [keyspace.phone_owner(phone), keyspace.phone_shared(phone)]
        if dry_run:
            from upgate.services import phone_index

            want = owners[0] if len(owners) == 1 else phone_index.SHARED
            changed += phone_index.owner(client, phone) != want
            continue
        got = store.script("phone_index_put").call_sync(client, keys, ["", *sorted(owners)])
        if isinstance(got, (bytes, str)):  # another account's entry: stale, or a late duplicate
            other = store.text(got)
            if _canonical(store.text(client.hget(keyspace.wallet(other), "phone") or b"")) == phone:
                owners = [*owners, other]
            got = store.script("phone_index_put").call_sync(client, keys, [other, *sorted(owners)])
        changed += int(got) if not isinstance(got, (bytes, str)) else 0
    return changed


# ---- 3: the accounts list's newest-first index -----------------------------------------------

def _listed(client, ids: list[str], dry_run: bool) -> int:
    pipe = client.pipeline(transaction=False)
    for acct in ids:
        pipe.zscore(keyspace.ACCOUNTS_BY_TIME, acct)
        pipe.hget(keyspace.wallet(acct), "created_at")
    replies = pipe.execute()
    missing = {acct: int(store.text(replies[2 * i + 1]) or 0) for i, acct in enumerate(ids)
               if replies[2 * i] is None and replies[2 * i + 1] is not None}
    if missing and not dry_run:
        client.zadd(keyspace.ACCOUNTS_BY_TIME, missing, nx=True)
    return len(missing)


STEPS = (
    Step(1, "transaction-counters", "accounts from before transactions get their opening transaction "
         "(balance = credited − charged from then on)", _counters),
    Step(2, "canonical-phones", "phones stored as typed are written canonical (+98…) and indexed "
         "phone → account; a phone several accounts hold is marked shared", _spell, _index),
    Step(3, "accounts-by-time", "every account is in the newest-first index of the accounts list", _listed),
)
LATEST = STEPS[-1].version
