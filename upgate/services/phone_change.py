"""Changing an account's phone: the one primitive the operator's faces (`account set-phone`,
PATCH /admin/v1/accounts/{id} {"phone"}, the console's form) and the customer's own phone change
(the dashboard) call.

The phone's index entry (``keyspace.phone_owner``, tag ``{p:<phone>}``) and the wallet
(``{a:<account>}``) live in different cluster slots, so no one Lua step can hold both. The change
is three atomic steps in an order where every interruption leaves the account usable and the
phone unique, and where running the same change again finishes it:

1. claim the new phone for the account (SET NX; a claim the account already holds is its own
   unfinished change). Another account's phone is refused `PhoneInUse` with nothing written;
   two changes racing for one phone: exactly one claims it.
2. compare-and-set the wallet's phone from the one read to the new one (lua/phone_set.lua): a
   change of the same account racing this one makes it give its claim back and refuse.
3. let go of the old phone (lua/phone_release.lua: only this account's entry; a shared phone
   goes back to its last account).

Between 1 and 3 both phones lead to the account (sign-in works with either); a repeated
change completes it. The account's cache entry on every node is dropped (pub/sub) and the
change is written to the admin log with its before and after.
"""
from __future__ import annotations

import orjson

from upgate.services import accounts, admin_log, phone_index
from upgate.services.account_rules import AccountError, PhoneInUse, UnknownAccount, check_phone, normalize_id
from upgate.store import connection as store, keyspace


class PhoneChanged(AccountError):
    """Another change of this account's phone landed first; nothing of this one was kept."""

    field = "phone"
    reason = "phone_changed"


def set_phone(client, account_id: str, phone: str, *, actor: str = "cli") -> dict:
    """Give the account `phone` (any spelling services/phones.py accepts, stored canonical).
    Returns {"account_id", "before": old phone, "after": new phone, "changed": bool}; refuses
    `InvalidPhone`, `UnknownAccount`, `PhoneInUse` or `PhoneChanged` having written nothing."""
    new = check_phone(phone)
    acct = normalize_id(account_id)
    raw = client.hget(keyspace.wallet(acct), "phone")
    if raw is None and not client.exists(keyspace.wallet(acct)):
        raise UnknownAccount(f"unknown account {acct}")
    old = store.text(raw) if raw is not None else ""
    claimed = _claim(client, new, acct)
    done = int(store.script("phone_set").call_sync(client, [keyspace.wallet(acct)], [old, new]))
    if done < 0:
        if claimed:
            _release(client, new, acct)  # ours alone: give it back
        if done == -1:
            raise UnknownAccount(f"unknown account {acct}")
        raise PhoneChanged(f"the phone of account {acct} was changed meanwhile; look again and retry")
    if old and old != new:
        try:
            _release(client, check_phone(old), acct)
        except AccountError:
            pass  # a stored phone from before canonical phones that is no phone: indexed nowhere
    client.publish(keyspace.CHANNEL, orjson.dumps({"t": "account", "id": acct}))
    changed = done == 1
    if changed:
        admin_log.record(client, actor, "account.set_phone", acct, before={"phone": old or None},
                         after={"phone": new})
    return {"account_id": acct, "before": old or None, "after": new, "changed": changed}


def _claim(client, phone: str, acct: str) -> bool:
    """Step 1; True when this call made the claim (so a failed step 2 gives it back)."""
    try:
        phone_index.claim(client, phone, acct)
        return True
    except PhoneInUse:
        if phone_index.owner(client, phone) == acct:
            return False  # this account's own claim: an unfinished change, or the phone it has
        raise PhoneInUse(f"phone {phone} already belongs to another account") from None


def _release(client, phone: str, acct: str) -> int:
    return int(store.script("phone_release").call_sync(
        client, [keyspace.phone_owner(phone), keyspace.phone_shared(phone)], [acct]))


def change(client, account_id: str, phone: str, default_quota: int, *, actor: str = "cli",
           old_names: bool = False) -> tuple[dict, dict]:
    """`set_phone`, then the account object: (object, the change)."""
    done = set_phone(client, account_id, phone, actor=actor)
    return accounts.get(client, done["account_id"], default_quota, old_names=old_names), done
