"""Authentication: which key, which account, from an in-process cache kept exact by pub/sub.

The cache is a speed-up, not the authority: admit.lua re-checks revoked/expired/suspended on
every billable request, so a pub/sub message arriving a millisecond late cannot let a revoked
key spend. Every admin change publishes on ``keyspace.CHANNEL``; the entry is dropped at once,
and the whole cache is flushed whenever the subscription (re)connects.

A load awaits Redis, and an event may be handled while it waits: the record it then returns
may predate the change, and caching it after the event's pop would keep it stale until the
next resubscription (allowed_models is read only from here). So every event and flush bumps
a generation counter; a load that started before the bump returns its record to the one
request that asked, but does not cache it. The next request loads afresh.
"""
from __future__ import annotations

import time

from upgate import keys, keyspace
from upgate.accounts import AccountInfo
from upgate.errors import GatewayError
from upgate.keys import KeyInfo

_INVALID = "invalid_api_key"


def extract_key(headers) -> str | None:
    """`Authorization: Bearer <key>` wins over `X-API-Key`; the scheme is case-insensitive."""
    auth = headers.get("Authorization")
    if auth is not None:
        scheme, _, token = auth.strip().partition(" ")
        if scheme.lower() != "bearer":
            return None
        return token.strip()
    api_key = headers.get("X-API-Key")
    return api_key.strip() if api_key is not None else None


class Auth:
    def __init__(self, client, pepper: str):
        self._redis = client
        self._pepper = pepper
        self._keys: dict[str, KeyInfo] = {}  # digest → key
        self._accounts: dict[str, AccountInfo] = {}
        self._generation = 0  # bumped by every event and flush; see the module docstring

    async def authenticate(self, headers) -> tuple[KeyInfo, AccountInfo]:
        key = extract_key(headers)
        if not key or not keys.well_formed(key):
            raise GatewayError(_INVALID)  # malformed: no Redis lookup
        digest = keys.digest(key, self._pepper)
        info = self._keys.get(digest)
        if info is None:
            info = await self._load_key(digest)
        if info.revoked or (info.expires_at_ms is not None and info.expires_at_ms <= time.time() * 1000):
            raise GatewayError(_INVALID)
        account = self._accounts.get(info.account_id)
        if account is None:
            account = await self._load_account(info.account_id)
        if account.suspended:
            raise GatewayError("account_suspended")
        return info, account

    async def _load_key(self, digest: str) -> KeyInfo:
        generation = self._generation
        owner = await self._redis.get(keyspace.keyhash(digest))
        if owner is None:
            raise GatewayError(_INVALID)
        account_id, _, key_id = owner.decode().partition(":")
        raw = await self._redis.hgetall(keyspace.key_record(account_id, key_id))
        if not raw:
            raise GatewayError(_INVALID)
        info = KeyInfo.from_hash(raw, key_id=key_id)
        if generation == self._generation:  # no event was handled while we waited
            self._keys[digest] = info
        return info

    async def _load_account(self, account_id: str) -> AccountInfo:
        generation = self._generation
        raw = await self._redis.hgetall(keyspace.wallet(account_id))
        if not raw:
            raise GatewayError(_INVALID)
        info = AccountInfo.from_hash(account_id, raw)
        if generation == self._generation:
            self._accounts[account_id] = info
        return info

    def on_event(self, msg: dict) -> None:
        t = msg.get("t")
        if t in ("key", "account"):
            self._generation += 1  # loads in flight may hold the old record: do not cache them
        if t == "key":
            self._keys.pop(msg.get("hash", ""), None)
        elif t == "account":
            self._accounts.pop(msg.get("id", ""), None)

    def flush(self) -> None:
        self._generation += 1
        self._keys.clear()
        self._accounts.clear()
