"""Every Redis key name upgate uses, built in one place.

Hash-tag rule: every key that one Lua script touches must live in one Redis Cluster slot, so
all per-account state carries the tag ``{a:<account_id>}``; Redis hashes only the text inside
the braces. A script may then read and write the wallet, the key record, the rpm window, the
stream slots, the free counter, the holds and the usage aggregates of one account atomically.
Keys looked up across accounts (key hash → owner, the catalog, a model's cool-down) carry
their own tags and are only ever touched by single-key commands or their own scripts.
"""
from __future__ import annotations

from functools import lru_cache

CHANNEL = "upgate:events"  # pub/sub: cache invalidation, catalog swaps, cool-downs


def tag(account_id: str) -> str:
    return "{a:" + account_id + "}"


# what follows an account's tag in each of its keys (the functions below and hot_keys use them)
WALLET, KEY, RPM, STREAMS, HOLDS, HOLD = ":wallet", ":key:", ":rpm:", ":streams", ":holds", ":hold:"
FREE, USAGE, REQS, OUTBOX, OUTBOX_STATE = ":free:", ":usage:", ":rq", ":outbox", ":outbox:state"
REQS_V1 = ":reqs"  # the records' sorted set before the packed form (read until the retention empties it)
REFUSED = ":rf"  # the refused records' list (the sorted set ":refused" before the packed form)


def wallet(account_id: str) -> str:
    """Hash: phone, balance, held, credited, charged (micro-toman), suspended (0/1), free_quota,
    created_at."""
    return tag(account_id) + WALLET


def key_record(account_id: str, key_id: str) -> str:
    """Hash: settings, `held` (micro-toman of this key's open holds), `spent:<month>`."""
    return tag(account_id) + KEY + key_id


def account_keys(account_id: str) -> str:
    """Set of the account's key ids (listing)."""
    return tag(account_id) + ":keys"


def rpm(account_id: str, key_id: str) -> str:
    """Sorted set: one member per counted request, scored by its time in ms (sliding window)."""
    return tag(account_id) + RPM + key_id


def streams(account_id: str) -> str:
    """Sorted set: open stream slots (hold ids) scored by lease deadline in ms."""
    return tag(account_id) + STREAMS


def holds(account_id: str) -> str:
    """Sorted set: open hold ids scored by lease deadline in ms (what the reaper scans)."""
    return tag(account_id) + HOLDS


def hold(account_id: str, hold_id: str) -> str:
    """Hash: one in-flight request: key id, amount, free flag, stream flag, month, day, state."""
    return tag(account_id) + HOLD + hold_id


def free(account_id: str, day: str) -> str:
    """Counter of `:free` requests on one Tehran day; expires after the day."""
    return tag(account_id) + FREE + day


def usage(account_id: str, day: str) -> str:
    """Hash of settled aggregates for one Tehran day: `<dim>|<name>|<metric>` → integer."""
    return tag(account_id) + USAGE + day


def transactions(account_id: str) -> str:
    """List of the account's transactions, oldest first, never trimmed: each
    "<time ms>|<kind>|<amount>|<balance after>|<json>" (see lua/credit.lua)."""
    return tag(account_id) + ":txns"


def refs(account_id: str) -> str:
    """Hash: a transaction's ref → "<position in the log>|<kind>|<amount>" (idempotency, for ever)."""
    return tag(account_id) + ":refs"


def notes(account_id: str) -> str:
    """List, newest first: the support desk's notes on the account (services/notes.py)."""
    return tag(account_id) + ":notes"


def requests(account_id: str) -> str:
    """List: the account's request records, oldest first, packed (upgate/billing/request_record.py;
    no content). Read and written only through request_record / services.records / _lib.lua."""
    return tag(account_id) + REQS


def requests_v1(account_id: str) -> str:
    """Sorted set: records kept before the packed form (compact JSON arrays scored by time, ms)."""
    return tag(account_id) + REQS_V1


def refused(account_id: str) -> str:
    """List: the account's refused-request records (a 4xx/5xx no hold recorded: code, route,
    model, key, time; lua/keep_refused.lua), oldest first, packed like `requests`, at most
    request_record.REFUSED_MAX; filed in the same request index."""
    return tag(account_id) + REFUSED


def refused_v1(account_id: str) -> str:
    """Sorted set: refused records kept before the packed form (JSON arrays scored by time, ms)."""
    return tag(account_id) + ":refused"


def keyhash(digest: str) -> str:
    """String "<account_id>:<key_id>" for the HMAC of a full key (cross-account lookup)."""
    return "keyhash:" + digest


ACCOUNTS = "accounts"  # set of all account ids (operator listing)
# hash: the data migrations applied (upgate/migrations/): `version`, `<n>:at` (when step n was
# done), `<n>:after` (the last account id step n has done: where an interrupted run goes on)
MIGRATIONS = "{upgate}:migrations"
MIGRATE_LOCK = "{upgate}:migrate_lock"  # string with a TTL: the one `migrate` running now
# sorted set: every account id scored by its created_at (unix s): the newest-first listing. Its
# tag puts it in the slot of ACCOUNTS, so one MULTI lists an account in both
ACCOUNTS_BY_TIME = "{accounts}:created"
REAP_INDEX = "reap:accounts"  # sorted set: account ids with open holds, scored by next deadline
REAP_LOCK = "reap:lock"  # string: which node sweeps the reaper's shards this tick (cluster only)
SLOTS = 16384  # Redis Cluster hash slots


def slot(account_id: str) -> int:
    """The cluster hash slot of every key of this account (CRC16 of the tag's inside)."""
    import binascii

    return binascii.crc_hqx(("a:" + account_id).encode(), 0) % SLOTS


@lru_cache(maxsize=1)
def _slot_tags() -> tuple[str, ...]:
    """For every hash slot, the first hex number whose CRC16 lands in it (about 0.1 s, once)."""
    import binascii

    tags: list[str | None] = [None] * SLOTS
    left, i = SLOTS, 0
    while left:
        raw = b"%x" % i
        s = binascii.crc_hqx(raw, 0) % SLOTS
        if tags[s] is None:
            tags[s] = raw.decode()
            left -= 1
        i += 1
    return tuple(tags)  # type: ignore[arg-type]


REQ_INDEX = "reqidx:"  # + UTC day number + ":<width>:<bucket>" / ":n" (lua/_lib.lua keep_record)
# sorted set, one member "days": the longest UPGATE_REQUEST_LOG_DAYS any node has run with (each
# raises it with ZADD GT when it connects), so a reader looks back as far as a record may be kept
REQUEST_LOG_DAYS = "upgate:request_log_days"
REQ_SHARD = ("reqidx:{", "}:")  # a cluster shard: prefix + slot tag + suffix + UTC day number
REAP_SHARD = ("reap:{", "}")  # a shard's name: prefix + the slot's tag + suffix


def slot_tag(slot_no: int) -> str:
    return _slot_tags()[slot_no]


def reap_shard(slot_no: int) -> str:
    """Redis Cluster: the reaper's index for one hash slot, named to land IN that slot."""
    return REAP_SHARD[0] + _slot_tags()[slot_no] + REAP_SHARD[1]


def reap_index(account_id: str, sharded: bool = False) -> str:
    """Sorted set of account ids with open holds, scored by their earliest lease deadline.

    admit.lua adds the account in the same atomic step that places a hold, and reap.lua removes
    it only when it finds no hold left, so a hold can never be outside the index. That needs the
    index in the script's slot: on one Redis it is the single REAP_INDEX; on a cluster it is one
    index per hash slot (`reap_shard`), whose name is chosen to hash to the account's own slot;
    the reaper reads all 16384 with one lua/reap_scan.lua call per cluster node.
    """
    return reap_shard(slot(account_id)) if sharded else REAP_INDEX


def request_index_prefix(account_id: str, sharded: bool = False) -> str:
    """The request index: one hash per UTC day (day number = Unix ms // 86400000, appended to
    this prefix) mapping request id → "<account>|<time ms>", expiring after the retention.
    settle.lua / release.lua file a request in the same step as its record, so the hash must be
    in the account's slot: one index on a single Redis; on a cluster one per hash slot, named
    (like `reap_shard`) to land in that slot. `records.find` reads them without a scan."""
    if not sharded:
        return REQ_INDEX
    return REQ_SHARD[0] + _slot_tags()[slot(account_id)] + REQ_SHARD[1]


CATALOG = "{catalog}:models"  # hash: model id → JSON record
CATALOG_META = "{catalog}:meta"  # hash: version, prices_updated_at


def cooldown(model: str) -> str:
    """Hash: strikes (consecutive upstream 429s), until_ms."""
    return "{m:" + model + "}:cooldown"


ROUTE_HEALTH = ("{rt:", "}:health")
KEY_POOL = ("{pk:", "}:keys")


def route_health(model: str) -> str:
    """Hash: a model's routes' health, `<provider>|<upstream model>:f` (failures in a row) and
    `:u` (cold until, ms). Its own tag: only lua/route_health.lua touches it (docs/routes.md)."""
    return ROUTE_HEALTH[0] + model + ROUTE_HEALTH[1]


def key_pool(provider: str) -> str:
    """Hash: a provider's pooled keys set aside, `<key variable>:u` → until, ms (never a key)."""
    return KEY_POOL[0] + provider + KEY_POOL[1]


def key_owner(key_id: str) -> str:
    """String "<account_id>" for a key id, so `key update KEY_ID` / `key revoke KEY_ID` can find
    the account. Its own slot: written before the key goes live, never deleted (a revoked key
    id still resolves, and is refused as revoked)."""
    return "keyid:" + key_id


# ---- webhooks ---------------------------------------------------------------------------
# Events are decided inside the Lua step that changes an account, so their first home is in the
# account's slot: an outbox list, a small state hash, and an index of accounts with something to
# move (one key on a single Redis, one shard per hash slot on a cluster, as for the reaper). A
# mover on every node takes each account's oldest event into ONE global stream; every global
# webhook key carries the tag {webhooks}, so the delivery scripts may touch several of them.

def outbox(account_id: str) -> str:
    """List of the account's undelivered events, oldest first ("<event id> <json>" each)."""
    return tag(account_id) + OUTBOX


def outbox_state(account_id: str) -> str:
    """Hash: `seq` (events ever emitted), and while the oldest event is out for delivery
    `sent` (its id), `at` (ms it was taken) and `entry` (its stream entry id)."""
    return tag(account_id) + OUTBOX_STATE


OUTBOX_INDEX = "webhooks:outbox"  # zset: accounts with an event to move, scored by when (ms)
OUTBOX_SHARD = ("whout:{", "}")


def outbox_shard(slot_no: int) -> str:
    """Redis Cluster: the outbox index for one hash slot, named to land IN that slot."""
    return OUTBOX_SHARD[0] + _slot_tags()[slot_no] + OUTBOX_SHARD[1]


def outbox_index(account_id: str, sharded: bool = False) -> str:
    """Sorted set of account ids whose outbox needs the mover, scored by when it is due (ms).
    Written in the same atomic step as the outbox, so it must share the account's slot: the
    single OUTBOX_INDEX on one Redis, the slot's `outbox_shard` on a cluster (see reap_index)."""
    return outbox_shard(slot(account_id)) if sharded else OUTBOX_INDEX


def outbox_keys(account_id: str, sharded: bool = False) -> tuple[str, str, str]:
    """The KEYS every script that emits or moves an account's events takes: outbox, its state,
    the index (see lua/_lib.lua emit_event)."""
    return outbox(account_id), outbox_state(account_id), outbox_index(account_id, sharded)


HOT_REQUEST_INDEX = 8  # hot_keys()[8]: the request index prefix (callers otherwise unpack by name)


def hot_keys(account_id: str, sharded: bool = False) -> tuple:
    """The names admit, settle and release need for one account, built in one call (the hot
    path: each function above is one or two Python calls, and a request needs about twenty):
    (wallet, streams, holds, reqs, outbox, outbox state, reap index, outbox index, request
    index prefix, then the prefixes to which a key id, hold id, Tehran day or day are appended:
    key record, rpm window, hold, free counter, usage). Equal to the functions' (tested)."""
    t = "{a:" + account_id + "}"
    if sharded:
        tags = _slot_tags()[slot(account_id)]
        reap, out, req = (REAP_SHARD[0] + tags + REAP_SHARD[1], OUTBOX_SHARD[0] + tags + OUTBOX_SHARD[1],
                          REQ_SHARD[0] + tags + REQ_SHARD[1])
    else:
        reap, out, req = REAP_INDEX, OUTBOX_INDEX, REQ_INDEX
    return (t + WALLET, t + STREAMS, t + HOLDS, t + REQS, t + OUTBOX, t + OUTBOX_STATE, reap, out, req,
            t + KEY, t + RPM, t + HOLD, t + FREE, t + USAGE)


WEBHOOK_STREAM = "{webhooks}:stream"  # the one stream every node's consumer reads
WEBHOOK_GROUP = "deliver"  # its consumer group
WEBHOOK_RETRY = "{webhooks}:retry"  # zset: stream entry id → when its next attempt is due (ms)
WEBHOOK_ATTEMPTS = "{webhooks}:attempts"  # hash: stream entry id → JSON of its attempts so far
WEBHOOK_FAILED = "{webhooks}:failed"  # list: deliveries given up after the retry window, newest first
WEBHOOK_MOVE_LOCK = "{webhooks}:move_lock"  # cluster: which node scans the outbox shards this tick
# ---- the operator side: admin tokens and the admin log (one slot, tag {admin}) ----------------
ADMIN_TOKENS = "{admin}:tokens"  # hash: HMAC of an admin token → JSON {name, read_only, created_at}
ADMIN_TOKEN_NAMES = "{admin}:token_names"  # hash: name → HMAC (names are unique)
ADMIN_TOKEN_USED = "{admin}:token_used"  # hash: name → unix s of its last accepted request
ADMIN_LOG = "{admin}:log"  # list, newest first: JSON {time, actor, action, target, detail}


def console_session(session_hash: str) -> str:
    """String, with a TTL: one operator console session (upgate/console/session.py), named by
    the SHA-256 of its id, holding the admin token encrypted under a key derived from that id.
    Its own slot; only single-key commands."""
    return "console:session:" + session_hash


# ---- payments (upgate/payments/, docs/payments.md) --------------------------------------------
# An order lives in its account's slot, so lua/credit.lua can mark it paid in the same atomic step
# that credits the wallet. The lookups a callback or an operator needs (order id → account,
# gateway authority → order) and the reconciler's to-do list carry their own tags and are only
# touched by single-key commands: they point at the order, the order is the truth.

def order(account_id: str, order_id: str) -> str:
    """Hash: one top-up order: id, account_id, amount (micro-toman), gateway, status, authority,
    ref (<gateway>:<authority>, the credit's ref), ref_id, card_pan, created_ms, paid_ms,
    transaction_id, reason (why it failed)."""
    return tag(account_id) + ":order:" + order_id


def orders(account_id: str) -> str:
    """Sorted set: the account's order ids scored by creation time (ms)."""
    return tag(account_id) + ":orders"


def order_owner(order_id: str) -> str:
    """String: the account id of an order (`payments show ORDER_ID` finds its slot)."""
    return "order:" + order_id


def payment_authority(gateway: str, authority: str) -> str:
    """String "<account_id>|<order_id>": the order a gateway's authority (Zibal: trackId) belongs
    to. The gateway is part of the name: another gateway's callback never finds the order."""
    return f"payauth:{gateway}:{authority}"


PAYMENTS_ALL = "{payments}:orders"  # zset "<account>|<order>" → created ms (operator listing)
def payment_asks(account_id: str) -> str:
    """Sorted set: this account's gateway calls of the last hour (ms): orders started and
    returns from the bank verified (payments/bounds.py)."""
    return tag(account_id) + ":payment_asks"


def payment_asks_from(address: str) -> str:
    """Sorted set: the gateway calls of the last hour caused from one client address (ms)."""
    return "{payasks:" + address + "}:sent"


PAYMENTS_OPEN = "{payments}:open"  # zset "<account>|<order>" → created ms: the reconciler's to-do
PAYMENTS_LOCK = "{payments}:reconcile_lock"  # string: which node reconciles this minute


def fake_bank(authority: str) -> str:
    """Hash: the built-in `fake` gateway's side of one payment (amount, state, callback)."""
    return "fakebank:" + authority


# ---- the customer side: phones, sign-in codes, dashboard sessions ------------------------------
# A phone's keys share the tag {p:<E.164>}, so lua/signin_issue.lua and lua/signin_verify.lua
# touch one slot; an address's sign-in window has its own tag.

def phone_tag(phone: str) -> str:
    return "{p:" + phone + "}"


def phone_owner(phone: str) -> str:
    """String: the id of the one account with this canonical phone, or "*" when the phone is
    shared by several accounts (found by `audit`; nobody signs in with it until resolved)."""
    return phone_tag(phone) + ":account"


def phone_shared(phone: str) -> str:
    """Set: the accounts sharing a phone marked "*" in `phone_owner` (written by the phone
    migration; a phone change that takes one of them away gives the phone back to the last)."""
    return phone_tag(phone) + ":shared"


def signin_code(phone: str) -> str:
    """Hash, with a TTL of the code's life: the HMAC of the phone's current sign-in code, when
    it was issued and expires (ms), the tries used."""
    return phone_tag(phone) + ":code"


def signin_sent(phone: str) -> str:
    """Sorted set: when each code of the last hour was sent to this phone (ms), the hourly cap."""
    return phone_tag(phone) + ":sent"


def signin_address(address: str) -> str:
    """Sorted set: when each code of the last hour was asked for from this client address (ms)."""
    return "{signin:" + address + "}:sent"


def sms_health() -> str:
    """Hash, with a TTL: the SMS provider's recent failed sends in a row (`failures`) and, while
    it counts as failing, until when (`until_ms`): every node says "SMS is unavailable" alike."""
    return "sms:health"


def dash_session(session_hash: str) -> str:
    """Hash, with a TTL: one account holder's dashboard session (account_id, phone, created_at),
    named by the SHA-256 of its random id, so the store never holds a usable cookie."""
    return "dash:session:" + session_hash


def dash_sessions_of(account_id: str) -> str:
    """Sorted set: the SHA-256 names of an account's dashboard sessions, scored by when each
    began (unix seconds): the sessions page's list and "sign out everywhere"."""
    return tag(account_id) + ":dash_sessions"


def alert_sent(phone: str) -> str:
    """Sorted set: when each low-balance SMS of the last hour went to this phone (ms): the same
    hourly cap as sign-in codes, on a log of its own (upgate/alerts/low_balance.py)."""
    return phone_tag(phone) + ":alert_sent"


def phone_change_code(phone: str, role: str) -> str:
    """Hash, with a TTL of the code's life: a phone-change code sent to this phone (`role` "new"
    or "old"), the same fields as a sign-in code (services/phone_verify.py)."""
    return phone_tag(phone) + ":change:" + role


def phone_change_sent(phone: str) -> str:
    """Sorted set: when each phone-change code of the last hour was sent to this phone (ms)."""
    return phone_tag(phone) + ":change_sent"
