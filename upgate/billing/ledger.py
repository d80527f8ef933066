"""The ledger: the Python face of the Lua scripts in ``lua/`` (admit, settle, release, renew,
reap, cooldown, rate_peek). Every check-and-reserve step is one script call, so it is atomic
across every gateway node; this module only builds key names and arguments, turns script
results into values or exceptions (in exactly one function: ``_admission``), and keeps the
node-local pieces: the cool-down map fed by pub/sub, the reaper loop and the settlement journal.

The hot path is two Redis commands: FCALL admit, FCALL settle (or release) (lua_library.py). A
cool-down strike or reset travels in the same round trip as settle/release (one pipeline; on a
cluster, the two calls are sent at once to their nodes), and
a reset is only sent when this node knows the model has strikes.

Works on ``redis.asyncio.Redis``, ``redis.asyncio.RedisCluster`` (every key of one call shares
the account's hash tag) and fakeredis' async client.
"""
from __future__ import annotations

import asyncio
import logging
import math
import secrets
import time
from dataclasses import dataclass

import redis.asyncio as aioredis

from upgate.billing import jalali, money, request_record
from upgate.store import connection as store, keyspace, lua_library
from upgate.billing.cooldowns import Cooldowns
from upgate.errors import GatewayError
from upgate.billing.journal import Journal
from upgate.billing.reaper import Reaper
from upgate.store.errors import STORE_ERRORS, store_unavailable  # noqa: F401  (imported from here)

log = logging.getLogger("upgate.billing.ledger")

FREE_TTL_MS = 2 * 86_400_000  # a day's free counter outlives its day (credit-back of late releases)
USAGE_TTL_MS = 400 * 86_400_000  # daily usage aggregates: reports span at most 366 days
SETTLE_RETRIES = 3  # attempts before a settlement goes to the journal
SETTLE_BACKOFF_S = (0.05, 0.2, 0.5)
UNDO_AFTER_S = (1.0, 4.0, 10.0, 20.0)  # when a lost admission's hold is looked for (see _undo)

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
                 svc: dict | None = None, message: str | None = None):
        super().__init__(code, message, retry_after=retry_after, svc=svc)
        self.rate = rate


def _ceil_s(ms: int) -> int:
    return -(-int(ms) // 1000)


class Ledger(Reaper, Journal, Cooldowns):
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
        self._rate_count = store.script("rate_count")
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
        # called with the account id when a settlement took it below its low-balance threshold
        # (settle.lua decides, once per crossing); the node's SMS alert (upgate/alerts/) sets it
        self.on_low_balance = None

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
        (wallet, streams, holds, _reqs, outbox, outbox_state, reap_index, outbox_index, _req_index,
         key_p, rpm_p, hold_p, free_p, _usage_p) = keyspace.hot_keys(account_id, self.sharded)
        keys = (wallet, key_p + key_id, rpm_p + key_id, streams, holds, hold_p + hold_id, free_p + day,
                reap_index, outbox, outbox_state, outbox_index)
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
            # room left, only not this request's hold: say that a smaller request fits now
            message = None if b >= a else (
                f"This key's monthly spending limit has {money.fmt(a - b)} toman left, less than this "
                f"request's hold of {money.fmt(c)} toman: a smaller max_tokens fits.")
            raise Rejected(name, rate=rate, retry_after=max(1, math.ceil(month_start - ts)), message=message,
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
        return (*request_record.pack(record, now_ms), request_record.acct_key(account_id), prefix, now_ms,
                keep_ms, s.request_log_max)

    async def settle(self, account_id: str, hold_id: str, *, key_id: str, model: str, cost_micro: int,
                     prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0,
                     cooldown_reset: str | None = None, record: dict | None = None) -> bool:
        """Charge the real cost and close the hold (lua/settle.lua), keeping the request's `record`
        (upgate/services/records.py) in the same step. False when the hold was already settled or released.
        Store failures are retried, then journaled (True: it will apply).
        `cached_tokens` (part of `prompt_tokens`) is counted in the day's usage aggregates."""
        cost_micro, prompt_tokens, completion_tokens = int(cost_micro), int(prompt_tokens), int(completion_tokens)
        if cost_micro < 0 or prompt_tokens < 0 or completion_tokens < 0:
            raise ValueError("cost and token counts must not be negative")
        money.check_range(cost_micro)
        cached_tokens = max(0, min(int(cached_tokens), prompt_tokens))
        names = keyspace.hot_keys(account_id, self.sharded)
        rec = self._record_args(account_id, record, prefix=names[keyspace.HOT_REQUEST_INDEX])
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
        if len(results[0]) > 3 and results[0][3] == 1 and self.on_low_balance is not None:
            self.on_low_balance(account_id)  # this charge crossed the threshold: once per crossing
        return int(results[0][0]) > 0

    def _settle_call(self, account_id, hold_id, model, cost_micro, prompt_tokens, completion_tokens,
                     cached_tokens=0, rec=None, names=None):
        (wallet, streams, holds, reqs, outbox, outbox_state, _reap, outbox_index, req_index,
         key_p, _rpm_p, hold_p, _free_p, usage_p) = names or keyspace.hot_keys(account_id, self.sharded)
        return (self._settle, (wallet, hold_p + hold_id, holds, streams, reqs, outbox, outbox_state, outbox_index),
                (hold_id, cost_micro, prompt_tokens, completion_tokens, model, key_p, usage_p, USAGE_TTL_MS,
                 cached_tokens, *(rec or self._record_args(account_id, None, prefix=req_index))))

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
        (wallet, streams, holds, reqs, _outbox, _outbox_state, _reap, _outbox_index, req_index,
         key_p, _rpm_p, hold_p, free_p, _usage_p) = keyspace.hot_keys(account_id, self.sharded)
        return (self._release, (wallet, hold_p + hold_id, holds, streams, reqs),
                (hold_id, 1 if credit_free else 0, key_p, free_p,
                 *self._record_args(account_id, record, prefix=req_index)))

    async def _run(self, calls: list) -> list:
        """Run script calls: one alone is one FCALL; several go in one round trip (a pipeline;
        on a cluster, concurrent calls to each slot's node). A "Function not found" reply
        (store restarted without persistence, or flushed) loads the library and runs the call
        again: a function not found did not run. A failed cool-down call is logged, never fails
        the settlement."""
        if len(calls) == 1:
            script, keys, args = calls[0]
            return [await script(self.client, keys, args)]
        if self.sharded:
            # the calls are in two slots, often on two nodes: sent at once, they travel in
            # parallel (one round-trip time), as a cluster pipeline would fan them out
            results = list(await asyncio.gather(*(s(self.client, k, a) for s, k, a in calls),
                                                return_exceptions=True))
        else:
            pipe = self.client.pipeline(transaction=False)
            for script, keys, args in calls:
                script.queue(pipe, keys, args)
            results = await pipe.execute(raise_on_error=False)
        for i, (script, keys, args) in enumerate(calls):
            res = results[i]
            if lua_library.not_found(res):
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

    # ---- a request counted in the rpm window without a hold (count_tokens)
    async def rate_count(self, account_id: str, key_id: str, member: str, now_ms: int | None = None) -> RateInfo:
        """Count one request in the key's rpm window (its X-RateLimit-* values), or raise the
        429 admit would give when the window is full."""
        status, limit, remaining, reset_ms, retry_ms = await self._rate_count(
            self.client, (keyspace.rpm(account_id, key_id), keyspace.key_record(account_id, key_id)),
            (member, now_ms or 0))
        rate = RateInfo(int(limit), int(remaining), _ceil_s(int(reset_ms)))
        if int(status):
            raise Rejected("rate_limit_exceeded", rate=rate, retry_after=max(1, _ceil_s(int(retry_ms))))
        return rate

    # ---- rate headers without counting
    async def rate_peek(self, account_id: str, key_id: str, now_ms: int | None = None) -> RateInfo:
        limit, remaining, reset_ms = await self._rate_peek(
            self.client, (keyspace.rpm(account_id, key_id), keyspace.key_record(account_id, key_id)),
            (now_ms or 0,))
        return RateInfo(int(limit), int(remaining), _ceil_s(int(reset_ms)))
