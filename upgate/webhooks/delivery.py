"""Delivery: every node is one consumer of the stream's consumer group; each event is attempted
by one node at a time, retried with backoff for the retry window, then recorded as failed.

Four loops per node, none on the request path (a slow or dead receiver only keeps these
tasks waiting; the HTTP client is its own, not the one requests go upstream with):
- read:  XREADGROUP new entries (only as many as there are free delivery slots, so nothing
         sits pending unattended) and attempt each;
- retry: take the retries that are due (lua/webhook_due.lua leases them) and attempt each;
- claim: XAUTOCLAIM entries pending on another consumer for longer than `claim_s` (its node
         died mid-attempt: an attempt never takes longer than the timeout) and attempt them;
- move:  the outbox mover (outbox.py).
An attempt is a POST of the event's body with `Upgate-Signature`; a 2xx finishes it
(lua/webhook_finish.lua), anything else schedules the next attempt (lua/webhook_retry.lua).
"""
from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
import time

import orjson
import redis.exceptions as rexc
from tornado.httpclient import HTTPClientError, HTTPRequest
from tornado.simple_httpclient import HTTPTimeoutError, SimpleAsyncHTTPClient

from upgate import __version__
from upgate.billing import jalali
from upgate.store import connection as store, keyspace
from upgate.store.background import stop_if_cancelled
from upgate.webhooks import events
from upgate.webhooks.outbox import FAILED_MAX, Outbox

log = logging.getLogger("upgate")

SLOTS = 32  # attempts in flight per node
GONE_MS = 86_400_000  # a consumer with nothing pending, silent this long, is a node long gone
_KEYS = (keyspace.WEBHOOK_STREAM, keyspace.WEBHOOK_RETRY, keyspace.WEBHOOK_ATTEMPTS)
USER_AGENT = f"upgate-webhooks/{__version__}"


def http_client() -> SimpleAsyncHTTPClient:
    """A private client on the current loop (never the upstream curl pool)."""
    return SimpleAsyncHTTPClient(force_instance=True, max_clients=SLOTS)


async def post(http, url: str, secret: str, body: bytes, timeout_s: float) -> tuple[int | None, str | None]:
    """One signed POST. Returns (status, None) when the receiver answered, (None, why) when it
    did not (timeout, refused connection, TLS failure...)."""
    request = HTTPRequest(url, method="POST", body=body, request_timeout=timeout_s,
                          connect_timeout=timeout_s, follow_redirects=False, headers={
                              "Content-Type": "application/json", "User-Agent": USER_AGENT,
                              events.SIGNATURE_HEADER: events.signature(secret, body)})
    try:
        response = await http.fetch(request, raise_error=False)
    except HTTPTimeoutError:
        return None, f"no answer within {timeout_s:g} s"
    except HTTPClientError as e:
        return None, e.message or f"HTTP {e.code}"
    except OSError as e:
        return None, e.strerror or type(e).__name__
    except Exception as e:  # noqa: BLE001 - anything else the client raises is a failed attempt
        return None, type(e).__name__
    return response.code, None


def _ok(status: int | None) -> bool:
    return status is not None and 200 <= status < 300


class Delivery:
    def __init__(self, client, settings, metrics=None, *, consumer: str | None = None, clock=time.time):
        self.client = client
        self.s = settings
        self.metrics = metrics
        self.clock = clock
        self.consumer = consumer or f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
        self.claim_ms = int(settings.webhook_claim_s * 1000)
        self.outbox = Outbox(client, check_ms=self.claim_ms, poll_ms=int(settings.webhook_poll_s * 1000),
                             clock=clock, count=self._count)
        self.http = None
        self.inflight: set[asyncio.Task] = set()
        self._loops: list[asyncio.Task] = []
        self._due = store.script("webhook_due")
        self._retry = store.script("webhook_retry")
        self._finish = store.script("webhook_finish")
        self._claims = 0

    # ---- life
    async def start(self) -> None:
        self.http = http_client()
        self._loops = [asyncio.create_task(self._every(self.s.webhook_poll_s, self.outbox.move, "move"),
                                           name="upgate-webhook-mover"),
                       asyncio.create_task(self._read_loop(), name="upgate-webhook-reader"),
                       asyncio.create_task(self._every(self.s.webhook_poll_s, self.retry_due, "retry"),
                                           name="upgate-webhook-retries"),
                       asyncio.create_task(self._every(max(0.2, self.s.webhook_claim_s / 4), self.claim, "claim"),
                                           name="upgate-webhook-claims")]

    async def stop(self) -> None:
        tasks = self._loops + list(self.inflight)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._loops = []
        if self.http is not None:
            self.http.close()
            self.http = None

    async def _every(self, interval_s: float, step, what: str) -> None:
        while True:
            try:
                await step()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # keep the loop alive; the store may come back
                log.warning("webhooks: %s failed (%s: %s)", what, type(e).__name__, str(e)[:200])
            await asyncio.sleep(interval_s)
            stop_if_cancelled()

    async def _ensure_group(self) -> None:
        try:
            await self.client.xgroup_create(keyspace.WEBHOOK_STREAM, keyspace.WEBHOOK_GROUP, id="0", mkstream=True)
        except rexc.ResponseError as e:
            if "BUSYGROUP" not in str(e):
                raise

    # ---- the loops
    def _free(self) -> int:
        return SLOTS - len(self.inflight)

    async def _read_loop(self) -> None:
        backoff = 0.1
        group_ready = False
        while True:
            stop_if_cancelled()
            if not self._free():
                await asyncio.wait(self.inflight, return_when=asyncio.FIRST_COMPLETED)
                continue
            try:
                if not group_ready:
                    await self._ensure_group()
                    group_ready = True
                reply = await self.client.xreadgroup(keyspace.WEBHOOK_GROUP, self.consumer,
                                                     {keyspace.WEBHOOK_STREAM: ">"}, count=self._free(), block=1000)
                backoff = 0.1
            except asyncio.CancelledError:
                raise
            except Exception as e:  # the store is away, or the stream was deleted (NOGROUP)
                group_ready = False
                log.warning("webhooks: reading the stream failed (%s: %s)", type(e).__name__, str(e)[:200])
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            for _stream, entries in _streams(reply):
                for entry, fields in entries:
                    self._spawn(store.text(entry), fields, None)

    async def retry_due(self) -> None:
        if not self._free():
            return
        flat = await self._due(self.client, list(_KEYS),
                               (int(self.clock() * 1000), self.claim_ms, self._free()))
        for i in range(0, len(flat), 3):
            self._spawn(store.text(flat[i]), _pairs(flat[i + 1]), flat[i + 2])

    async def claim(self) -> None:
        """Attempt what a dead node left pending (idle past claim_s); now and then forget the
        consumers of nodes long gone (every restart is a new consumer name)."""
        self._claims += 1
        if self._claims % 500 == 1:
            await self._forget_gone_consumers()
        if not self._free():
            return
        try:
            reply = await self.client.xautoclaim(keyspace.WEBHOOK_STREAM, keyspace.WEBHOOK_GROUP, self.consumer,
                                                 self.claim_ms, start_id="0-0", count=self._free())
        except rexc.ResponseError as e:
            if "NOGROUP" in str(e):
                await self._ensure_group()
                return
            raise
        for entry, fields in reply[1]:
            if fields:  # a claimed id whose entry was deleted meanwhile comes back without fields
                entry = store.text(entry)
                log.info("webhooks: took over event entry %s from a silent node", entry)
                self._spawn(entry, fields, await self.client.hget(keyspace.WEBHOOK_ATTEMPTS, entry))

    async def _forget_gone_consumers(self) -> None:
        try:
            consumers = await self.client.xinfo_consumers(keyspace.WEBHOOK_STREAM, keyspace.WEBHOOK_GROUP)
        except rexc.ResponseError:  # no stream or group yet
            return
        for c in consumers:
            name = store.text(c["name"])
            if name != self.consumer and int(c["pending"]) == 0 and int(c["idle"]) > GONE_MS:
                await self.client.xgroup_delconsumer(keyspace.WEBHOOK_STREAM, keyspace.WEBHOOK_GROUP, name)

    # ---- one attempt
    def _spawn(self, entry: str, fields, attempts) -> None:
        task = asyncio.create_task(self.attempt(entry, fields, attempts))
        self.inflight.add(task)
        task.add_done_callback(self.inflight.discard)

    async def attempt(self, entry: str, fields, attempts) -> None:
        f = {store.text(k): v for k, v in dict(fields).items()}
        account_id, event_id = store.text(f["account"]), store.text(f["event"])
        body = f["body"] if isinstance(f["body"], bytes) else str(f["body"]).encode()
        status, error = await post(self.http, self.s.webhook_url, self.s.webhook_secret, body,
                                   self.s.webhook_timeout_s)
        try:
            await self._outcome(entry, account_id, event_id, body, attempts, status, error)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # the entry stays pending: another node claims it after claim_s
            log.warning("webhooks: recording the outcome of event %s failed (%s)", event_id, type(e).__name__)

    async def _outcome(self, entry, account_id, event_id, body, attempts, status, error) -> None:
        now = self.clock()
        past = orjson.loads(attempts) if attempts else {}
        info = {"n": int(past.get("n", 0)) + 1, "first": past.get("first") or now, "last": now,
                "status": status, "error": error}
        if _ok(status):
            await self._finish(self.client, [*_KEYS, keyspace.WEBHOOK_FAILED],
                               (keyspace.WEBHOOK_GROUP, entry, "", FAILED_MAX))
            await self.outbox.done(account_id, event_id)
            self._count("delivered")
            return
        why = f"HTTP {status}" if status is not None else error
        if now - info["first"] >= self.s.webhook_retry_s:
            record = orjson.dumps({"event": orjson.loads(body), "reason": "expired", "attempts": info["n"],
                                   "first_attempt_at": jalali.utc_iso(info["first"]),
                                   "last_attempt_at": jalali.utc_iso(now),
                                   "last_status": status, "last_error": error})
            _, lost = await self._finish(self.client, [*_KEYS, keyspace.WEBHOOK_FAILED],
                                         (keyspace.WEBHOOK_GROUP, entry, record, FAILED_MAX))
            await self.outbox.done(account_id, event_id)
            self._count("failed")
            if int(lost):  # the failed list's cap pushed its oldest out: said, never silent
                log.warning("webhooks: the failed list is full (%d kept): its %d oldest entries were dropped",
                            FAILED_MAX, int(lost))
                self._count("dropped", int(lost))
            log.warning("webhooks: gave up event %s (account %s) after %d attempts (%s)",
                        event_id, account_id, info["n"], why)
            return
        delay = events.backoff_s(info["n"], self.s.webhook_backoff_s, self.s.webhook_backoff_max_s)
        await self._retry(self.client, list(_KEYS), (keyspace.WEBHOOK_GROUP, entry,
                                                     int((now + delay) * 1000), orjson.dumps(info)))
        self._count("retried")
        log.info("webhooks: event %s attempt %d failed (%s); next in %.1f s", event_id, info["n"], why, delay)

    def _count(self, outcome: str, n: int = 1) -> None:
        if self.metrics is not None:
            self.metrics.webhooks.labels(outcome).inc(n)


def _streams(reply):
    """XREADGROUP's reply as [(stream, [(id, fields)])] (RESP2 list or RESP3 dict)."""
    if not reply:
        return []
    return reply.items() if isinstance(reply, dict) else reply


def _pairs(flat) -> dict:
    return dict(zip(flat[::2], flat[1::2]))
