"""The ledger: the Python face of the Lua scripts in ``lua/`` (admit, settle, release, renew,
reap, cooldown, rate_peek). Every check-and-reserve step is one script call, so it is atomic
across every gateway node; this module only builds key names and arguments, turns script
results into values or exceptions (in exactly one function: ``_admission``), and keeps the
node-local pieces: the cool-down map fed by pub/sub, the reaper loop and the settlement journal.

The hot path is two Redis commands: EVALSHA admit, EVALSHA settle (or release). A cool-down
strike or reset travels in the same round trip as settle/release (one pipeline; on a cluster,
where redis-py refuses EVALSHA in pipelines, the two calls are sent at once to their nodes), and
a reset is only sent when this node knows the model has strikes.

Works on ``redis.asyncio.Redis``, ``redis.asyncio.RedisCluster`` (every key of one call shares
the account's hash tag) and fakeredis' async client.
"""
from __future__ import annotations

import asyncio
import glob
import logging
import math
import os
import secrets
import time
from dataclasses import dataclass

import orjson
import redis.asyncio as aioredis
import redis.exceptions as rexc

from upgate import jalali, keyspace, money, records, store
from upgate.background import stop_if_cancelled
from upgate.errors import GatewayError

log = logging.getLogger("upgate.ledger")

FREE_TTL_MS = 2 * 86_400_000  # a day's free counter outlives its day (credit-back of late releases)
REAPED_KEEP_MS = 7 * 86_400_000  # a reaped hold's record: a late settle can still charge it
USAGE_TTL_MS = 400 * 86_400_000  # daily usage aggregates: reports span at most 366 days
STRIKE_MEMORY_MS = 600_000  # a run of strikes is forgotten after 10 quiet minutes
REAP_BATCH = 500  # holds per reap.lua call
REAP_PARALLEL = 32  # reap.lua calls in flight at once
SETTLE_RETRIES = 3  # attempts before a settlement goes to the journal
SETTLE_BACKOFF_S = (0.05, 0.2, 0.5)
SHARD_CHUNK = 2048  # reaper index shards read per pipeline on a cluster
UNDO_AFTER_S = (1.0, 4.0, 10.0, 20.0)  # when a lost admission's hold is looked for (see _undo)

_STORE_DOWN = (rexc.ConnectionError, rexc.TimeoutError, rexc.ClusterDownError, OSError)
# Error replies that mean "the store takes no writes right now", not "this call is wrong": out
# of memory, a read-only replica (failover), a failed RDB save, a busy script, loading, a cluster
# resharding or without a master. Redis refuses a script at its first write, so nothing applied.
_REFUSING = frozenset(("OOM", "READONLY", "MISCONF", "BUSY", "LOADING", "TRYAGAIN", "CLUSTERDOWN",
                       "MASTERDOWN", "NOREPLICAS"))


# What a store call may raise: redis-py's errors, its RedisClusterException (not a RedisError:
# the whole cluster unreachable, among others) and the OS's. Catch these, then ask store_unavailable.
STORE_ERRORS = (rexc.RedisError, rexc.RedisClusterException, OSError)


def store_unavailable(exc: BaseException) -> bool:
    """True when `exc` means the store is unreachable or refusing writes for now (503, journal,
    retry later), False for an error that retrying would only repeat. A Redis Cluster counts as
    unreachable when no node answers (RedisClusterException) or when commands keep bouncing
    between nodes (ClusterError: a resharding or failover in progress)."""
    if isinstance(exc, (*_STORE_DOWN, rexc.OutOfMemoryError, rexc.ReadOnlyError, rexc.TryAgainError,
                        rexc.ClusterError)):
        return True
    if store.cluster_unreachable(exc):
        return True
    return isinstance(exc, rexc.ResponseError) and str(exc).split(" ", 1)[0] in _REFUSING

# admit.lua's return codes → the spec's error codes (code 0 = admitted)
_ADMIT_CODES = {
    1: "invalid_api_key",
    2: "account_suspended",
    3: "rate_limit_exceeded",
    4: "too_many_concurrent_streams",
    5: "free_quota_exceeded",
    6: "key_monthly_limit_reached",
    7: "insufficient_balance",
}


@dataclass(frozen=True)
class RateInfo:
    """X-RateLimit-Limit / -Remaining / -Reset (Unix seconds at which the window is clear)."""

    limit: int
    remaining: int
    reset_s: int


@dataclass(frozen=True)
class Admission:
    hold_id: str
    hold_micro: int
    rate: RateInfo


class SettlementNotRecorded(GatewayError):
    """A settlement reached neither the store (unreachable) nor the journal (not writable: disk
    full, permissions). The charge exists only in the error log, which names the hold, account
    and amounts. The client gets 503 service_unavailable when nothing was sent yet; the hold stays
    open in the store until the reaper releases it."""

    def __init__(self, hold_id: str):
        super().__init__("service_unavailable")
        self.hold_id = hold_id


class Rejected(GatewayError):
    """admit.lua refused the request. ``rate`` carries the X-RateLimit-* values (None when the
    key or account itself was refused, before any window was read); ``retry_after`` and ``svc``
    are set per the spec."""

    def __init__(self, code: str, *, rate: RateInfo | None = None, retry_after: int | None = None,
                 svc: dict | None = None):
        super().__init__(code, retry_after=retry_after, svc=svc)
        self.rate = rate


def _ceil_s(ms: int) -> int:
    return -(-int(ms) // 1000)


class Ledger:
    def __init__(self, client, settings, *, clock=None, follow_store_clock: bool | None = None):
        """client: a redis.asyncio client (single, cluster or fakeredis); settings: Settings.
        clock: () → Unix seconds, for the Jalali month and Tehran day keys (tests inject it).
        follow_store_clock: correct `clock` by the store's (default: unless a clock is injected)."""
        self.client = client
        self.settings = settings
        self.clock = clock or time.time
        # Redis TIME − this node's clock, seconds, learned from every admission (its lease deadline
        # is Redis TIME + lease): the day and month keys then follow the store's clock, so nodes
        # with skewed clocks still agree on which Tehran day and Jalali month a request falls in,
        # without an extra round trip. Off by the reply's latency (ms), not by the node's skew.
        self.store_skew_s = 0.0
        self._follow_store = clock is None if follow_store_clock is None else follow_store_clock
        self.sharded = isinstance(client, aioredis.RedisCluster)
        if self.sharded:
            keyspace.slot_tag(0)  # build the slot → shard-tag table now (~0.1 s), not mid-request
        self.lease_ms = int(settings.lease_s * 1000)
        self.cooldown_ms = int(settings.cooldown_s * 1000)
        self._admit = store.script("admit")
        self._settle = store.script("settle")
        self._release = store.script("release")
        self._renew = store.script("renew")
        self._reap = store.script("reap")
        self._cooldown = store.script("cooldown")
        self._rate_peek = store.script("rate_peek")
        self._reap_scan = store.script("reap_scan")
        self._shard_groups: list | None = None
        self._sweeps = 0
        self._cal = (0.0, -1.0, "", "", 0.0)  # (day start, next day start, day, month, next month start)
        self._strikes: dict[str, int] = {}  # model → consecutive strikes this node knows of
        self._cold: dict[str, float] = {}  # model → monotonic deadline
        self.journaled = 0  # settlements written to the journal by this process
        self._replay_pending = True  # look for journal files left by an earlier process
        self.replayed = 0
        self._undos: set[asyncio.Task] = set()  # lost admissions being looked for

    # ---- calendar keys (Tehran day, Jalali month), cached for the Tehran day: from its exact
    # first instant to the next day's (a rounded "seconds to midnight" would outlive the day)
    def _calendar(self, ts: float) -> tuple[str, str]:
        start, end, day, month, _ = self._cal
        if not start <= ts < end:
            start, end = jalali.tehran_day_bounds(ts)
            day, month = jalali.day_key(ts), jalali.month_key(ts)
            self._cal = (start, end, day, month, jalali.next_month_start(ts))
        return day, month

    def now(self) -> float:
        """Unix seconds by the store's clock, as far as this node knows it (see store_skew_s)."""
        return self.clock() + self.store_skew_s

    # ---- admit
    async def admit(self, *, account_id: str, key_id: str, model: str, hold_micro: int, stream: bool,
                    free: bool, alternative: dict | None = None, now_ms: int | None = None,
                    request_id: str | None = None) -> Admission:
        """One atomic check-and-reserve (see lua/admit.lua). Raises Rejected with the spec's code.
        `request_id` goes on the hold, so a reaped hold still leaves a request record."""
        hold_micro = 0 if free else int(hold_micro)
        if hold_micro < 0:
            raise ValueError("hold_micro must not be negative")
        money.check_range(hold_micro)
        ts = self.now() if now_ms is None else now_ms / 1000
        day, month = self._calendar(ts)
        hold_id = secrets.token_hex(8)
        n = keyspace.hot_keys(account_id, self.sharded)
        keys = (n[0], n[9] + key_id, n[10] + key_id, n[1], n[2], n[11] + hold_id, n[12] + day, n[6], n[4],
                n[5], n[7])
        args = (hold_id, hold_micro, 1 if stream else 0, 1 if free else 0, month, day, self.lease_ms,
                self.settings.max_streams, self.settings.free_quota_default, FREE_TTL_MS, account_id,
                key_id, now_ms or 0, request_id or "", model)
        try:
            res = await self._admit(self.client, keys, args)
        except STORE_ERRORS as e:
            if store_unavailable(e):  # no answer: the script may still run when the store recovers
                task = asyncio.ensure_future(self._undo(account_id, hold_id, free))
                self._undos.add(task)
                task.add_done_callback(self._undos.discard)
            raise
        if now_ms is None and self._follow_store and int(res[0]) == 0:
            self.store_skew_s = (int(res[6]) - self.lease_ms) / 1000 - self.clock()  # Redis TIME + lease
        return self._admission(res, hold_id, alternative, ts)

    def _admission(self, res, hold_id: str, alternative: dict | None, ts: float) -> Admission:
        """THE one place where admit.lua's return codes become values or exceptions. `ts`: the
        Unix time whose Jalali month the monthly limit was read for."""
        code, limit, remaining, reset_ms, retry_ms, a, b, c = (int(x) for x in res)
        rate = RateInfo(limit, remaining, _ceil_s(reset_ms)) if limit else None
        if code == 0:
            return Admission(hold_id, a, rate)
        name = _ADMIT_CODES.get(code)
        if name is None:
            raise RuntimeError(f"admit.lua returned an unknown code {code}")
        if name == "rate_limit_exceeded":
            raise Rejected(name, rate=rate, retry_after=max(1, _ceil_s(retry_ms)))
        if name == "too_many_concurrent_streams":
            raise Rejected(name, rate=rate, retry_after=max(1, _ceil_s(retry_ms)))
        if name == "free_quota_exceeded":
            raise Rejected(name, rate=rate, retry_after=max(1, _ceil_s(retry_ms)),
                           svc=dict(alternative) if alternative else None)
        if name == "key_monthly_limit_reached":  # the limit starts again with the next Jalali month
            month_start = self._cal[4] if self._cal[0] <= ts < self._cal[1] else jalali.next_month_start(ts)
            raise Rejected(name, rate=rate, retry_after=max(1, math.ceil(month_start - ts)),
                           svc={"monthly_limit_toman": money.fmt(a), "spent_toman": money.fmt(b)})
        if name == "insufficient_balance":
            raise Rejected(name, rate=rate, svc={
                "balance_toman": money.fmt(a), "available_toman": money.fmt(a - b),
                "required_toman": money.fmt(c), "topup_url": self.settings.topup_url})
        raise Rejected(name, rate=rate)  # invalid_api_key, account_suspended

    async def _undo(self, account_id: str, hold_id: str, free: bool) -> None:
        """An admission whose answer never came (the store stalled past its timeout) may still
        run once the store recovers: a hold, a stream slot and, for `:free`, a unit of the day's
        quota, behind a 503 that told the client nothing was charged. Release it when it shows
        up: the reaper would too, but only after the lease, and crediting nothing back."""
        call = self._release_call(account_id, hold_id, free)
        for delay in UNDO_AFTER_S:
            await asyncio.sleep(delay)
            try:
                if int((await self._run([call]))[0][0]) > 0:
                    log.info("released hold %s of an admission whose answer was lost", hold_id)
                    return
            except STORE_ERRORS:
                continue  # still unreachable: look again later

    # ---- settle / release
    def _record_args(self, account_id: str, record: dict | None, now_ms: int | None = None,
                     prefix: str | None = None) -> tuple:
        """settle.lua's / release.lua's record arguments (see keep_record in lua/_lib.lua).
        `prefix`: the request index prefix, when the caller has it (keyspace.hot_keys)."""
        s = self.settings
        keep_ms = s.request_log_days * 86_400_000
        if prefix is None:
            prefix = keyspace.request_index_prefix(account_id, self.sharded)
        if not record:
            return ("", "", account_id, prefix, 0, keep_ms, s.request_log_max)
        now_ms = int(now_ms or self.now() * 1000)
        return (records.encode(record, now_ms), record["request_id"], account_id, prefix, now_ms,
                keep_ms, s.request_log_max)

    async def settle(self, account_id: str, hold_id: str, *, key_id: str, model: str, cost_micro: int,
                     prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0,
                     cooldown_reset: str | None = None, record: dict | None = None) -> bool:
        """Charge the real cost and close the hold (lua/settle.lua), keeping the request's `record`
        (upgate/records.py) in the same step. False when the hold was already settled or released.
        Store failures are retried, then journaled (True: it will apply).
        `cached_tokens` (part of `prompt_tokens`) is counted in the day's usage aggregates."""
        cost_micro, prompt_tokens, completion_tokens = int(cost_micro), int(prompt_tokens), int(completion_tokens)
        if cost_micro < 0 or prompt_tokens < 0 or completion_tokens < 0:
            raise ValueError("cost and token counts must not be negative")
        money.check_range(cost_micro)
        cached_tokens = max(0, min(int(cached_tokens), prompt_tokens))
        names = keyspace.hot_keys(account_id, self.sharded)
        rec = self._record_args(account_id, record, prefix=names[8])
        calls = [self._settle_call(account_id, hold_id, model, cost_micro, prompt_tokens, completion_tokens,
                                   cached_tokens, rec, names)]
        if cooldown_reset and self._strikes.get(cooldown_reset):
            calls.append(self._cooldown_call("reset", cooldown_reset))
        for attempt in range(SETTLE_RETRIES):
            try:
                results = await self._run(calls)
                break
            except STORE_ERRORS as e:
                if not store_unavailable(e):
                    raise
                if attempt + 1 < SETTLE_RETRIES:
                    await asyncio.sleep(SETTLE_BACKOFF_S[attempt])
                    continue
                log.warning("settlement of hold %s failed (%s); journaled for replay", hold_id, type(e).__name__)
                try:
                    entry = {"a": account_id, "h": hold_id, "k": key_id, "m": model,
                             "c": cost_micro, "p": prompt_tokens, "q": completion_tokens, "t": int(time.time())}
                    if cached_tokens:
                        entry["x"] = cached_tokens  # cached prompt tokens, for the usage report
                    if record:  # the request record, with the time it was made
                        entry.update(r=record, rt=rec[4])
                    await self._journal(entry)
                except OSError as j:
                    log.error("settlement of hold %s (account %s) NOT recorded: the store is unreachable "
                              "and the journal could not be written (%s: %s); charge %d micro-toman "
                              "(%d prompt + %d completion tokens) by hand", hold_id, account_id,
                              type(j).__name__, j.strerror or j, cost_micro, prompt_tokens, completion_tokens)
                    raise SettlementNotRecorded(hold_id) from j
                return True
        if len(results) > 1:
            self._cooldown_result(cooldown_reset, results[1])
        return int(results[0][0]) > 0

    def _settle_call(self, account_id, hold_id, model, cost_micro, prompt_tokens, completion_tokens,
                     cached_tokens=0, rec=None, names=None):
        n = names or keyspace.hot_keys(account_id, self.sharded)
        return (self._settle, (n[0], n[11] + hold_id, n[2], n[1], n[3], n[4], n[5], n[7]),
                (hold_id, cost_micro, prompt_tokens, completion_tokens, model, n[9], n[13], USAGE_TTL_MS,
                 cached_tokens, *(rec or self._record_args(account_id, None, prefix=n[8]))))

    async def release(self, account_id: str, hold_id: str, *, credit_free: bool = False,
                      strike: str | None = None, record: dict | None = None) -> bool:
        """Charge nothing and close the hold (lua/release.lua), keeping the request's `record`;
        optionally credit a `:free` request back and strike `strike` toward cool-down in the same
        round trip. False when the hold was already closed. A store failure is logged: the reaper
        releases the hold when its lease lapses (and no record is kept)."""
        calls = [self._release_call(account_id, hold_id, credit_free, record)]
        if strike:
            calls.append(self._cooldown_call("strike", strike))
        try:
            results = await self._run(calls)
        except STORE_ERRORS as e:
            if not store_unavailable(e):
                raise
            log.warning("release of hold %s failed (%s); the reaper frees it when its lease lapses",
                        hold_id, type(e).__name__)
            return False
        if strike:
            self._cooldown_result(strike, results[1])
        return int(results[0][0]) > 0

    def _release_call(self, account_id: str, hold_id: str, credit_free: bool, record: dict | None = None):
        n = keyspace.hot_keys(account_id, self.sharded)
        return (self._release, (n[0], n[11] + hold_id, n[2], n[1], n[3]),
                (hold_id, 1 if credit_free else 0, n[9], n[12],
                 *self._record_args(account_id, record, prefix=n[8])))

    async def _run(self, calls: list) -> list:
        """Run script calls: one alone is one EVALSHA; several go in one round trip (a pipeline;
        on a cluster, concurrent calls to each slot's node). A NOSCRIPT reply
        (store restarted or flushed) loads that script and runs the call again: NOSCRIPT means
        it did not run. A failed cool-down call is logged, never fails the settlement."""
        if len(calls) == 1:
            script, keys, args = calls[0]
            return [await script(self.client, keys, args)]
        if self.sharded:
            # redis-py refuses EVALSHA in a cluster pipeline; sent at once, the calls still
            # travel in parallel (one round-trip time), as a cluster pipeline would fan out
            results = list(await asyncio.gather(*(s(self.client, k, a) for s, k, a in calls),
                                                return_exceptions=True))
        else:
            pipe = self.client.pipeline(transaction=False)
            for script, keys, args in calls:
                script.queue(pipe, keys, args)
            results = await pipe.execute(raise_on_error=False)
        for i, (script, keys, args) in enumerate(calls):
            res = results[i]
            if isinstance(res, rexc.NoScriptError) or (isinstance(res, rexc.ResponseError) and "NOSCRIPT" in str(res)):
                results[i] = res = await script(self.client, keys, args)
            if isinstance(res, Exception):
                if i == 0:
                    raise res
                log.warning("cool-down update failed: %s", res)
                results[i] = None
        return results

    # ---- leases
    async def renew(self, account_id: str, hold_ids: list[str], now_ms: int | None = None) -> list[str]:
        """Extend the leases of this node's live holds of one account (one script call). Returns
        the hold ids that were NOT renewed: no longer open, typically reaped after a stall longer
        than the lease. Such a request has no money on hold and no stream slot any more (a
        settle still charges it); the caller decides what to do with it."""
        if not hold_ids:
            return []
        lost = [store.text(h) for h in await self._renew(
            self.client, (keyspace.holds(account_id), keyspace.streams(account_id)),
            (self.lease_ms, now_ms or 0, keyspace.hold(account_id, ""), *hold_ids))]
        for hold_id in lost:
            log.warning("lease of hold %s (account %s) lost: it was no longer open when renewed "
                        "(reaped after a stall longer than the lease?)", hold_id, account_id)
        return lost

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
        except rexc.ResponseError as e:  # Redis < 7 (no script flags), or slots moved
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
            args = ("EVALSHA", script.sha, 0, now_ms, REAP_BATCH, tags, *keyspace.REAP_SHARD)
            try:
                return shards, await self.client.execute_command(*args, target_nodes=node)
            except rexc.NoScriptError:
                await self.client.script_load(script.source)
                return shards, await self.client.execute_command(*args, target_nodes=node)

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

    # ---- the settlement journal: settlements the store did not take, replayed when it answers
    async def _journal(self, entry: dict) -> None:
        line = orjson.dumps(entry) + b"\n"
        await asyncio.to_thread(_append_line, self.settings.journal_path, line)
        self.journaled += 1

    async def replay_journal(self) -> int:
        """Re-apply journaled settlements (idempotent by hold id); returns how many the store
        took (applied now, or found already applied). Lines it cannot take while unreachable go
        back into the journal. A line it refuses outright (never expected) is logged as an error and
        moved to `<journal>.failed` for the operator.

        An unknown hold (settle.lua code 0) means the charge was applied already: a hold that was
        never settled keeps its record, open or reaped, for REAPED_KEEP_MS. A line older than that
        cannot be told apart from a lost record, so it goes to `<journal>.failed` with an error.
        (No per-request "settled" marker is kept: at full rate that would be millions of keys.)"""
        path = self.settings.journal_path
        exists = os.path.exists(path)
        if not exists and not self._replay_pending:
            return 0
        if exists:
            await asyncio.to_thread(_take_journal, path)
        done = 0
        self._replay_pending = False
        for taken in sorted(glob.glob(glob.escape(path) + ".replay.*")):
            try:
                with open(taken, "rb") as f:
                    lines = f.read().splitlines()
            except FileNotFoundError:  # another process of this node replayed it
                continue
            left: list[bytes] = []
            for raw in lines:
                if left:  # the store went away part-way: keep the rest for the next tick
                    left.append(raw)
                    continue
                try:
                    e = orjson.loads(raw)
                    rec = self._record_args(e["a"], e.get("r"), e.get("rt"))
                    call = self._settle_call(e["a"], e["h"], e["m"], int(e["c"]), int(e["p"]), int(e["q"]),
                                             int(e.get("x", 0)), rec)
                except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                    log.error("journal: unreadable line skipped (%d bytes)", len(raw))
                    continue
                try:
                    code = int((await self._run([call]))[0][0])
                except STORE_ERRORS as err:
                    if store_unavailable(err):
                        left.append(raw)
                        continue
                    log.error("journal: settlement of hold %s refused (%s); kept in %s.failed",
                              e["h"], err, path)
                    await asyncio.to_thread(_append_line, path + ".failed", raw + b"\n")
                    continue
                if code == 0 and time.time() - int(e.get("t", 0)) > REAPED_KEEP_MS / 1000:
                    log.error("journal: hold %s (account %s) is older than the store keeps hold records: "
                              "cannot tell whether its %d micro-toman were charged; check and charge it "
                              "by hand (line kept in %s.failed)", e["h"], e["a"], int(e["c"]), path)
                    await asyncio.to_thread(_append_line, path + ".failed", raw + b"\n")
                    continue
                done += 1
            if left:
                await asyncio.to_thread(_append_line, path, b"\n".join(left) + b"\n")
            try:
                os.unlink(taken)
            except FileNotFoundError:
                pass
            if left:
                break
        self.replayed += done
        if done:
            log.warning("journal: %d settlements replayed", done)
        return done

    # ---- rate headers without counting
    async def rate_peek(self, account_id: str, key_id: str, now_ms: int | None = None) -> RateInfo:
        limit, remaining, reset_ms = await self._rate_peek(
            self.client, (keyspace.rpm(account_id, key_id), keyspace.key_record(account_id, key_id)),
            (now_ms or 0,))
        return RateInfo(int(limit), int(remaining), _ceil_s(int(reset_ms)))

    # ---- cool-down
    def _cooldown_call(self, op: str, model: str, now_ms: int | None = None):
        return (self._cooldown, (keyspace.cooldown(model),),
                (op, model, self.settings.cooldown_strikes, self.cooldown_ms, keyspace.CHANNEL, now_ms or 0,
                 STRIKE_MEMORY_MS))

    def _cooldown_result(self, model: str, res) -> int | None:
        """Apply a cooldown.lua answer to the local map at once (the pub/sub echo follows)."""
        if res is None:
            return None
        strikes, until_ms, now_ms, made_cold = (int(x) for x in res)
        self._apply_cooldown(model, strikes, until_ms, now_ms)
        return until_ms if made_cold else None

    async def cooldown_strike(self, model: str, now_ms: int | None = None) -> int | None:
        """One upstream_rate_limited for `model`; returns until_ms (Redis clock) when this strike
        made the model cold, else None."""
        script, keys, args = self._cooldown_call("strike", model, now_ms)
        return self._cooldown_result(model, await script(self.client, keys, args))

    async def cooldown_reset(self, model: str) -> None:
        script, keys, args = self._cooldown_call("reset", model)
        self._cooldown_result(model, await script(self.client, keys, args))

    def _apply_cooldown(self, model: str, strikes: int, until_ms: int, now_ms: int) -> None:
        if strikes > 0:
            self._strikes[model] = strikes
        else:
            self._strikes.pop(model, None)
        if until_ms > now_ms:
            self._cold[model] = time.monotonic() + (until_ms - now_ms) / 1000
        elif until_ms == 0:
            self._cold.pop(model, None)

    def on_event(self, message: dict) -> None:
        """A pub/sub message from keyspace.CHANNEL (already JSON-decoded); others are ignored."""
        if not isinstance(message, dict) or message.get("t") != "cooldown":
            return
        model = message.get("model")
        try:
            strikes, until_ms, now_ms = (int(message.get(f, 0)) for f in ("strikes", "until_ms", "now_ms"))
        except (TypeError, ValueError):
            return
        if isinstance(model, str):
            self._apply_cooldown(model, strikes, until_ms, now_ms)

    def cold_until(self, model: str) -> float | None:
        """Seconds this model stays cold, or None when it is not cold (no I/O)."""
        deadline = self._cold.get(model)
        if deadline is None:
            return None
        left = deadline - time.monotonic()
        if left <= 0:
            self._cold.pop(model, None)
            return None
        return left

    def strikes(self, model: str) -> int:
        return self._strikes.get(model, 0)

    async def reload_cooldowns(self) -> None:
        """After a (re)subscription: rebuild the strike and cold maps from the store."""
        keys: list[str] = []
        async for k in self.client.scan_iter(match="{m:*}:cooldown", count=1000):
            keys.append(store.text(k))
        strikes: dict[str, int] = {}
        cold: dict[str, float] = {}
        if keys:
            now_s, now_us = await self.client.time()
            now_ms = int(now_s) * 1000 + int(now_us) // 1000
            pipe = self.client.pipeline(transaction=False)
            for k in keys:
                pipe.hmget(k, "strikes", "until_ms")
            mono = time.monotonic()
            for k, (s, u) in zip(keys, await pipe.execute()):
                model = k[len("{m:"):-len("}:cooldown")]
                if s is not None and int(s) > 0:
                    strikes[model] = int(s)
                if u is not None and int(u) > now_ms:
                    cold[model] = mono + (int(u) - now_ms) / 1000
        self._strikes, self._cold = strikes, cold


def _append_line(path: str, data: bytes) -> None:
    """Append under an exclusive lock, to the file still at `path` (a replay may have just
    moved it aside), and fsync: a journaled charge must survive this process."""
    import fcntl

    while True:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                same = os.fstat(fd).st_ino == os.stat(path).st_ino
            except FileNotFoundError:
                same = False
            if not same:
                continue
            os.write(fd, data)
            os.fsync(fd)
            return
        finally:
            os.close(fd)


def _take_journal(path: str) -> None:
    """Move the journal aside (under its lock) so appends go to a fresh file while it replays."""
    import fcntl

    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            if os.fstat(fd).st_ino == os.stat(path).st_ino:
                os.rename(path, f"{path}.replay.{time.time_ns()}.{os.getpid()}")
        except FileNotFoundError:
            pass
    finally:
        os.close(fd)
