"""A customer changing their own phone (CUSTOMERS.md: `/dashboard/phone`): a code to the new
number and a code to the old one, both required, then the one phone-change primitive every face
calls (services/phone_change.py `set_phone`: unique, recorded in the admin log).

- `ask`: the client address's hourly window (sign-in's, lua/signin_rate.lua), then for each
  phone sign-in's per-phone rules (lua/signin_issue.lua: a code lives 120 s, a new one after
  60 s, 5 an hour), on logs of its own so a phone change and a sign-in do not wait for each
  other. Codes are stored only as HMACs bound to the account, the phone and its role, so a
  code for one account, phone or role never verifies another (nor signs anyone in).
- `confirm`: both codes, each through lua/signin_verify.lua (5 tries, constant-time compare, a
  right code consumed), then `set_phone`. Whether the new number belongs to another account is
  said only after its code proved the customer holds that number, so the page tells no one
  anything about a number they do not have.
"""
from __future__ import annotations

import secrets

from upgate.services import signin
from upgate.store import connection as store, keyspace

ROLES = ("new", "old")


class SamePhone(signin.SignInError):
    """The new number is the account's own."""

    reason = "phone_same"


def _digest(secret: bytes, account_id: str, phone: str, role: str, code: str) -> str:
    return signin.digest(secret, f"change|{account_id}|{role}|{phone}", code)


def issue(client, secret: bytes, account_id: str, current: str, new_text: str, address: str) -> tuple[str, dict]:
    """Throttle and store the two codes; (the new phone, canonical; {"new": code, "old": code}).
    Nothing is stored when a throttle refuses (the address's window counts the ask)."""
    new = signin.canonical_phone(new_text)
    if new == current:
        raise SamePhone()
    status, wait = store.script("signin_rate").call_sync(
        client, [keyspace.signin_address(address)], [signin.PER_ADDRESS_HOUR, signin.HOUR_MS, secrets.token_hex(8), 0])
    if int(status):
        raise signin.TooMany(wait_s=signin._seconds(wait))  # noqa: SLF001 (sign-in's rounding)
    codes = {}
    for role, phone in (("new", new), ("old", current)):
        code = f"{secrets.randbelow(10 ** 6):06d}"
        status, wait = store.script("signin_issue").call_sync(
            client, [keyspace.phone_change_code(phone, role), keyspace.phone_change_sent(phone)],
            [_digest(secret, account_id, phone, role, code), signin.CODE_LIFE_S * 1000, signin.RESEND_GAP_S * 1000,
             signin.PER_PHONE_HOUR, signin.HOUR_MS, 0, secrets.token_hex(8)])
        if int(status):
            if codes:  # the first was issued: withdrawn, so no half-change lingers
                client.delete(keyspace.phone_change_code(new, "new"))
            if int(status) == 1:
                raise signin.TooSoon(wait_s=signin._seconds(wait))  # noqa: SLF001 (sign-in's rounding)
            raise signin.TooMany(wait_s=signin._seconds(wait))  # noqa: SLF001
        codes[role] = code
    return new, codes


def withdraw(client, current: str, new: str) -> None:
    """An SMS did not go out: neither code stands."""
    client.delete(keyspace.phone_change_code(new, "new"), keyspace.phone_change_code(current, "old"))


def check(client, secret: bytes, account_id: str, current: str, new_text: str, code_new: str, code_old: str) -> str:
    """Both codes right (each try counted, each right one consumed); the new phone. Raises
    sign-in's refusals (WrongCode, CodeExpired, TooManyTries) for the first that is not."""
    new = signin.canonical_phone(new_text)
    for role, phone, code in (("old", current, code_old), ("new", new, code_new)):
        status, left = store.script("signin_verify").call_sync(
            client, [keyspace.phone_change_code(phone, role)],
            [_digest(secret, account_id, phone, role, signin.normalize_code(code)), signin.TRIES, 0])
        if int(status) == 1 and int(left) <= 0:  # that was the last try: the code is dead now
            raise signin.WrongCode(reason="signin_last_try")
        if int(status) == 1:
            raise signin.WrongCode(tries_left=int(left))
        if int(status) == 2:
            raise signin.CodeExpired()
        if int(status) == 3:
            raise signin.TooManyTries()
    return new


def change(client, account_id: str, new: str) -> dict:
    """The verified change, through the one primitive (unique; recorded with actor `dashboard`)."""
    from upgate.services import phone_change

    return phone_change.set_phone(client, account_id, new, actor="dashboard")

