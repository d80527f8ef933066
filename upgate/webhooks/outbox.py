"""The mover: from the accounts' outboxes (in their own slots) into the one delivery stream.

Each account hands out one event at a time, its oldest (lua/outbox_take.lua); when that one is
finished, lua/outbox_done.lua hands out the next. So at most one event per account is ever in
the stream or waiting for a retry, and a receiver gets each account's events in the order the
Lua steps decided them, whichever node delivers them.

The move is XADD, then record the entry id: a node that dies between the take and the XADD
leaves the event "out" with no entry; the mover's check (after `check_ms`) sees that and adds it
again. A node that dies after XADD but before recording it may add it twice: the receiver then
gets the same id twice (at least once; receivers de-duplicate by id).

An outbox holds at most OUTBOX_MAX events waiting (a receiver down while an account makes many):
the Lua step that adds one past it files the account for the mover at once, and the mover moves
the oldest beyond it (not the one out) to the failed list with `"reason": "overflow"`, logged
and counted (`upgate_webhook_deliveries_total{outcome="overflow"}`), for `webhook resend`.
"""
from __future__ import annotations

import asyncio
import logging
import time

import orjson
import redis.asyncio as aioredis

from upgate.billing import jalali
from upgate.store import connection as store, keyspace, lua_library
from upgate.webhooks import events

log = logging.getLogger("upgate")

SCAN_BATCH = 500  # accounts per index (shard) per tick
PARALLEL = 32  # accounts moved at once
OUTBOX_MAX = 1000  # lua/_lib.lua's OUTBOX_MAX: events an outbox keeps waiting
OVERFLOW_BATCH = 500  # overflowed events moved to the failed list per call
FAILED_MAX = 10_000  # failed deliveries kept for the operator (delivery.py and overflow alike)


class Outbox:
    def __init__(self, client, check_ms: int, poll_ms: int, clock=time.time, count=None):
        self.client = client
        self.count = count or (lambda outcome, n=1: None)  # metrics: (outcome, how many)
        self.check_ms = int(check_ms)
        self.poll_ms = int(poll_ms)
        self.clock = clock
        self.sharded = isinstance(client, aioredis.RedisCluster)
        self._take = store.script("outbox_take")
        self._sent = store.script("outbox_sent")
        self._done = store.script("outbox_done")
        self._overflow = store.script("outbox_overflow")
        self._failed = store.script("webhook_failed")
        self._scan = store.script("reap_scan")  # a generic per-node scan of per-slot indexes
        self._groups: list | None = None
        self._ticks = 0

    # ---- one tick
    async def move(self, now_ms: int | None = None) -> int:
        """Hand out the due accounts' oldest events into the stream; returns how many were added."""
        now_ms = int(self.clock() * 1000) if now_ms is None else now_ms
        accounts = await self._due(now_ms)
        added = 0
        for start in range(0, len(accounts), PARALLEL):
            added += sum(await asyncio.gather(*(self._take_one(a, now_ms) for a in accounts[start:start + PARALLEL])))
        return added

    async def _take_one(self, account_id: str, now_ms: int) -> int:
        res = await self._take(self.client, keyspace.outbox_keys(account_id, self.sharded),
                               (account_id, 0, self.check_ms))
        kind = int(res[0])
        if int(res[3]) > OUTBOX_MAX:
            await self.overflow(account_id)
        if kind == 1:
            await self.add(account_id, res[1])
            return 1
        if kind == 2:  # out for a while: is its entry still in the stream?
            entry = store.text(res[2])
            if not entry or not await self.client.xrange(keyspace.WEBHOOK_STREAM, entry, entry):
                log.warning("webhook event of account %s was out without a stream entry; adding it again",
                            account_id)
                await self.add(account_id, res[1])
                return 1
        return 0

    async def overflow(self, account_id: str) -> int:
        """Move the account's events beyond OUTBOX_MAX (oldest first, never the one out) to the
        failed list, reason `overflow`; returns how many. Recorded before they leave the outbox:
        a node dying in between duplicates a failed entry, never loses an event."""
        keys = keyspace.outbox_keys(account_id, self.sharded)[:2]
        moved = 0
        while True:
            res = await self._overflow(self.client, keys, ("peek", OUTBOX_MAX, OVERFLOW_BATCH))
            dropped, entries = int(res[0]), list(res[1:])
            if dropped:
                log.warning("webhooks: account %s lost %d events while no node delivered (webhooks off; "
                            "its outbox keeps %d)", account_id, dropped, OUTBOX_MAX * 10)
                self.count("dropped", dropped)
            if not entries:
                return moved
            now = jalali.utc_iso(self.clock())
            records = [orjson.dumps({"event": orjson.loads(events.body(events.split_entry(e)[1])),
                                     "reason": "overflow", "attempts": 0, "first_attempt_at": None,
                                     "last_attempt_at": now, "last_status": None,
                                     "last_error": f"the account's outbox held more than {OUTBOX_MAX} "
                                                   "undelivered events"}) for e in entries]
            lost = await self._failed(self.client, [keyspace.WEBHOOK_FAILED], (FAILED_MAX, *records))
            await self._overflow(self.client, keys, ("drop", dropped, *entries))
            moved += len(entries)
            log.warning("webhooks: account %s had over %d events waiting: %d moved to the failed list "
                        "(overflow; webhook resend sends them)", account_id, OUTBOX_MAX, len(entries))
            self.count("overflow", len(entries))
            if int(lost):
                log.warning("webhooks: the failed list is full (%d kept): its %d oldest entries were dropped",
                            FAILED_MAX, int(lost))
                self.count("dropped", int(lost))

    async def add(self, account_id: str, raw_entry) -> str:
        """Put one handed-out outbox entry into the stream (the body the receiver will get)."""
        event_id, doc = events.split_entry(raw_entry)
        entry = store.text(await self.client.xadd(keyspace.WEBHOOK_STREAM, {
            "account": account_id, "event": event_id, "body": events.body(doc)}))
        await self._sent(self.client, [keyspace.outbox_state(account_id)], (event_id, entry))
        return entry

    async def done(self, account_id: str, event_id: str) -> None:
        """The event's delivery is over: drop it and put the account's next event (if any) into
        the stream at once."""
        res = await self._done(self.client, keyspace.outbox_keys(account_id, self.sharded),
                               (account_id, event_id, 0, self.check_ms))
        if int(res[0]) == 1:
            await self.add(account_id, res[1])

    # ---- which accounts are due
    async def _due(self, now_ms: int) -> list[str]:
        if not self.sharded:
            return [store.text(a) for a in await self.client.zrangebyscore(
                keyspace.OUTBOX_INDEX, "-inf", now_ms, start=0, num=SCAN_BATCH)]
        # one node scans the 16384 shards per tick (one script call per cluster node)
        if not await self.client.set(keyspace.WEBHOOK_MOVE_LOCK, "1", nx=True, px=max(1, int(self.poll_ms * 0.9))):
            return []
        due: list[str] = []
        for node, tags in await self._node_groups():
            call = self._scan.command((), (now_ms, SCAN_BATCH, tags, *keyspace.OUTBOX_SHARD))
            try:
                flat = await lua_library.call(
                    self.client, lambda: self.client.execute_command(*call, target_nodes=node))
            except Exception:
                self._groups = None  # slots moved: regroup next tick
                raise
            due.extend(store.text(a) for a in flat[1::2])
        return due

    async def _node_groups(self) -> list[tuple[object, str]]:
        """(cluster node, comma-joined slot tags of the shards it owns); rebuilt every 100 ticks."""
        if self._groups is None or self._ticks % 100 == 0:
            self._groups = [(node, ",".join(keyspace.slot_tag(n) for n in slots))
                            for node, slots in await store.slots_by_node(self.client, keyspace.outbox_shard)]
        self._ticks += 1
        return self._groups
