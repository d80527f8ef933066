"""API keys, the pure part: the format (``sk-up-`` and 40 characters of [A-Za-z0-9] from
``secrets``), the HMAC stored in its place, how a key is shown, the checks on every setting an
operator may give a key, and ``KeyInfo``, the runtime view the gateway's auth cache keeps. No
I/O; the operations on the store are upgate/services/keys.py.
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

from upgate.billing import jalali, money
from upgate.catalog import rules as catalog
from upgate.i18n import numbers
from upgate.errors import Reasoned
from upgate.services.account_rules import parse_amount
from upgate.store import connection as store

KEY_PREFIX = "sk-up-"
KEY_BODY_LENGTH = 40
KEY_LENGTH = len(KEY_PREFIX) + KEY_BODY_LENGTH
PREFIX_LENGTH = len(KEY_PREFIX) + 4  # what is shown: "sk-up-" + the first four random chars
ALPHABET = string.ascii_letters + string.digits
_KEY_SHAPE = re.compile(r"sk-up-[A-Za-z0-9]{40}")
KEY_ID_SHAPE = re.compile(r"[A-Za-z0-9_-]{1,64}")

RPM_MIN, RPM_MAX, RPM_DEFAULT = 1, 600, 60
MAX_EXPIRY_YEARS = 10  # a key's expiry is at most this far ahead (every face; docs/security.md)
_MAX_EXPIRY_MS = MAX_EXPIRY_YEARS * 365 * 86_400_000
NAME_MAX = 100
MAX_ALLOWED_MODELS = 1_000


# ---- errors -----------------------------------------------------------------------------------

class KeyAdminError(Reasoned):
    """A refused key operation. The message is one line meant for the operator; nothing was
    written. (Unknown accounts raise `accounts.UnknownAccount`, also a ValueError.)"""


class InvalidKeySetting(KeyAdminError):
    """A key setting is out of range or malformed: rpm, monthly limit, allowed models,
    expiry or name."""


class UnknownKey(KeyAdminError):
    """No key has this id (or it belongs to another account than the one named)."""

    reason = "key_unknown"


class KeyRevoked(KeyAdminError):
    """The key is revoked; revoked keys never return, so it cannot be changed."""

    reason = "key_revoked"


class PepperMissing(KeyAdminError):
    """No HMAC pepper to hash a new key with."""

    reason = "pepper_missing"


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
        raise InvalidKeySetting(f"rate_limit_rpm must be a whole number from {RPM_MIN} to {RPM_MAX}, got {rpm!r}",
                                 reason="rpm_range", low=RPM_MIN, high=RPM_MAX)
    return rpm


def parse_rpm(text: str) -> int:
    """Operator text → rpm (1..600)."""
    try:
        return check_rpm(numbers.whole(text))
    except numbers.NumberError:
        raise InvalidKeySetting(f"rate_limit_rpm must be a whole number from {RPM_MIN} to {RPM_MAX}, "
                                f"got {text!r}", reason="rpm_range", low=RPM_MIN, high=RPM_MAX) from None


def parse_monthly_limit(text: str) -> int:
    """Operator text in toman → the monthly limit in micro-toman (the CLI's and the console's
    one parser; the API's JSON string goes through the same parse_amount)."""
    return check_monthly_limit(parse_amount(text, what="monthly_limit_toman"))


def check_monthly_limit(micro) -> int:
    if isinstance(micro, bool) or not isinstance(micro, int):
        raise InvalidKeySetting("the monthly limit must be an integer of micro-toman", reason="amount_malformed")
    if micro < 0:
        raise InvalidKeySetting("the monthly limit must not be negative", reason="amount_negative")
    if micro > money.MAX_MICRO:
        raise InvalidKeySetting("a monthly limit beyond 2^53 micro-toman "
                                "(about 9,007,199,254 toman) is refused",
                                reason="amount_too_large", high_micro=money.MAX_MICRO)
    return micro


def check_models(models) -> list[str]:
    """Allowed model ids: a non-empty list of at most MAX_ALLOWED_MODELS lowercase
    ``<provider>/<model>`` ids, with an optional ``:free``, ``:batch`` or ``:online`` suffix
    (the catalog's own rule, `catalog.valid_id`). Duplicates are dropped, order kept."""
    if isinstance(models, str) or not isinstance(models, (list, tuple, set, frozenset)):
        raise InvalidKeySetting("allowed models must be a list of model ids", reason="models_malformed")
    if len(models) > MAX_ALLOWED_MODELS:  # checked before any id: each key record carries the list
        raise InvalidKeySetting(f"allowed models name at most {MAX_ALLOWED_MODELS:,} ids, got {len(models):,}",
                                 reason="models_too_many", high=MAX_ALLOWED_MODELS)
    for m in models:
        if not isinstance(m, str) or not catalog.valid_id(m):
            raise InvalidKeySetting(
                f"malformed model id {m!r}: expected lowercase <provider>/<model> with an "
                "optional :free, :batch or :online suffix", reason="model_malformed", model=str(m)[:80])
    out = list(dict.fromkeys(models))  # (a list's `in` made this quadratic: 50,000 ids took seconds)
    if not out:
        raise InvalidKeySetting("allowed models must name at least one model "
                                "(leave it out, or use --all-models, to allow every model)", reason="models_empty")
    return out


def parse_models(text: str) -> list[str]:
    """Operator text ``id,id`` → the checked list."""
    return check_models([part.strip() for part in (text or "").split(",") if part.strip()])


def check_expires(expires_at_ms, now_ms: int | None = None) -> int:
    if isinstance(expires_at_ms, bool) or not isinstance(expires_at_ms, int):
        raise InvalidKeySetting("the expiry must be an integer of unix milliseconds", reason="date_malformed")
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    if expires_at_ms <= now_ms:
        raise InvalidKeySetting("the expiry is in the past: "
                                f"{iso_ms(expires_at_ms)} (now is {iso_ms(now_ms)})",
                                reason="expiry_past", when_ms=expires_at_ms)
    if expires_at_ms > now_ms + _MAX_EXPIRY_MS:  # (9999-12-31 was stored, then broke every page)
        raise InvalidKeySetting(f"the expiry must be within {MAX_EXPIRY_YEARS} years, "
                                f"before {iso_ms(now_ms + _MAX_EXPIRY_MS)}",
                                reason="expiry_too_far", years=MAX_EXPIRY_YEARS)
    return expires_at_ms


def parse_expires(text: str, now_ms: int | None = None) -> int:
    """ISO 8601 (``2027-03-20``, ``2027-03-20T12:00:00+03:30``, ``…Z``) → unix ms. A time
    without a zone is UTC; a date alone is its midnight UTC. Must be in the future."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except (ValueError, AttributeError, TypeError):
        raise InvalidKeySetting(f"not an ISO 8601 date or time: {text!r} "
                                "(like 2027-03-20 or 2027-03-20T12:00:00Z)", reason="date_malformed") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return check_expires(int(moment.timestamp() * 1000), now_ms)


def check_name(name) -> str | None:
    """A free label up to 100 characters; blank means none."""
    if name is None:
        return None
    if not isinstance(name, str):
        raise InvalidKeySetting("the name must be text", reason="name_malformed")
    name = name.strip()
    if len(name) > NAME_MAX:
        raise InvalidKeySetting(f"the name is longer than {NAME_MAX} characters", reason="name_too_long", high=NAME_MAX)
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise InvalidKeySetting("the name must not contain control characters", reason="name_control")
    return name or None


def iso_ms(ms: int) -> str:
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


def view(record: dict[str, str], month: str) -> dict:
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
