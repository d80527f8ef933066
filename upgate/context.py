"""Everything a gateway node shares between requests, built once at start-up.

Handlers receive it through the route table. It owns the background tasks every node runs:
the pub/sub subscriber (cache invalidation, catalog swaps, cool-downs) and the reaper.
"""
from __future__ import annotations

import asyncio
import logging
import time

import orjson

from upgate.store import connection as store, keyspace, lua_library, policy as store_policy
from upgate.services.auth import Auth
from upgate.store.background import stop_if_cancelled
from upgate.catalog.cache import Catalog
from upgate.billing.ledger import STORE_ERRORS, Ledger
from upgate.http.access_log import AccessLog
from upgate.services.admin_node import AdminNode
from upgate.http.client_address import ClientAddress
from upgate.handlers.metrics import Metrics, observe
from upgate.billing.refusals import Refusals
from upgate.routes.health import RouteHealth
from upgate.settings import Settings
from upgate.upstream.client import UpstreamClient

log = logging.getLogger("upgate")


class Context:
    def __init__(self, settings: Settings, providers: dict, client=None, access_log: bool = True):
        self.settings = settings
        self.providers = providers
        self.redis = client if client is not None else store.connect_async(settings.redis_url)
        self.auth = Auth(self.redis, settings.key_pepper)
        self.client_address = ClientAddress(settings.trusted_proxies)  # for the failed-key throttle
        self.catalog = Catalog(self.redis)
        self.ledger = Ledger(self.redis, settings)
        self.routes = RouteHealth(self.redis, settings)  # models of several routes (docs/routes.md)
        self.refusals = Refusals(settings.topup_url, settings.free_quota_default)
        self.upstream = UpstreamClient(silence_s=settings.upstream_silence_s)
        self.metrics = Metrics()
        self.admin = AdminNode(settings)  # the management API's pool, client and token cache (lazy)
        self.access_log = AccessLog() if access_log else None
        self.subscribed = asyncio.Event()
        self.redis_ok = True
        self.store_warnings: list[str] = []  # no persistence (store_policy.py), for /healthz
        self.store_refusal: str | None = None  # the store may evict keys: why it must not be used
        self.draining = False
        self.inflight: dict = {}  # hold id → live proxy handler (leases, keep-alives, shutdown)
        self._tasks: list[asyncio.Task] = []
        self.webhooks = None  # the delivery engine, when UPGATE_WEBHOOK_URL and _SECRET are set
        self.signin = _signin(settings)  # the dashboard's sign-in by SMS code
        self.signin.on_send = lambda outcome: self.metrics.count(self.metrics.sms, (outcome,))
        from upgate.alerts import low_balance

        # the customer's low-balance SMS, once per crossing that a settlement reports
        self.alerts = low_balance.build(settings, self.redis)
        self.ledger.on_low_balance = self.alerts.fire

    async def start(self) -> None:
        if self.settings.sms == "log":
            log.warning("UPGATE_SMS=log: dashboard sign-in codes are written to this log, so anyone "
                        "who reads it can sign in as any customer; use kavenegar or smsir in production")
        try:
            await self.catalog.reload()
        except STORE_ERRORS as e:  # a whole cluster down is a RedisClusterException, not a RedisError
            self.redis_ok = False
            log.warning("store unreachable at start-up (%s); serving 503 until it answers", type(e).__name__)
        else:
            try:  # now, or a new version's first requests would each find the functions missing
                await lua_library.load(self.redis)
            except STORE_ERRORS as e:  # (a full store refuses it): the first script call loads them
                log.warning("Lua functions not loaded at start-up (%s)", e)
        self._tasks = [
            asyncio.create_task(self._subscribe(), name="upgate-events"),
            asyncio.create_task(self.ledger.run_reaper(self.settings.reap_s, self.metrics.reaped),
                                name="upgate-reaper"),
            asyncio.create_task(self.catalog.poll(30.0), name="upgate-catalog-poll"),
            asyncio.create_task(self._sweep(), name="upgate-sweeper"),
        ]
        if self.metrics is not None:
            self._tasks.append(asyncio.create_task(self.metrics.run_flusher(), name="upgate-metrics"))
        s = self.settings
        if s.payments != "off" or s.zarinpal_merchant_id or s.zibal_merchant:  # old orders too
            from upgate.payments import reconciler

            self._tasks.append(asyncio.create_task(reconciler.run(self), name="upgate-payments"))
        if self.settings.webhooks_on:
            from upgate.webhooks.delivery import Delivery

            # its own connections: a blocked XREADGROUP never waits in line with the hot path's
            self.webhooks = Delivery(store.connect_async(self.settings.redis_url), self.settings, self.metrics)
            await self.webhooks.start()

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        if self.webhooks is not None:
            await self.webhooks.stop()
            await self.webhooks.client.aclose()
            self.webhooks = None
        await self.alerts.close()
        if self.access_log is not None:
            self.access_log.close()
        self.admin.close()

    def on_request_finished(self, handler) -> None:
        observe(self, handler)

    async def _sweep(self) -> None:
        """One timer for the whole node: renew the leases of long requests (one script call
        per account) and send SSE keep-alives on quiet streams. Per-request timers would cost
        far more than this loop.

        It ticks at least once a second, so a keep-alive leaves at most a second after it is
        due (15 s of quiet by default), and each hold is renewed once per renew_s, whatever the
        tick; a tick costs a pass over this node's in-flight requests, nothing else."""
        s = self.settings
        tick = min(s.renew_s, s.keepalive_s / 3, 1.0)
        renewed: dict[str, float] = {}  # hold id → when its lease was last renewed (or taken)
        lost: set[str] = set()  # holds the reaper took from under a live request: renewed no more
        while True:
            await asyncio.sleep(tick)
            stop_if_cancelled()
            now = time.monotonic()
            due: dict[str, list[str]] = {}
            live = self.inflight
            for hold_id, h in list(live.items()):
                if h.billing is None and hold_id not in lost and now - renewed.get(hold_id, h.started) >= s.renew_s:
                    due.setdefault(h.key.account_id, []).append(hold_id)
                    renewed[hold_id] = now
                if h.stream and now - getattr(h, "last_write", h.started) >= s.keepalive_s:
                    h.ping()
            for hold_id in renewed.keys() - live.keys():
                del renewed[hold_id]
            lost &= live.keys()
            if due:
                results = await asyncio.gather(*(self.ledger.renew(a, ids) for a, ids in due.items()),
                                               return_exceptions=True)
                for e in results:  # a failure must not stop the loop (keep-alives ride on it)
                    if isinstance(e, Exception):
                        log.warning("lease renewal failed (%s); the reaper is the backstop", type(e).__name__)
                    elif e:
                        # The reaper released these after a stall longer than the lease (ledger.renew
                        # logged each). The requests go on: their settle still charges the reaped hold
                        # (settle.lua code 2), and cutting a client's stream for our own stall would be
                        # worse than a balance that may dip below zero. Counted for the operator.
                        lost.update(e)
                        self.metrics.holds.labels("lost").inc(len(e))

    def _dispatch(self, data: bytes) -> None:
        try:
            msg = orjson.loads(data)
        except orjson.JSONDecodeError:
            return
        if not isinstance(msg, dict):
            return
        self.auth.on_event(msg)
        self.refusals.on_event(msg)
        self.catalog.on_event(msg)
        self.ledger.on_event(msg)
        self.routes.on_event(msg)
        self.admin.on_event(msg)

    async def _resync(self) -> None:
        """After a (re)subscription anything may have been missed: drop and reload it all. The
        catalog only when its version moved: start() has just read it (and logged it in force)."""
        self.auth.flush()
        self.admin.flush()
        self.refusals.flush()
        await self._check_store()
        # how far back `request show` must look: as far as any node keeps records (records.py)
        await self.redis.zadd(keyspace.REQUEST_LOG_DAYS, {"days": self.settings.request_log_days}, gt=True)
        remote = await self.redis.hget(keyspace.CATALOG_META, "version")
        if remote is None or store.text(remote) != self.catalog.version:
            await self.catalog.reload()
        await self.ledger.reload_cooldowns()
        await self.routes.reload()

    async def _check_store(self) -> None:
        """The store's eviction policy and persistence (store_policy.py), read again whenever the
        subscription (re)connects: a store restarted with another config is seen. An evicting
        store is logged as an error and reported by /healthz."""
        url = self.settings.redis_url
        if url.startswith("memory://"):
            return

        def check() -> list[str]:
            client = store.connect_sync(url)
            try:
                return store_policy.check(client, url)
            finally:
                client.close()
        try:
            self.store_warnings, self.store_refusal = await asyncio.to_thread(check), None
        except store_policy.EvictingStore as e:
            self.store_refusal = str(e)
            log.error("%s", e)
        except STORE_ERRORS as e:  # unreachable again: the next subscription checks again
            log.warning("store policy not checked (%s)", type(e).__name__)
        for w in self.store_warnings:
            log.warning("%s", w)

    async def _subscribe(self) -> None:
        backoff = 0.1
        while True:
            stop_if_cancelled()
            pubsub = store.pubsub_async(self.redis)
            try:
                await pubsub.subscribe(keyspace.CHANNEL)
                await self._resync()
                self.redis_ok = True
                self.subscribed.set()
                backoff = 0.1
                while True:
                    stop_if_cancelled()
                    msg = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
                    if msg is not None and msg.get("type") == "message":
                        self._dispatch(msg["data"])
            except asyncio.CancelledError:
                await _close(pubsub)
                raise
            except STORE_ERRORS as e:
                self.redis_ok = False
                self.subscribed.clear()
                self.auth.flush()
                self.admin.flush()
                log.warning("event subscription lost (%s); retrying", type(e).__name__)
                await _close(pubsub)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)


def _signin(settings: Settings):
    from upgate import sms
    from upgate.services.signin import SignIn, secret_from_pepper

    sender = sms.make(settings.sms, api_key=settings.sms_api_key, template=settings.sms_template,
                      url=settings.sms_url)
    return SignIn(sender, secret_from_pepper(settings.key_pepper), settings.signup_open,
                  settings.signup_credit_toman)


async def _close(pubsub) -> None:
    try:
        await pubsub.aclose()
    except Exception:  # the connection is already gone; nothing to clean
        pass
