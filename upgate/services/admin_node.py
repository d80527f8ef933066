"""What a gateway node keeps for the management API: the thread pool and sync client the
service layer runs on, the admin-token cache, and the throttle on failed authentications.

Nothing here runs on the client path: the pools and the client are made on the first admin
request, and the only other hook is `on_event`, called per pub/sub message.

Two pools, so reads never block writes: `read` (GET pages and reports, whose cost the query
decides: an overview reads every account's days) runs on its own workers, `call` (writes, the
token check, the admin log) on others. A read-only token firing many distinct overviews fills
only the read pool; a top-up still finds a free worker at once.

Token cache: HMAC → (token, fetched at). An entry lives 60 s at most (its refresh also records
the token's last use), and is dropped at once when a revocation is published — the same
path client keys take (`upgate.services.auth`), with the same generation guard against a lookup that
was in flight while the event arrived.

Throttle: a token bucket per source address, `BURST` failed authentications, refilled one
every `REFILL_S` seconds. It throttles failures, not owners (`wait_before`): with the bucket
empty, a token this node knows to be live (its cache, or the set of live token HMACs, reloaded
only when a token is created or revoked, or after `TTL_S`) is still looked up and let in, so
nobody behind the same NAT or PaaS router can lock an operator out; any other token gets 429
`admin_auth_throttled` (Retry-After: until one failure is allowed again) without a lookup.
The address is upgate/http/client_address.py's: the TCP peer, or the client a trusted proxy names.
"""
from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

from upgate.services import admin_tokens
from upgate.store import connection as store
from upgate.services.admin_tokens import AdminToken
from upgate.http.client_address import ClientAddress

TTL_S = 60.0
BURST = 10
REFILL_S = 6.0  # 10 failures a minute sustained, per address
MAX_ADDRESSES = 10_000
WORKERS = 4  # per pool (reads, writes)


class AdminNode:
    def __init__(self, settings):
        self.settings = settings
        self._pools: dict[str, ThreadPoolExecutor] = {}
        self._client = None
        self._tokens: dict[str, tuple[AdminToken, float]] = {}
        self._generation = 0
        self._failures: dict[str, tuple[float, float]] = {}  # address → (allowance, at)
        self._live: tuple[frozenset[str], int, float] | None = None  # (HMACs, generation, at)
        self._live_loading: asyncio.Future | None = None
        self._address = ClientAddress(settings.trusted_proxies)
        self.cache: dict = {}  # short-lived answers of costly reads (the overview)
        self._overview_lock = asyncio.Lock()

    # ---- the service layer, off the event loop ----

    @property
    def client(self):
        if self._client is None:
            self._client = store.connect_sync(self.settings.redis_url)
        return self._client

    async def _run(self, pool: str, fn, args, kwargs):
        if pool not in self._pools:
            self._pools[pool] = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix=f"upgate-admin-{pool}")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pools[pool], lambda: fn(self.client, *args, **kwargs))

    async def call(self, fn, *args, **kwargs):
        """Run a sync service function on the write pool with the node's sync client: writes,
        token checks, the admin log — short calls that must never queue behind a report."""
        return await self._run("write", fn, args, kwargs)

    async def read(self, fn, *args, **kwargs):
        """Run a sync read (a page, a report, a list) on the read pool: however many and however
        costly, it never takes a worker from `call`."""
        return await self._run("read", fn, args, kwargs)

    async def overview(self, days: list[str]) -> dict:
        """The overview of `days` (upgate/services/overview.py), reused for CACHE_S per range, and one
        computed at a time: distinct ranges queue here instead of filling the read pool, so the
        other reads (console pages, lists) keep their workers."""
        from upgate.services import overview

        key = ("overview", days[0], days[-1])

        def fresh():
            hit = self.cache.get(key)
            return hit if hit is not None and time.monotonic() - hit[0] <= overview.CACHE_S else None
        hit = fresh()
        if hit is None:
            async with self._overview_lock:
                hit = fresh()  # (computed while this one waited its turn)
                if hit is None:
                    hit = (time.monotonic(), await self.read(overview.overview, days))
                    if len(self.cache) > 64:
                        self.cache.clear()
                    self.cache[key] = hit
        return hit[1]

    def close(self) -> None:
        for pool in self._pools.values():
            pool.shutdown(wait=False, cancel_futures=True)
        self._pools.clear()

    # ---- tokens ----

    async def verify(self, token: str) -> AdminToken | None:
        pepper = self.settings.key_pepper
        if not admin_tokens.well_formed(token) or not pepper:
            return None
        h = admin_tokens.hash_of(token, pepper)
        hit = self._tokens.get(h)
        now = time.monotonic()
        if hit is not None and now - hit[1] < TTL_S:
            return hit[0]
        generation = self._generation
        found = await self.call(admin_tokens.verify, pepper, token)
        if found is None:
            self._tokens.pop(h, None)
        elif generation == self._generation:  # no revocation was handled while we looked
            self._tokens[h] = (found, now)
        return found

    def on_event(self, msg: dict) -> None:
        if msg.get("t") == "admin_token":
            self._generation += 1
            self._tokens.pop(msg.get("hash", ""), None)

    def flush(self) -> None:
        self._generation += 1
        self._tokens.clear()

    async def known(self, token: str) -> bool:
        """Is `token` live, by its HMAC alone (no lookup per call)?"""
        pepper = self.settings.key_pepper
        if not admin_tokens.well_formed(token) or not pepper:
            return False
        h = admin_tokens.hash_of(token, pepper)
        hit = self._tokens.get(h)
        if hit is not None and time.monotonic() - hit[1] < TTL_S:
            return True
        live = self._live
        if live is None or live[1] != self._generation or time.monotonic() - live[2] >= TTL_S:
            if self._live_loading is None:  # one load at a time, however many requests wait
                self._live_loading = asyncio.ensure_future(self._load_live())
            await asyncio.shield(self._live_loading)
        return h in self._live[0]

    async def _load_live(self) -> None:
        try:
            generation = self._generation  # an event during the load makes it stale at once
            self._live = (await self.call(admin_tokens.live_hashes), generation, time.monotonic())
        finally:
            self._live_loading = None

    # ---- the throttle ----

    async def wait_before(self, address: str, token: str) -> int:
        """Seconds `address` must wait before `token` is looked up (0: look it up now). A live
        token is never kept waiting by the failures of others at its address."""
        wait = self.throttled(address)
        if wait and await self.known(token):
            return 0
        return wait

    def address(self, request) -> str:
        return self._address(request)

    def throttled(self, address: str) -> int:
        """Seconds until `address` may try again (0 = it may now)."""
        allowance = self._allowance(address, time.monotonic())
        return 0 if allowance >= 1 else int(REFILL_S * (1 - allowance)) + 1

    def failed(self, address: str) -> None:
        now = time.monotonic()
        allowance = self._allowance(address, now)
        if len(self._failures) >= MAX_ADDRESSES and address not in self._failures:
            self._forget_refilled(now)
        self._failures[address] = (max(allowance - 1, 0.0), now)

    def _allowance(self, address: str, now: float) -> float:
        entry = self._failures.get(address)
        if entry is None:
            return float(BURST)
        return min(float(BURST), entry[0] + (now - entry[1]) / REFILL_S)

    def _forget_refilled(self, now: float) -> None:
        for addr in [a for a, (left, at) in self._failures.items() if left + (now - at) / REFILL_S >= BURST]:
            del self._failures[addr]
        if len(self._failures) >= MAX_ADDRESSES:  # a flood from many addresses: start over
            self._failures.clear()
