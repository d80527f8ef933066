"""The index phone → account (``keyspace.phone_owner``): a phone belongs to at most one account.

- `claim` is the first step of creating an account: SET NX, so of two creations racing for one
  phone exactly one gets it; the other is refused `PhoneInUse` before anything is written. A
  claim left by a creation that died before writing its wallet (the owner has no wallet) is
  taken over with SET XX GET, which again lets only one taker win.
- accounts created before the index are brought into it by the phone migration
  (upgate/migrations/steps.py, `upgate-admin migrate`): canonical phones in the wallets, every
  phone held by one account indexed, a phone held by several marked "*" (``SHARED``, its
  accounts in ``keyspace.phone_shared``): nobody signs in with it until a phone change
  (services/phone_change.py) gives it back to one account. `duplicates` (the audit) only reads.
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


def duplicates(client, ids: list[str]) -> list[dict]:
    """[{"phone", "account_ids"}] for each phone (canonical form) the wallets of several of
    `ids` hold. Reads only (the audit): the index is written by the phone migration
    (upgate/migrations/steps.py) and resolved by a phone change."""
    by_phone: dict[str, list[str]] = {}
    for acct, raw in _phones(client, ids):
        try:
            phone = phones.canonical(store.text(raw)) if raw is not None else None
        except phones.PhoneError:
            phone = None
        if phone is not None:
            by_phone.setdefault(phone, []).append(acct)
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
