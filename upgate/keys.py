"""API keys: the format, the hash, the record, the operator's key operations, and the runtime
view the gateway's auth cache keeps (``KeyInfo``).

Format: ``sk-up-`` followed by 40 characters from [A-Za-z0-9] drawn with ``secrets``. Only
``digest(key, pepper)`` (HMAC-SHA256, hex) is stored; the full key is returned once, by
``create_key``, and never written anywhere. Afterwards a key is shown as its ``prefix``
(``sk-up-`` plus the first four random characters) and its last four characters.

Records (see ``keyspace``):

- ``{a:<acct>}:key:<kid>`` hash: ``account_id``, ``key_id``, ``name`` (absent = none),
  ``prefix``, ``last4``, ``hash``, ``monthly_limit`` (micro-toman; absent = no limit),
  ``allowed_models`` (JSON list; absent = all), ``rpm`` (1..600), ``expires_at`` (unix ms;
  absent = never), ``revoked`` ("0"/"1"), ``created_at`` (unix s). The billing scripts add
  ``held`` and ``spent:<Jalali YYYY-MM>``; nothing here writes those.
- ``{a:<acct>}:keys`` set of the account's key ids.
- ``keyhash:<hmac>`` → ``"<acct>:<kid>"``: what authentication looks up. Deleted on revocation
  (and ``revoked`` set to 1), so a revoked key can never come back.
- ``keyid:<kid>`` → ``<acct>``: lets ``key update KEY_ID`` and ``key revoke KEY_ID`` find the
  account. Kept after revocation.

Every change that affects authentication or limits publishes ``{"t": "key", "hash": <hmac>}``
on ``keyspace.CHANNEL`` so every gateway node drops its cached entry at once.
"""
from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import string
import time
from dataclasses import dataclass
from datetime import datetime, timezone

import orjson

from upgate import accounts, catalog, jalali, keyspace, money, store
from upgate.accounts import UnknownAccount, atomic_write

KEY_PREFIX = "sk-up-"
KEY_BODY_LENGTH = 40
KEY_LENGTH = len(KEY_PREFIX) + KEY_BODY_LENGTH
PREFIX_LENGTH = len(KEY_PREFIX) + 4  # what is shown: "sk-up-" + the first four random chars
ALPHABET = string.ascii_letters + string.digits
_KEY_SHAPE = re.compile(r"sk-up-[A-Za-z0-9]{40}")
_KEY_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")

RPM_MIN, RPM_MAX, RPM_DEFAULT = 1, 600, 60
NAME_MAX = 100


# ---- errors -----------------------------------------------------------------------------------

class KeyAdminError(ValueError):
    """A refused key operation. The message is one line meant for the operator; nothing was
    written. (Unknown accounts raise `accounts.UnknownAccount`, also a ValueError.)"""


class InvalidKeySetting(KeyAdminError):
    """A key setting is out of range or malformed: rpm, monthly limit, allowed models,
    expiry or name."""


class UnknownKey(KeyAdminError):
    """No key has this id (or it belongs to another account than the one named)."""


class KeyRevoked(KeyAdminError):
    """The key is revoked; revoked keys never return, so it cannot be changed."""


class PepperMissing(KeyAdminError):
    """No HMAC pepper to hash a new key with."""


# ---- format and hashing (pure) -----------------------------------------------------------------

def generate() -> str:
    """A new full key: ``sk-up-`` + 40 characters from [A-Za-z0-9], from `secrets`."""
    return KEY_PREFIX + "".join(secrets.choice(ALPHABET) for _ in range(KEY_BODY_LENGTH))


def well_formed(key: str) -> bool:
    """True when `key` has exactly the shape `generate` produces. Cheap, no Redis: a
    malformed key is refused before any lookup."""
    return (isinstance(key, str) and len(key) == KEY_LENGTH
            and _KEY_SHAPE.fullmatch(key) is not None)


def digest(key: str, pepper: str) -> str:
    """HMAC-SHA256 of the key under the deployment's pepper, hex: the only form stored."""
    return hmac.new(pepper.encode(), key.encode(), hashlib.sha256).hexdigest()


def display(prefix: str, last4: str) -> str:
    """How a stored key is shown: ``sk-up-AbCd…wxyz``."""
    return f"{prefix}…{last4}"


# ---- setting validation (pure) -----------------------------------------------------------------

def check_rpm(rpm) -> int:
    if isinstance(rpm, bool) or not isinstance(rpm, int) or not RPM_MIN <= rpm <= RPM_MAX:
        raise InvalidKeySetting(f"rpm must be a whole number from {RPM_MIN} to {RPM_MAX}, got {rpm!r}")
    return rpm


def parse_rpm(text: str) -> int:
    """Operator text → rpm (1..600)."""
    stripped = text.strip() if isinstance(text, str) else ""
    if not re.fullmatch(r"[0-9]{1,6}", stripped):
        raise InvalidKeySetting(f"rpm must be a whole number from {RPM_MIN} to {RPM_MAX}, got {text!r}")
    return check_rpm(int(stripped))


def check_monthly_limit(micro) -> int:
    if isinstance(micro, bool) or not isinstance(micro, int):
        raise InvalidKeySetting("the monthly limit must be an integer of micro-toman")
    if micro < 0:
        raise InvalidKeySetting("the monthly limit must not be negative")
    if micro > money.MAX_MICRO:
        raise InvalidKeySetting("a monthly limit beyond 2^53 micro-toman "
                                "(about 9,007,199,254 toman) is refused")
    return micro


def check_models(models) -> list[str]:
    """Allowed model ids: a non-empty list of lowercase ``<provider>/<model>`` ids, with an
    optional ``:free``, ``:batch`` or ``:online`` suffix (the catalog's own rule,
    `catalog.valid_id`). Duplicates are dropped, order kept."""
    if isinstance(models, str) or not isinstance(models, (list, tuple, set, frozenset)):
        raise InvalidKeySetting("allowed models must be a list of model ids")
    out: list[str] = []
    for m in models:
        if not isinstance(m, str) or not catalog.valid_id(m):
            raise InvalidKeySetting(
                f"malformed model id {m!r}: expected lowercase <provider>/<model> with an "
                "optional :free, :batch or :online suffix")
        if m not in out:
            out.append(m)
    if not out:
        raise InvalidKeySetting("allowed models must name at least one model "
                                "(leave it out, or use --all-models, to allow every model)")
    return out


def parse_models(text: str) -> list[str]:
    """Operator text ``id,id`` → the checked list."""
    return check_models([part.strip() for part in (text or "").split(",") if part.strip()])


def check_expires(expires_at_ms, now_ms: int | None = None) -> int:
    if isinstance(expires_at_ms, bool) or not isinstance(expires_at_ms, int):
        raise InvalidKeySetting("the expiry must be an integer of unix milliseconds")
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    if expires_at_ms <= now_ms:
        raise InvalidKeySetting("the expiry is in the past: "
                                f"{_iso_ms(expires_at_ms)} (now is {_iso_ms(now_ms)})")
    return expires_at_ms


def parse_expires(text: str, now_ms: int | None = None) -> int:
    """ISO 8601 (``2027-03-20``, ``2027-03-20T12:00:00+03:30``, ``…Z``) → unix ms. A time
    without a zone is UTC; a date alone is its midnight UTC. Must be in the future."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except (ValueError, AttributeError, TypeError):
        raise InvalidKeySetting(f"not an ISO 8601 date or time: {text!r} "
                                "(like 2027-03-20 or 2027-03-20T12:00:00Z)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return check_expires(int(moment.timestamp() * 1000), now_ms)


def check_name(name) -> str | None:
    """A free label up to 100 characters; blank means none."""
    if name is None:
        return None
    if not isinstance(name, str):
        raise InvalidKeySetting("the name must be text")
    name = name.strip()
    if len(name) > NAME_MAX:
        raise InvalidKeySetting(f"the name is longer than {NAME_MAX} characters")
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise InvalidKeySetting("the name must not contain control characters")
    return name or None


def _iso_ms(ms: int) -> str:
    return jalali.utc_iso(ms / 1000)


# ---- the runtime view -------------------------------------------------------------------------

def _opt_int(v: str | None) -> int | None:
    return int(v) if v not in (None, "") else None


@dataclass(frozen=True)
class KeyInfo:
    """What the gateway's auth cache keeps per key hash (dropped on a `key` event)."""

    key_id: str
    account_id: str
    name: str | None
    prefix: str
    last4: str
    monthly_limit_micro: int | None
    allowed_models: frozenset[str] | None
    rpm: int
    expires_at_ms: int | None
    revoked: bool

    @classmethod
    def from_hash(cls, d: dict, key_id: str | None = None) -> "KeyInfo":
        """From the key record hash (str or bytes). The record carries its own `key_id`;
        pass `key_id` for records written before it did."""
        d = store.text_map(d)
        allowed = d.get("allowed_models")
        return cls(
            key_id=key_id or d.get("key_id", ""),
            account_id=d.get("account_id", ""),
            name=d.get("name") or None,
            prefix=d.get("prefix", ""),
            last4=d.get("last4", ""),
            monthly_limit_micro=_opt_int(d.get("monthly_limit")),
            allowed_models=frozenset(orjson.loads(allowed)) if allowed else None,
            rpm=int(d.get("rpm") or RPM_DEFAULT),
            expires_at_ms=_opt_int(d.get("expires_at")),
            revoked=d.get("revoked") == "1",
        )

    def expired(self, now_ms: int | None = None) -> bool:
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        return self.expires_at_ms is not None and self.expires_at_ms <= now_ms


def state(record: dict[str, str], now_ms: int | None = None) -> str:
    """"active", "expired" or "revoked" (revoked wins)."""
    info = KeyInfo.from_hash(record)
    if info.revoked:
        return "revoked"
    return "expired" if info.expired(now_ms) else "active"


def _view(record: dict[str, str], month: str) -> dict:
    """A key as operators see it: never the hash, never the full key."""
    info = KeyInfo.from_hash(record)
    return {
        "key_id": info.key_id,
        "account_id": info.account_id,
        "name": info.name,
        "prefix": info.prefix,
        "last4": info.last4,
        "display": display(info.prefix, info.last4),
        "rpm": info.rpm,
        "monthly_limit_micro": info.monthly_limit_micro,
        "spent_this_month_micro": int(record.get("spent:" + month) or 0),
        "held_micro": int(record.get("held") or 0),
        "allowed_models": orjson.loads(record["allowed_models"]) if record.get("allowed_models") else None,
        "expires_at_ms": info.expires_at_ms,
        "state": state(record),
        "created_at": int(record.get("created_at") or 0),
    }


# ---- operations (sync client: redis.Redis or redis.RedisCluster) ------------------------------

UNSET = object()  # "leave this setting as it is" in update_key


def _new_key_id(client) -> str:
    for _ in range(5):
        kid = secrets.token_hex(8)
        if not client.exists(keyspace.key_owner(kid)):
            return kid
    raise RuntimeError("could not draw an unused key id")  # 64 random bits: never happens


def create_key(client, pepper: str, account_id: str, *, name: str | None = None,
               monthly_limit_micro: int | None = None, allowed_models=None,
               rpm: int = RPM_DEFAULT, expires_at_ms: int | None = None) -> tuple[str, str, str]:
    """Create a key for an existing account; returns ``(full_key, key_id, prefix)``. The full
    key exists only in this return value: Redis gets its HMAC under `pepper`."""
    if not isinstance(pepper, str) or not pepper:
        raise PepperMissing("no key pepper: set UPGATE_KEY_PEPPER to the gateway's value")
    name = check_name(name)
    rpm = check_rpm(rpm)
    if monthly_limit_micro is not None:
        check_monthly_limit(monthly_limit_micro)
    models = check_models(allowed_models) if allowed_models is not None else None
    if expires_at_ms is not None:
        check_expires(expires_at_ms)
    acct = accounts.require_account(client, account_id)

    key = generate()
    kid = _new_key_id(client)
    h = digest(key, pepper)
    record = {"account_id": acct, "key_id": kid, "prefix": key[:PREFIX_LENGTH],
              "last4": key[-4:], "hash": h, "rpm": rpm, "revoked": "0",
              "created_at": int(time.time())}
    if name is not None:
        record["name"] = name
    if monthly_limit_micro is not None:
        record["monthly_limit"] = monthly_limit_micro
    if models is not None:
        record["allowed_models"] = orjson.dumps(models).decode()
    if expires_at_ms is not None:
        record["expires_at"] = expires_at_ms

    def index(p):
        p.set(keyspace.key_owner(kid), acct)

    def records(p):
        p.hset(keyspace.key_record(acct, kid), mapping=record)
        p.sadd(keyspace.account_keys(acct), kid)

    def live(p):  # last: until this is written the key authenticates nothing
        p.set(keyspace.keyhash(h), f"{acct}:{kid}")

    atomic_write(client, [index, records, live])
    return key, kid, record["prefix"]


def _owner(client, key_id: str, account_id: str | None = None) -> str:
    if not isinstance(key_id, str) or not _KEY_ID.fullmatch(key_id):
        raise UnknownKey(f"unknown key {key_id!r}")
    acct = client.get(keyspace.key_owner(key_id))
    if acct is None:
        raise UnknownKey(f"unknown key {key_id}")
    acct = store.text(acct)
    if account_id is not None and accounts.normalize_id(account_id) != acct:
        raise UnknownKey(f"key {key_id} does not belong to account {account_id}")
    return acct


def _record(client, acct: str, key_id: str) -> dict[str, str]:
    raw = client.hgetall(keyspace.key_record(acct, key_id))
    if not raw:
        raise UnknownKey(f"unknown key {key_id}")
    return store.text_map(raw)


def find_key(client, key_id: str) -> dict:
    """The operator's view of one key (as in `list_keys`), found by its id alone."""
    acct = _owner(client, key_id)
    return _view(_record(client, acct, key_id), jalali.month_key())


def update_key(client, key_id: str, *, account_id: str | None = None, name=UNSET,
               monthly_limit_micro=UNSET, allowed_models=UNSET, rpm=UNSET,
               expires_at_ms=UNSET) -> dict:
    """Change a key's settings; returns its new view. A setting left UNSET stays as it is;
    None clears it (no name, no monthly limit, all models, no expiry; rpm cannot be None).
    Refused for an unknown or revoked key, or when nothing is asked to change."""
    to_set: dict[str, object] = {}
    to_clear: list[str] = []
    if name is not UNSET:
        checked = check_name(name)
        if checked is None:
            to_clear.append("name")
        else:
            to_set["name"] = checked
    if monthly_limit_micro is not UNSET:
        if monthly_limit_micro is None:
            to_clear.append("monthly_limit")
        else:
            to_set["monthly_limit"] = check_monthly_limit(monthly_limit_micro)
    if allowed_models is not UNSET:
        if allowed_models is None:
            to_clear.append("allowed_models")
        else:
            to_set["allowed_models"] = orjson.dumps(check_models(allowed_models)).decode()
    if rpm is not UNSET:
        to_set["rpm"] = check_rpm(rpm)
    if expires_at_ms is not UNSET:
        if expires_at_ms is None:
            to_clear.append("expires_at")
        else:
            to_set["expires_at"] = check_expires(expires_at_ms)
    if not to_set and not to_clear:
        raise InvalidKeySetting("nothing to change: give at least one setting")

    acct = _owner(client, key_id, account_id)
    record = _record(client, acct, key_id)
    if record.get("revoked") == "1":
        raise KeyRevoked(f"key {key_id} is revoked; revoked keys never return (create a new key)")
    rec = keyspace.key_record(acct, key_id)

    def change(p):
        if to_set:
            p.hset(rec, mapping=to_set)
        if to_clear:
            p.hdel(rec, *to_clear)

    atomic_write(client, [change], event={"t": "key", "hash": record["hash"]})
    return find_key(client, key_id)


def revoke_key(client, key_id: str, *, account_id: str | None = None) -> bool:
    """Revoke for good: the hash lookup is deleted and the record marked revoked, so the key
    fails on its very next request and can never come back. Returns False when it already
    was revoked (the call is idempotent and repeats the clean-up)."""
    acct = _owner(client, key_id, account_id)
    record = _record(client, acct, key_id)
    was = record.get("revoked") == "1"
    h = record["hash"]

    def dead(p):  # first: from here on the key authenticates nothing
        p.delete(keyspace.keyhash(h))

    def mark(p):
        p.hset(keyspace.key_record(acct, key_id), "revoked", "1")

    atomic_write(client, [dead, mark], event={"t": "key", "hash": h})
    return not was


def list_keys(client, account_id: str) -> list[dict]:
    """Every key of the account, oldest first: key_id, name, prefix, last4, display, rpm,
    monthly_limit_micro, spent_this_month_micro, held_micro, allowed_models, expires_at_ms,
    state, created_at. Never the hash, never the full key."""
    acct = accounts.require_account(client, account_id)
    kids = sorted(store.text(k) for k in client.smembers(keyspace.account_keys(acct)))
    pipe = client.pipeline(transaction=False)
    for kid in kids:
        pipe.hgetall(keyspace.key_record(acct, kid))
    month = jalali.month_key()
    out = [_view(store.text_map(raw), month) for raw in pipe.execute() if raw] if kids else []
    out.sort(key=lambda v: (v["created_at"], v["key_id"]))
    return out


def to_json(v: dict) -> dict:
    """A key view as JSON (`key list --json`): amounts as toman strings, times ISO 8601 UTC."""
    limit = v["monthly_limit_micro"]
    return {
        "key_id": v["key_id"],
        "account_id": v["account_id"],
        "name": v["name"],
        "prefix": v["prefix"],
        "last4": v["last4"],
        "rpm": v["rpm"],
        "monthly_limit_toman": money.fmt(limit) if limit is not None else None,
        "spent_this_month_toman": money.fmt(v["spent_this_month_micro"]),
        "held_toman": money.fmt(v["held_micro"]),
        "allowed_models": v["allowed_models"],
        "expires_at": _iso_ms(v["expires_at_ms"]) if v["expires_at_ms"] is not None else None,
        "state": v["state"],
        "created_at": jalali.utc_iso(v["created_at"]) if v["created_at"] else None,
    }


def key_object(v: dict) -> dict:
    """The management API's key object (OPERATORS.md): `to_json` plus `status`."""
    return dict(to_json(v), status=v["state"])


__all__ = [
    "KEY_PREFIX", "KeyInfo", "generate", "well_formed", "digest", "display",
    "create_key", "update_key", "revoke_key", "list_keys", "find_key", "UNSET",
    "KeyAdminError", "InvalidKeySetting", "UnknownKey", "KeyRevoked", "PepperMissing",
    "UnknownAccount", "check_rpm", "parse_rpm", "check_monthly_limit", "check_models",
    "parse_models", "check_expires", "parse_expires", "check_name", "state", "to_json", "key_object",
]
