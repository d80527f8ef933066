"""Accounts: the wallet record and the operator's account operations on the store. The checks
on operator input, the errors, the API's account object and the runtime view the gateway's auth
cache keeps (``AccountInfo``) are the pure upgate/services/account_rules.py, whose names this module also
offers.

The wallet hash ``keyspace.wallet(acct)`` holds ``phone``, ``balance`` (integer micro-toman,
may go negative after a settle above its hold), ``held`` (micro-toman of open holds, kept by the
billing scripts; created here as 0), ``credited`` and ``charged`` (lifetime Σ transactions and Σ
charges, kept by lua/credit.lua and lua/settle.lua: balance == credited − charged; see
upgate/services/transactions.py), ``suspended`` ("0"/"1"), ``free_quota`` (requests per
Tehran day; absent = the deployment default) and ``created_at`` (unix seconds), ``low_balance`` (micro-toman; absent = no low-balance alert:
the webhooks read it). Every account id
(a UUID4 string) is also in the set ``keyspace.ACCOUNTS``.

Every operation here validates first and writes after, so refused input writes nothing; writes
that touch several keys go through ``atomic_write`` (one MULTI/EXEC). A change that affects
authentication (suspend, resume, free quota) publishes ``{"t": "account", "id": acct}`` on
``keyspace.CHANNEL`` so every gateway node drops its cached entry at once.

Sync (``redis.Redis`` or ``redis.RedisCluster``) clients only: this is the operator's side.
"""
from __future__ import annotations

import time
import uuid
from typing import Callable, Iterable

import orjson
import redis

from upgate.billing import jalali, money
from upgate.store import connection as store, keyspace
from upgate.services import phone_index
from upgate.services.account_rules import (  # noqa: F401  (the rules are part of this module's API)
    account_object, AccountError, AccountInfo, BalanceOutOfRange, check_free_quota, check_low_balance,
    check_phone, check_reason, InvalidAmount, InvalidReason, MAX_REASON, InvalidCursor, InvalidPhone, InvalidQuota, mask_phone,
    MAX_FREE_QUOTA, normalize_id, parse_amount, parse_free_quota, parse_low_balance, PHONE, PhoneInUse,
    UnknownAccount,
)

# ---- writes -----------------------------------------------------------------------------------

Step = Callable[[object], None]


def is_cluster(client) -> bool:
    return isinstance(client, redis.RedisCluster)


def atomic_write(client, steps: Iterable[Step], event: dict | None = None) -> None:
    """Apply `steps` (each queues commands on a pipeline; the commands of one step share one
    hash tag) as one MULTI/EXEC, then the pub/sub event.

    On one Redis server every step and the PUBLISH go into a single transaction: all or
    nothing. On a Redis Cluster a transaction cannot span slots, so each step is its own
    transaction, in the order given; callers order their steps so that an interruption
    between two of them leaves nothing usable behind (a key goes live last, dies first)."""
    steps = list(steps)
    payload = orjson.dumps(event) if event is not None else None
    if is_cluster(client):
        for step in steps:
            pipe = client.pipeline(transaction=True)
            step(pipe)
            pipe.execute()
        if payload is not None:
            client.publish(keyspace.CHANNEL, payload)
        return
    pipe = client.pipeline(transaction=True)
    for step in steps:
        step(pipe)
    if payload is not None:
        pipe.publish(keyspace.CHANNEL, payload)
    pipe.execute()


def _require(client, account_id: str) -> str:
    acct = normalize_id(account_id)
    if not client.exists(keyspace.wallet(acct)):
        raise UnknownAccount(f"unknown account {acct}")
    return acct


def require_account(client, account_id: str) -> str:
    """The canonical id of an existing account, or `UnknownAccount`."""
    return _require(client, account_id)


def create_account(client, phone: str, balance_micro: int = 0, *, actor: str = "cli") -> str:
    """Create an account with its wallet and its `opening` transaction (the opening balance,
    possibly 0); returns the new account id (UUID4 string).

    The wallet starts at balance 0 with both lifetime counters at 0, then lua/credit.lua records
    the opening balance (idempotent: an account with a transaction never gets a second opening),
    then the account is listed. Interrupted between steps, it is an unlisted account at 0.
    The phone (canonical E.164) is claimed first in the index phone → account
    (services/phone_index.py): a phone already in use is `PhoneInUse`, nothing written."""
    from upgate.services import transactions

    phone = check_phone(phone)
    if isinstance(balance_micro, bool) or not isinstance(balance_micro, int):
        raise InvalidAmount("the opening balance must be an integer of micro-toman", reason="amount_malformed")
    if balance_micro < 0:
        raise InvalidAmount("the opening balance must not be negative (use adjust afterwards)", reason="amount_negative")
    try:
        money.check_range(balance_micro)
    except money.AmountError as e:
        raise BalanceOutOfRange(str(e)) from None
    acct = str(uuid.uuid4())
    phone_index.claim(client, phone, acct)  # first: a phone in use refuses before any write
    record = {"phone": phone, "balance": 0, "held": 0, "credited": 0, "charged": 0,
              "suspended": "0", "created_at": int(time.time())}
    atomic_write(client, [lambda p: p.hset(keyspace.wallet(acct), mapping=record)])  # exists from here
    try:
        transactions.credit(client, acct, "opening", balance_micro, actor=actor)
    except transactions.NotDurable as e:  # it exists: say which, or a retry creates a second one
        raise transactions.NotDurable(
            f"account {acct} was created with its opening balance, but no replica confirmed it "
            f"within {transactions.REPLICA_WAIT_MS} ms (a failover now could lose it): do NOT "
            f"create it again; check `account show {acct}` after the failover", e.result) from None
    finally:  # listed even when no replica confirmed the opening (NotDurable): never orphaned
        atomic_write(client, [listing(acct, record["created_at"])])
    return acct


def listing(acct: str, created_at: int) -> Step:
    """The write that lists an account: the ACCOUNTS set and the newest-first index
    (services/account_list.py), one MULTI (both keys share the ``{accounts}`` slot)."""
    def step(p):
        p.sadd(keyspace.ACCOUNTS, acct)
        p.zadd(keyspace.ACCOUNTS_BY_TIME, {acct: created_at})
    return step


def topup(client, account_id: str, amount_micro: int) -> int:
    """Add `amount_micro` (negative = an adjustment) as a transaction without ref or note;
    returns the new balance in micro-toman (kept for callers that speak micro-toman; the
    operator's entry point is transactions.topup / transactions.adjust)."""
    from upgate.services import transactions

    if isinstance(amount_micro, bool) or not isinstance(amount_micro, int):
        raise InvalidAmount("a top-up must be an integer of micro-toman", reason="amount_malformed")
    if abs(amount_micro) > money.MAX_MICRO:
        raise BalanceOutOfRange("amount beyond 2^53 micro-toman (about 9,007,199,254 toman) is refused")
    result = transactions.topup(client, account_id, money.fmt(amount_micro))
    return money.parse_toman(result["balance_toman"], allow_negative=True)


def _suspension(client, account_id: str, suspend: bool, reason: str | None = None,
                actor: str | None = None) -> bool:
    """Set or lift the suspension and record its webhook event (with the reason) in one step
    (lua/suspend.lua), then tell every node (pub/sub) and, when `actor` is given (an operator's
    action), write the admin log's entry. True when the state changed."""
    acct = normalize_id(account_id)
    reason = check_reason(reason)
    keys = [keyspace.wallet(acct), *keyspace.outbox_keys(acct, is_cluster(client))]
    changed = int(store.script("suspend").call_sync(client, keys, [acct, "1" if suspend else "0", 0, reason or ""]))
    if changed < 0:
        raise UnknownAccount(f"unknown account {acct}")
    client.publish(keyspace.CHANNEL, orjson.dumps({"t": "account", "id": acct}))
    if actor is not None:
        from upgate.services import admin_log

        was, now = ("active", "suspended") if suspend else ("suspended", "active")
        admin_log.record(client, actor, "account.suspend" if suspend else "account.resume", acct,
                         before={"status": was} if changed else None, after={"status": now} if changed else None,
                         note=reason, detail={"changed": changed == 1})
    return changed == 1


def suspend(client, account_id: str, reason: str | None = None, *, actor: str | None = None) -> bool:
    """Suspend the account: its requests get 403 account_suspended from the next one on.
    Returns False when it already was suspended (the call is idempotent)."""
    return _suspension(client, account_id, True, reason, actor)


def resume(client, account_id: str, reason: str | None = None, *, actor: str | None = None) -> bool:
    """Lift a suspension. Returns False when the account was not suspended."""
    return _suspension(client, account_id, False, reason, actor)


def set_free_quota(client, account_id: str, n: int | None) -> None:
    """Set the account's daily `:free` request quota (0 = no free requests); None goes back
    to the deployment default (UPGATE_FREE_QUOTA_DEFAULT)."""
    update(client, account_id, free_quota=n)


# ---- reads ------------------------------------------------------------------------------------

def _wallet(w: dict[str, str]) -> dict:
    """The decoded wallet numbers every view shows (micro-toman)."""
    balance = int(w.get("balance") or 0)
    held = int(w.get("held") or 0)
    return {"phone_masked": mask_phone(w.get("phone", "")), "balance_micro": balance,
            "held_micro": held, "available_micro": balance - held}


def _view(acct: str, w: dict[str, str], key_count: int, free_used: int) -> dict:
    quota = w.get("free_quota")
    return {
        "account_id": acct,
        "phone": w.get("phone", ""),
        **_wallet(w),
        "suspended": w.get("suspended") == "1",
        "free_quota": int(quota) if quota not in (None, "") else None,
        "free_used_today": free_used,
        "low_balance_micro": int(w["low_balance"]) if w.get("low_balance") not in (None, "") else None,
        "key_count": key_count,
        "created_at": int(w.get("created_at") or 0),
    }


def show(client, account_id: str) -> dict:
    """One account: account_id, phone, phone_masked, balance/held/available (`*_micro`, int),
    suspended, free_quota (None = default), free_used_today, low_balance_micro (None = no
    alert), key_count, created_at (unix s)."""
    acct = normalize_id(account_id)
    pipe = client.pipeline(transaction=False)
    pipe.hgetall(keyspace.wallet(acct))
    pipe.scard(keyspace.account_keys(acct))
    pipe.get(keyspace.free(acct, jalali.day_key()))
    raw, count, used = pipe.execute()
    if not raw:
        raise UnknownAccount(f"unknown account {acct}")
    return _view(acct, store.text_map(raw), int(count), int(used or 0))


def _views(client, ids: list[str], batch: int):
    """(account id, its `show` view or None when gone) for `ids` in order, `batch` wallets per
    round trip (one pipeline: wallet, key count, today's free counter)."""
    day = jalali.day_key()
    for start in range(0, len(ids), batch):
        chunk = ids[start:start + batch]
        pipe = client.pipeline(transaction=False)
        for acct in chunk:
            pipe.hgetall(keyspace.wallet(acct))
            pipe.scard(keyspace.account_keys(acct))
            pipe.get(keyspace.free(acct, day))
        replies = pipe.execute()
        for i, acct in enumerate(chunk):
            raw, count, used = replies[3 * i:3 * i + 3]
            yield acct, (_view(acct, store.text_map(raw), int(count), int(used or 0)) if raw else None)


def _all_ids(client) -> list[str]:
    return sorted(store.text(a) for a in client.sscan_iter(keyspace.ACCOUNTS, count=1000))


def list_accounts(client, *, phone: str | None = None) -> list[dict]:
    """Every account (the `show` view), oldest first; only those with this phone (any
    spelling services/phones.py accepts) if given."""
    if phone is not None:
        phone = check_phone(phone)
    out = [v for _, v in _views(client, _all_ids(client), 500)
           if v is not None and (phone is None or v["phone"] == phone)]
    out.sort(key=lambda v: (v["created_at"], v["account_id"]))
    return out


async def key_view(client, account_id: str, key_id: str, month: str) -> dict | None:
    """What a key's holder may see of it and its wallet (GET /v1/svc/me), read fresh from the
    store with one pipeline on the gateway's async client: the wallet numbers (`_wallet`) and
    {"key": name, prefix, monthly_limit_micro (None = none), spent_micro (Jalali `month`), rpm,
    allowed_models (None = all)}. None when the key is unknown or revoked."""
    pipe = client.pipeline(transaction=False)
    pipe.hgetall(keyspace.wallet(account_id))
    pipe.hgetall(keyspace.key_record(account_id, key_id))
    wallet, record = (store.text_map(x) for x in await pipe.execute())
    if not record or record.get("revoked") == "1":
        return None
    limit, allowed = record.get("monthly_limit"), record.get("allowed_models")
    return {**_wallet(wallet), "key": {
        "name": record.get("name"), "prefix": record.get("prefix"),
        "monthly_limit_micro": int(limit) if limit else None,
        "spent_micro": int(record.get("spent:" + month, 0)),
        "rpm": int(record.get("rpm", 60)),
        "allowed_models": orjson.loads(allowed) if allowed else None}}


# ---- the management API's account object and operations (also the console's) -----------------

UNSET = object()  # "leave this setting as it is" in `update`
PAGE_MAX = 500


def update(client, account_id: str, *, free_quota=UNSET, low_balance_micro=UNSET) -> None:
    """Change the daily free quota (None = the deployment default) and/or the low-balance
    threshold (None = no alert) in one atomic write; both are checked before anything is."""
    steps, event = [], None
    check_update(free_quota=free_quota, low_balance_micro=low_balance_micro)
    acct = _require(client, account_id)
    w = keyspace.wallet(acct)
    for field, value in (("free_quota", free_quota), ("low_balance", low_balance_micro)):
        if value is UNSET:
            continue
        steps.append((lambda p, f=field: p.hdel(w, f)) if value is None
                     else (lambda p, f=field, v=value: p.hset(w, f, v)))
    if free_quota is not UNSET:
        event = {"t": "account", "id": acct}  # the auth cache keeps the quota
    if steps:
        atomic_write(client, [lambda p: [s(p) for s in steps]], event=event)


def check_update(*, free_quota=UNSET, low_balance_micro=UNSET) -> None:
    """`update`'s checks alone (a face that makes several changes checks them all first)."""
    if free_quota is not UNSET:
        check_free_quota(free_quota)
    if low_balance_micro not in (UNSET, None):
        check_low_balance(low_balance_micro)


def page(client, *, phone: str | None = None, cursor: str | None = None,
         limit: int = 50) -> tuple[list[dict], str | None]:
    """One page of accounts ordered by id, after `cursor` (the last id of the previous page);
    returns (views, next cursor or None). Reads every id (a SSCAN pass, ~40 bytes an account)
    but only the page's wallets; with `phone` it reads wallets 500 at a time until the page
    is full."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= PAGE_MAX:
        raise InvalidCursor(f"limit must be a whole number from 1 to {PAGE_MAX}, got {limit!r}",
                            reason="limit_range", high=PAGE_MAX)
    if phone is not None:
        phone = check_phone(phone)
    if cursor is not None:
        try:
            cursor = str(uuid.UUID(cursor))
        except ValueError:
            raise InvalidCursor(f"not a cursor from a previous page: {cursor!r}") from None
    ids = _all_ids(client)
    if cursor is not None:
        from bisect import bisect_right
        ids = ids[bisect_right(ids, cursor):]
    out: list[dict] = []
    for acct, view in _views(client, ids, limit if phone is None else 500):
        if view is not None and (phone is None or view["phone"] == phone):
            out.append(view)
        if len(out) == limit:
            return out, (acct if acct != ids[-1] else None)
    return out, None


# ---- the account object: what every face shows (account_object) -------------------------------

def get(client, account_id: str, default_quota: int, *, old_names: bool = False) -> dict:
    """The account object of one account (`default_quota`: UPGATE_FREE_QUOTA_DEFAULT)."""
    return account_object(show(client, account_id), default_quota, old_names=old_names)


def create(client, phone: str, balance_micro: int, default_quota: int, *, actor: str = "cli",
           old_names: bool = False) -> dict:
    """Create an account (create_account) and answer its object."""
    return get(client, create_account(client, phone, balance_micro, actor=actor), default_quota,
               old_names=old_names)


def set_status(client, account_id: str, suspended: bool, default_quota: int, *, reason: str | None = None,
               actor: str = "cli", old_names: bool = False) -> tuple[dict, bool]:
    """Suspend or resume (with the operator's reason, in the audit and the webhook); (the
    account object after it, whether anything changed)."""
    changed = (suspend if suspended else resume)(client, account_id, reason, actor=actor)
    return get(client, account_id, default_quota, old_names=old_names), changed


def patch(client, account_id: str, default_quota: int, *, old_names: bool = False, **changes) -> dict:
    """`update` (free_quota=, low_balance_micro=), then the account object."""
    update(client, account_id, **changes)
    return get(client, account_id, default_quota, old_names=old_names)


def objects_page(client, default_quota: int, **kw) -> dict:
    """One page of account objects (`page`): {"data": [...], "next_cursor"}."""
    views, cursor = page(client, **kw)
    return {"data": [account_object(v, default_quota) for v in views], "next_cursor": cursor}
