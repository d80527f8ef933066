"""Console sessions: who is signed in, checked against the admin tokens on every request.

Sign-in verifies an admin token (``admin_tokens.verify``, the same check as the management
API's Bearer header) and opens a session:

- the browser gets a random session id in a signed cookie (Tornado's secure cookie, keyed by
  ``cookie_secret(pepper)``, so every node of the deployment reads it);
- Redis gets ``keyspace.console_session(sha256(id))`` with a 12 h TTL, holding the token
  encrypted (Fernet) under a key derived from the id. Neither side alone yields the token: the
  cookie has only the id, Redis only a ciphertext it has no key for.

Each request decrypts the token and verifies it again, so a revoked token (or one turned
read-only) takes effect on the session's next request, on every node. Sign-out deletes the
Redis entry, so a copy of the cookie stops working too. Sync functions: run in the executor.
"""
from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import secrets

from cryptography.fernet import Fernet, InvalidToken

from upgate.services import admin_tokens
from upgate.store import keyspace

LIFETIME_S = 12 * 3600
COOKIE = "upgate_console"


@functools.lru_cache(maxsize=4)
def cookie_secret(pepper: str) -> str:
    """The secret Tornado signs the console's cookies with (the session id, flash messages):
    derived from the deployment's key pepper, so every node agrees and nothing new must be
    configured; a separate derivation, so it reveals nothing about the pepper or key HMACs."""
    return hmac.new(pepper.encode(), b"upgate console cookie secret v1", hashlib.sha256).hexdigest()


def _cipher(session_id: str) -> Fernet:
    key = hmac.new(session_id.encode(), b"upgate console session key v1", hashlib.sha256).digest()
    return Fernet(base64.urlsafe_b64encode(key))


def _name(session_id: str) -> str:
    return keyspace.console_session(hashlib.sha256(session_id.encode()).hexdigest())


def _verify(client, pepper: str, token: str):
    """The one place the console checks an admin token: the management API's own check."""
    return admin_tokens.verify(client, pepper, token)


def sign_in(client, pepper: str, token: str):
    """(session id, AdminToken) for a valid admin token; (None, None) otherwise."""
    who = _verify(client, pepper, token.strip()) if token else None
    if who is None:
        return None, None
    session_id = secrets.token_urlsafe(32)
    client.set(_name(session_id), _cipher(session_id).encrypt(token.strip().encode()), ex=LIFETIME_S)
    return session_id, who


def current(client, pepper: str, session_id: str | None):
    """The AdminToken behind a session, verified now; None when the session is unknown,
    expired or its token no longer verifies (revoked), in which case it is ended."""
    if not session_id:
        return None
    blob = client.get(_name(session_id))
    if blob is None:
        return None
    try:
        token = _cipher(session_id).decrypt(blob, ttl=LIFETIME_S).decode()
    except InvalidToken:
        token = None
    who = _verify(client, pepper, token) if token else None
    if who is None:
        client.delete(_name(session_id))
    return who


def sign_out(client, session_id: str | None) -> None:
    if session_id:
        client.delete(_name(session_id))
