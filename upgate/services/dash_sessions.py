"""Dashboard sessions: which account a browser is signed in to.

The browser holds a random id (256 bits) in the cookie ``upgate_dash``; Redis holds
``keyspace.dash_session(sha256(id))`` → {account_id, phone, created_at, address, browser} with a
7-day TTL. The store never holds a usable cookie, and every node reads the same entry, so signing
out (which deletes it) ends the session on every node at once.

Each account also lists its sessions' names in ``keyspace.dash_sessions_of(account)`` (scored by
when they began), for the sessions page (time, address, browser) and "sign out everywhere",
which deletes every one of them. A name whose session has expired is dropped when the list is
read. `browser` and `system` ("Chrome", "Android") are read from the User-Agent when signing in;
the header itself is not kept. Sync functions: run in the executor.
"""
from __future__ import annotations

import hashlib
import re
import secrets
import time

from upgate.store import connection as store, keyspace

LIFETIME_S = 7 * 86400
COOKIE = "upgate_dash"
LISTED_MAX = 50  # sessions an account lists; older ones beyond it are ended (a runaway script)


def _hash(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


def _name(session_id: str) -> str:
    return keyspace.dash_session(_hash(session_id))


_BROWSERS = (("Edg/", "Edge"), ("OPR/", "Opera"), ("SamsungBrowser", "Samsung Internet"), ("Firefox/", "Firefox"),
             ("Chrome/", "Chrome"), ("Chromium/", "Chrome"), ("Safari/", "Safari"), ("curl/", "curl"))
_SYSTEMS = (("Android", "Android"), ("iPhone", "iOS"), ("iPad", "iPadOS"), ("Windows", "Windows"),
            ("Mac OS X", "macOS"), ("CrOS", "ChromeOS"), ("Linux", "Linux"))


def browser_label(user_agent: str | None) -> tuple[str, str]:
    """(browser, system): ("Chrome", "Android"), ("Firefox", "Windows"); "" for what is not
    recognised. Names, not sentences: the page puts them in its language."""
    ua = (user_agent or "")[:512]
    return (next((label for needle, label in _BROWSERS if needle in ua), ""),
            next((label for needle, label in _SYSTEMS if needle in ua), ""))


def open_session(client, account_id: str, phone: str, address: str = "", user_agent: str = "") -> str:
    """A new session for a verified phone's account; returns its id (the cookie's value)."""
    session_id = secrets.token_urlsafe(32)
    digest, now = _hash(session_id), int(time.time())
    name, listed = keyspace.dash_session(digest), keyspace.dash_sessions_of(account_id)
    pipe = client.pipeline(transaction=True)
    pipe.hset(name, mapping={"account_id": account_id, "phone": phone, "created_at": now,
                             "address": re.sub(r"[^0-9A-Fa-f:.]", "", address or "")[:64],
                             **dict(zip(("browser", "system"), browser_label(user_agent)))})
    pipe.expire(name, LIFETIME_S)
    pipe.execute()
    pipe = client.pipeline(transaction=True)
    pipe.zadd(listed, {digest: now})
    pipe.zremrangebyscore(listed, "-inf", now - LIFETIME_S)
    pipe.expire(listed, LIFETIME_S)
    pipe.zrange(listed, 0, -LISTED_MAX - 1)  # the oldest beyond the cap
    surplus = pipe.execute()[-1]
    if surplus:
        client.delete(*(keyspace.dash_session(store.text(d)) for d in surplus))
        client.zrem(listed, *surplus)
    return session_id


def current(client, session_id: str | None) -> dict | None:
    """{account_id, phone, created_at, …} of a live session; None when unknown or ended."""
    if not session_id or len(session_id) > 128:
        return None
    raw = client.hgetall(_name(session_id))
    return store.text_map(raw) if raw else None


def close(client, session_id: str | None) -> None:
    """End the session everywhere (sign-out)."""
    if session_id and len(session_id) <= 128:
        session = current(client, session_id)
        client.delete(_name(session_id))
        if session:
            client.zrem(keyspace.dash_sessions_of(session["account_id"]), _hash(session_id))


def list_sessions(client, account_id: str, session_id: str | None = None) -> list[dict]:
    """The account's live sessions, newest first: {created_at (unix s), address, browser, system,
    current (this browser's)}. Names of sessions that ended on their own are dropped."""
    listed = keyspace.dash_sessions_of(account_id)
    digests = [store.text(d) for d in client.zrevrange(listed, 0, LISTED_MAX - 1)]
    pipe = client.pipeline(transaction=False)
    for d in digests:
        pipe.hgetall(keyspace.dash_session(d))
    mine = _hash(session_id) if session_id else None
    out, dead = [], []
    for d, raw in zip(digests, pipe.execute() if digests else []):
        s = store.text_map(raw) if raw else None
        if not s or s.get("account_id") != account_id:
            dead.append(d)
            continue
        out.append({"created_at": int(s.get("created_at") or 0), "address": s.get("address") or "",
                    "browser": s.get("browser") or "", "system": s.get("system") or "", "current": d == mine})
    if dead:
        client.zrem(listed, *dead)
    return out


def close_all(client, account_id: str) -> int:
    """Sign out everywhere: end every session of the account (this browser's too), on every
    node at once. Returns how many were ended."""
    listed = keyspace.dash_sessions_of(account_id)
    digests = [store.text(d) for d in client.zrange(listed, 0, -1)]
    ended = 0
    for d in digests:
        ended += client.delete(keyspace.dash_session(d))
    client.delete(listed)
    return ended
