"""The Ledger's reaper (a mixin of upgate.billing.ledger.Ledger): holds whose node stopped renewing
them (it died, or stalled past the lease) are released, charging nothing, by lua/reap.lua. Every
node runs it; on one Redis the due accounts come from one index, on a Cluster from one shard
per hash slot, read with one lua/reap_scan.lua call per node.
"""
from __future__ import annotations

import asyncio
import logging

import redis.exceptions as rexc

from upgate.store import connection as store, keyspace, lua_library
from upgate.store.background import stop_if_cancelled
from upgate.store.errors import store_unavailable

log = logging.getLogger("upgate.billing.ledger")

REAPED_KEEP_MS = 7 * 86_400_000  # a reaped hold's record: a late settle can still charge it
REAP_BATCH = 500  # holds per reap.lua call
REAP_PARALLEL = 32  # reap.lua calls in flight at once
SHARD_CHUNK = 2048  # reaper index shards read per pipeline on a cluster


class Reaper:
    """Uses the Ledger's client, clock, sharded flag, scripts and _record_args."""

    async def reap(self, now_ms: int | None = None) -> int:
        """Release every expired hold and stream slot of every account, charging nothing; returns
        how many holds were released. Safe to run at the same time on every node."""
        scan_ms = now_ms if now_ms is not None else int(self.clock() * 1000)
        due = await self._due_accounts(scan_ms)
        total = 0
        for start in range(0, len(due), REAP_PARALLEL):
            counts = await asyncio.gather(*(self._reap_account(account_id, index, now_ms or 0)
                                            for account_id, index in due[start:start + REAP_PARALLEL]))
            total += sum(counts)
        return total

    async def _due_accounts(self, now_ms: int) -> list[tuple[str, str]]:
        """(account id, its index key) of every account with a hold due at now_ms."""
        if not self.sharded:
            members = await self.client.zrangebyscore(keyspace.REAP_INDEX, "-inf", now_ms)
            return [(store.text(m), keyspace.REAP_INDEX) for m in members]
        try:
            return await self._scan_shards(now_ms)
        except rexc.ResponseError as e:  # slots moved
            log.warning("reaper: per-node shard scan refused (%s); reading shards one by one", e)
            self._shard_groups = None
            return await self._read_shards(now_ms)

    async def _groups(self) -> list[tuple[object, list[str], str]]:
        """The reaper's index shards grouped by the cluster node that owns their slot (cached;
        rebuilt every 100 sweeps and after any refusal, so resharding is followed)."""
        if self._shard_groups is None or self._sweeps % 100 == 0:
            self._shard_groups = [(node, [keyspace.reap_shard(n) for n in slots],
                                   ",".join(keyspace.slot_tag(n) for n in slots))
                                  for node, slots in await store.slots_by_node(self.client, keyspace.reap_shard)]
        self._sweeps += 1
        return self._shard_groups

    async def _scan_shards(self, now_ms: int) -> list[tuple[str, str]]:
        """One reap_scan.lua call per cluster node (instead of 16384 commands)."""
        script = self._reap_scan

        async def scan(node, shards, tags):
            call = script.command((), (now_ms, REAP_BATCH, tags, *keyspace.REAP_SHARD))
            return shards, await lua_library.call(
                self.client, lambda: self.client.execute_command(*call, target_nodes=node))

        due: list[tuple[str, str]] = []
        for shards, flat in await asyncio.gather(*(scan(*group) for group in await self._groups())):
            for pos, account in zip(flat[::2], flat[1::2]):
                due.append((store.text(account), shards[int(pos) - 1]))
        return due

    async def _read_shards(self, now_ms: int) -> list[tuple[str, str]]:
        """The slow way: every shard read by its own command (pipelined in chunks)."""
        due: list[tuple[str, str]] = []
        for start in range(0, keyspace.SLOTS, SHARD_CHUNK):
            shards = [keyspace.reap_shard(s) for s in range(start, min(start + SHARD_CHUNK, keyspace.SLOTS))]
            pipe = self.client.pipeline(transaction=False)
            for shard in shards:
                pipe.zrangebyscore(shard, "-inf", now_ms)
            for shard, members in zip(shards, await pipe.execute()):
                due.extend((store.text(m), shard) for m in members)
        return due

    async def _reap_account(self, account_id: str, index: str, now_ms: int) -> int:
        t = keyspace.tag(account_id)
        keys = (t + ":wallet", keyspace.holds(account_id), keyspace.streams(account_id), index,
                keyspace.requests(account_id))
        _, _, _, prefix, _, keep_ms, most = self._record_args(account_id, None)
        args = (account_id, now_ms, keyspace.hold(account_id, ""), keyspace.key_record(account_id, ""),
                REAPED_KEEP_MS, REAP_BATCH, prefix, keep_ms, most)
        total = 0
        while True:
            released, _next = await self._reap(self.client, keys, args)
            total += int(released)
            if int(released) < REAP_BATCH:
                return total

    async def run_reaper(self, interval_s: float, on_reaped=None) -> None:
        """Every node runs this: replay the journal, then reap, every `interval_s`. On a cluster the
        sweep over the index shards is done by one node per tick (a short lock); reaping itself
        is idempotent, so two sweeps at once would only cost time. `on_reaped(n)` hears of every
        sweep that released holds (metrics)."""
        lock_ms = max(1, int(interval_s * 1000 * 0.9))
        while True:
            try:
                await self.replay_journal()
                if not self.sharded or await self.client.set(keyspace.REAP_LOCK, "1", nx=True, px=lock_ms):
                    n = await self.reap()
                    if n:
                        log.warning("reaper released %d expired holds (a node stopped renewing them)", n)
                        if on_reaped is not None:
                            on_reaped(n)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # keep the loop alive whatever happens; this is the backstop
                if store_unavailable(e):
                    log.warning("reaper: store unreachable (%s)", type(e).__name__)
                else:
                    log.exception("reaper tick failed")
            await asyncio.sleep(interval_s)
            stop_if_cancelled()
