"""Dashboard sessions: which account a browser is signed in to.

The browser holds a random id (256 bits) in the cookie ``upgate_dash``; Redis holds
``keyspace.dash_session(sha256(id))`` → {account_id, phone, created_at} with a 7-day TTL. The
store never holds a usable cookie, and every node reads the same entry, so signing out (which
deletes it) ends the session on every node at once. Sync functions: run in the executor.
"""
from __future__ import annotations

import hashlib
import secrets
import time

from upgate.store import connection as store, keyspace

LIFETIME_S = 7 * 86400
COOKIE = "upgate_dash"


def _name(session_id: str) -> str:
    return keyspace.dash_session(hashlib.sha256(session_id.encode()).hexdigest())


def open_session(client, account_id: str, phone: str) -> str:
    """A new session for a verified phone's account; returns its id (the cookie's value)."""
    session_id = secrets.token_urlsafe(32)
    name = _name(session_id)
    pipe = client.pipeline(transaction=True)
    pipe.hset(name, mapping={"account_id": account_id, "phone": phone, "created_at": int(time.time())})
    pipe.expire(name, LIFETIME_S)
    pipe.execute()
    return session_id


def current(client, session_id: str | None) -> dict | None:
    """{account_id, phone, created_at} of a live session; None when unknown or ended."""
    if not session_id or len(session_id) > 128:
        return None
    raw = client.hgetall(_name(session_id))
    return store.text_map(raw) if raw else None


def close(client, session_id: str | None) -> None:
    """End the session everywhere (sign-out)."""
    if session_id and len(session_id) <= 128:
        client.delete(_name(session_id))
