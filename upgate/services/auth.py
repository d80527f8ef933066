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

from upgate.services import keys
from upgate.store import keyspace
from upgate.services.accounts import AccountInfo
from upgate.errors import GatewayError
from upgate.services.keys import KeyInfo

_INVALID = "invalid_api_key"

# Failed key checks per source address (in-process, no Redis): past FAILS_PER_WINDOW in one
# window, a key this node does not hold in its cache is refused with 429 until the window ends,
# without a hash or a lookup. Keys it knows still pass, so clients sharing an address with the
# failing one (behind a proxy, every client shares the proxy's) are not locked out. docs/security.md
FAILS_PER_WINDOW = 30
FAIL_WINDOW_S = 60.0
_MAX_ADDRESSES = 50_000


class FailedAuthThrottle:
    def __init__(self) -> None:
        self._fails: dict[str, list] = {}  # address → [window start (monotonic), failures]

    def retry_after(self, address: str) -> int:
        """Seconds this address stays throttled (0: not throttled)."""
        entry = self._fails.get(address)
        if entry is None or entry[1] < FAILS_PER_WINDOW:
            return 0
        left = entry[0] + FAIL_WINDOW_S - time.monotonic()
        if left <= 0:
            del self._fails[address]
            return 0
        return max(1, int(left + 0.999))

    def failed(self, address: str) -> None:
        now = time.monotonic()
        entry = self._fails.get(address)
        if entry is None or now - entry[0] >= FAIL_WINDOW_S:
            if len(self._fails) >= _MAX_ADDRESSES:
                self._prune(now)
            self._fails[address] = [now, 1]
        else:
            entry[1] += 1

    def _prune(self, now: float) -> None:
        for address in [a for a, e in self._fails.items() if now - e[0] >= FAIL_WINDOW_S]:
            del self._fails[address]
        if len(self._fails) >= _MAX_ADDRESSES:
            self._fails.clear()


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
        self.throttle = FailedAuthThrottle()

    async def authenticate(self, headers, address: str = "") -> tuple[KeyInfo, AccountInfo]:
        """The key and account of a request from `address` (its source, for the throttle)."""
        key = extract_key(headers)
        digest = keys.digest(key, self._pepper) if key and keys.well_formed(key) else None
        info = self._keys.get(digest) if digest is not None else None
        try:
            if info is None:
                wait = self.throttle.retry_after(address)
                if wait:
                    raise GatewayError("rate_limit_exceeded", "Too many failed API key checks from "
                                       "this address; retry later.", retry_after=wait)
                if digest is None:
                    raise GatewayError(_INVALID)  # malformed: no Redis lookup
                info = await self._load_key(digest)
            if info.revoked or (info.expires_at_ms is not None and info.expires_at_ms <= time.time() * 1000):
                raise GatewayError(_INVALID)
        except GatewayError as e:
            if e.code == _INVALID:
                self.throttle.failed(address)
            raise
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
