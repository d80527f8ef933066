"""The index phone → account (``keyspace.phone_owner``): a phone belongs to at most one account.

- `claim` is the first step of creating an account: SET NX, so of two creations racing for one
  phone exactly one gets it; the other is refused `PhoneInUse` before anything is written. A
  claim left by a creation that died before writing its wallet (the owner has no wallet) is
  taken over with SET XX GET, which again lets only one taker win.
- `rebuild` (run by `audit`) migrates accounts created before the index: it writes each
  wallet's phone in canonical form, indexes every phone held by one account, and marks a
  phone held by several with "*" (``SHARED``): nobody signs in with it until the operator
  resolves it and runs the audit again. Returns the duplicates for the audit's report.
"""
from __future__ import annotations

from upgate.services import phones
from upgate.services.account_rules import PhoneInUse
from upgate.store import connection as store, keyspace

SHARED = "*"


def owner(client, phone: str) -> str | None:
    """The account id holding this canonical phone; SHARED for a duplicated one; None: nobody."""
    raw = client.get(keyspace.phone_owner(phone))
    return store.text(raw) if raw is not None else None


def claim(client, phone: str, account_id: str) -> None:
    """Give `phone` to `account_id` (about to be created), or `PhoneInUse`."""
    key = keyspace.phone_owner(phone)
    if client.set(key, account_id, nx=True):
        return
    held = owner(client, phone)
    if held not in (None, SHARED) and not client.exists(keyspace.wallet(held)):
        if store.text(client.set(key, account_id, xx=True, get=True) or b"") == held:
            return  # a dead creation's claim, taken over by this one alone
    raise PhoneInUse(f"phone {phone} already belongs to another account")


def rebuild(client, ids: list[str]) -> list[dict]:
    """Index the phones of `ids` (every account): canonical form written back to wallets,
    unique phones → their account, shared ones → SHARED. Returns
    [{"phone", "account_ids": [...]}] for the phones held by more than one account."""
    by_phone: dict[str, list[str]] = {}
    fix = client.pipeline(transaction=False)
    for acct, raw in _phones(client, ids):
        if raw is None:
            continue
        stored = store.text(raw)
        try:
            phone = phones.canonical(stored)
        except phones.PhoneError:
            continue  # not a phone: kept as it was, indexed nowhere (it could never sign in)
        if phone != stored:
            fix.hset(keyspace.wallet(acct), "phone", phone)
        by_phone.setdefault(phone, []).append(acct)
    for phone, owners in by_phone.items():
        fix.set(keyspace.phone_owner(phone), owners[0] if len(owners) == 1 else SHARED)
    fix.execute()
    return sorted(({"phone": p, "account_ids": sorted(a)} for p, a in by_phone.items() if len(a) > 1),
                  key=lambda d: d["phone"])


def _phones(client, ids: list[str], batch: int = 1000):
    """(account id, its stored phone or None), one pipeline per `batch` wallets."""
    for start in range(0, len(ids), batch):
        chunk = ids[start:start + batch]
        pipe = client.pipeline(transaction=False)
        for acct in chunk:
            pipe.hget(keyspace.wallet(acct), "phone")
        yield from zip(chunk, pipe.execute())
