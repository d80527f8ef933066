"""Notes on an account: what the support desk wants the next person to know ("called about a
double charge, refunded 1405-09-02"), each with who wrote it and when. Never shown to the
account holder.

Kept in ``keyspace.notes(acct)``, a list newest first of JSON ``{"id", "ts", "actor", "text"}``
(the API's note object), trimmed to MAX_NOTES; adding one is one MULTI in the account's slot,
and writes the admin log's entry (``account.note``) itself.
"""
from __future__ import annotations

import secrets
import time

import orjson

from upgate.billing import jalali
from upgate.services import admin_log
from upgate.services.account_rules import AccountError, UnknownAccount, normalize_id
from upgate.store import keyspace

MAX_NOTES = 1000
MAX_TEXT = 2000


class InvalidNote(AccountError):
    field = "text"
    reason = "note_text_missing"


def check_text(text) -> str:
    if not isinstance(text, str) or not text.strip():
        raise InvalidNote("a note needs its text")
    text = text.strip().replace("\r\n", "\n")
    if len(text) > MAX_TEXT:
        raise InvalidNote(f"a note is at most {MAX_TEXT} characters", reason="note_too_long", high=MAX_TEXT)
    if any(not (c.isprintable() or c == "\n") for c in text):
        raise InvalidNote("a note must be printable text", reason="text_control")
    return text


def add(client, account_id: str, text: str, *, actor: str = "cli") -> dict:
    """Add a note to the account; returns it ({"id", "ts", "actor", "text"})."""
    text = check_text(text)
    acct = normalize_id(account_id)
    if not client.exists(keyspace.wallet(acct)):
        raise UnknownAccount(f"unknown account {acct}")
    note = {"id": "note_" + secrets.token_hex(8), "ts": jalali.utc_iso(time.time()), "actor": actor, "text": text}
    pipe = client.pipeline(transaction=True)
    pipe.lpush(keyspace.notes(acct), orjson.dumps(note))
    pipe.ltrim(keyspace.notes(acct), 0, MAX_NOTES - 1)
    pipe.execute()
    admin_log.record(client, actor, "account.note", acct, {"note_id": note["id"]}, note=text)
    return note


def list_notes(client, account_id: str, limit: int = 100) -> list[dict]:
    """The account's notes, newest first."""
    acct = normalize_id(account_id)
    pipe = client.pipeline(transaction=False)
    pipe.exists(keyspace.wallet(acct))
    pipe.lrange(keyspace.notes(acct), 0, max(1, min(limit, MAX_NOTES)) - 1)
    exists, raws = pipe.execute()
    if not exists:
        raise UnknownAccount(f"unknown account {acct}")
    return [orjson.loads(r) for r in raws]
