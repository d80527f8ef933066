"""Accounts, the pure part: the errors the account operations raise, the checks on operator
input (amounts in toman, phone numbers, ids, quotas, thresholds), the masked phone, the API's
account object, and ``AccountInfo``, the runtime view the gateway's auth cache keeps. No I/O;
the operations on the store are upgate/services/accounts.py.
"""
from __future__ import annotations

import re
import uuid
from dataclasses import dataclass

from upgate.billing import jalali, money
from upgate.i18n import numbers
from upgate.errors import Reasoned
from upgate.services import phones
from upgate.store import connection as store

PHONE = phones.E164  # the stored form
MAX_FREE_QUOTA = 1_000_000_000  # requests per day; anything larger is a typo


# ---- errors -----------------------------------------------------------------------------------

class AccountError(Reasoned):
    """A refused account operation. The message is one line meant for the operator;
    nothing was written. `field`: the API field at fault, where one is."""

    field: str | None = None


class NotFound(AccountError):
    """An id that names nothing (an account, an order …): `not_found` on every face
    (upgate/services/refusals.py). A face's own nouns subclass it."""

    reason = "not_found"


class UnknownAccount(NotFound):
    """No account has this id."""

    reason = "account_unknown"


class InvalidPhone(AccountError):
    """A phone number is in no spelling services/phones.py accepts."""

    field = "phone"
    reason = "phone_invalid"


class PhoneInUse(AccountError):
    """Another account already has this phone (a phone belongs to at most one account)."""

    field = "phone"
    reason = "phone_in_use"


class BalanceOutOfRange(AccountError):
    """The balance would pass +/- 2^53 micro-toman (the exact range of Lua numbers)."""

    field = "amount_toman"
    reason = "amount_range"


class InvalidAmount(AccountError):
    """An amount is not a plain decimal toman value, has more than six fractional digits,
    or is out of range."""

    field = "amount_toman"


class InvalidQuota(AccountError):
    """A free quota is not a whole number from 0 to MAX_FREE_QUOTA."""

    field = "free_quota_per_day"
    reason = "quota_range"


class InvalidCursor(AccountError):
    """A listing cursor is not one this service handed out."""

    field = "cursor"
    reason = "cursor_invalid"


# ---- pure helpers -----------------------------------------------------------------------------

def parse_amount(text: str, *, allow_negative: bool = False, what: str = "amount") -> int:
    """Text in toman → integer micro-toman, read by `numbers.plain_number` (ASCII, Persian or
    Arabic-Indic digits, thousands separators: "1500", "-20.5", "۱٬۵۰۰", "1,000"); refuses
    "abc", "1e3", "nan", "¹⁰", more than six fractional digits and anything beyond 2^53
    micro-toman, with an `InvalidAmount` naming the value."""
    try:
        plain = numbers.plain_number(text, negative=True)
    except numbers.NumberError:
        shown = text[:numbers.MAX_NUMBER_CHARS] if isinstance(text, str) else text
        raise InvalidAmount(f"{what} must be a plain decimal number of toman "
                            f"(like 1500 or 1500.25), got {shown!r}", reason="amount_malformed") from None
    try:
        return money.parse_toman(plain, allow_negative=allow_negative)
    except money.AmountError as e:
        raise InvalidAmount(f"{what}: {e}", reason="amount_malformed") from None


def check_phone(phone: str) -> str:
    """The canonical E.164 form (services/phones.py) of a phone as typed, or `InvalidPhone`."""
    try:
        return phones.canonical(phone)
    except phones.PhoneError:
        raise InvalidPhone(f"phone must be a mobile number like 09121234567 or +989121234567, "
                           f"got {phone!r}") from None


def mask_phone(phone: str) -> str:
    """A partly hidden phone number: the first four and the last four characters around
    "***" (``09121234567`` → ``0912***4567``); fewer are kept for short numbers, so at least
    three characters are always hidden."""
    phone = phone or ""
    keep = min(4, (len(phone) - 3) // 2)
    if keep <= 0:
        return "***"
    return phone[:keep] + "***" + phone[-keep:]


def normalize_id(account_id: str) -> str:
    """The canonical lowercase UUID, or `UnknownAccount` (no account has a malformed id)."""
    try:
        return str(uuid.UUID(str(account_id).strip()))
    except ValueError:
        raise UnknownAccount(f"unknown account {account_id!r} (account ids are UUIDs)") from None


# ---- the runtime view -------------------------------------------------------------------------

@dataclass(frozen=True)
class AccountInfo:
    """What the gateway's auth cache keeps per account (dropped on an `account` event)."""

    account_id: str
    phone_masked: str
    suspended: bool
    free_quota: int | None  # requests per Tehran day; None = the deployment default

    @classmethod
    def from_hash(cls, account_id: str, d: dict) -> "AccountInfo":
        """From the decoded wallet hash (str → str)."""
        d = store.text_map(d)
        quota = d.get("free_quota")
        return cls(account_id=account_id,
                   phone_masked=mask_phone(d.get("phone", "")),
                   suspended=d.get("suspended") == "1",
                   free_quota=int(quota) if quota not in (None, "") else None)


def account_object(view: dict, default_quota: int, *, old_names: bool = False) -> dict:
    """THE account object (OPERATORS.md), from a `show` view: what the management API, the
    console and `upgate-admin … --json` all show. `old_names` adds, beside it and never
    instead, the names the CLI printed before the API existed (`account_id`, `suspended`,
    `free_quota`, …) so old scripts keep working."""
    low = view["low_balance_micro"]
    quota = default_quota if view["free_quota"] is None else view["free_quota"]
    out = {
        "id": view["account_id"],
        "phone": view["phone"],
        "status": "suspended" if view["suspended"] else "active",
        "balance_toman": money.fmt(view["balance_micro"]),
        "held_toman": money.fmt(view["held_micro"]),
        "available_toman": money.fmt(view["available_micro"]),
        "free_quota_per_day": quota,
        "low_balance_toman": money.fmt(low) if low is not None else None,
        "created_at": jalali.utc_iso(view["created_at"]) if view["created_at"] else None,
    }
    if old_names:
        out.update({"account_id": view["account_id"], "phone_masked": view["phone_masked"],
                    "suspended": view["suspended"], "free_quota": quota,
                    "free_quota_is_default": view["free_quota"] is None,
                    "free_used_today": view["free_used_today"], "key_count": view["key_count"]})
    return out


def check_low_balance(micro) -> int:
    if isinstance(micro, bool) or not isinstance(micro, int) or not 0 <= micro <= money.MAX_MICRO:
        raise InvalidAmount("low_balance_toman must be a toman amount from 0 to 2^53 micro-toman",
                            reason="amount_range")
    return micro


MAX_REASON = 500  # characters of a suspension's reason


class InvalidReason(AccountError):
    field = "reason"
    reason = "reason_too_long"


def check_reason(text) -> str | None:
    """A suspension's or resumption's reason: optional text of at most MAX_REASON characters,
    one line (it goes into a webhook and the audit); blank = none."""
    if text is None:
        return None
    if not isinstance(text, str) or len(text) > MAX_REASON:
        raise InvalidReason(f"reason must be text of at most {MAX_REASON} characters", high=MAX_REASON)
    text = " ".join(text.split())
    if not text.isprintable():
        raise InvalidReason("reason must be printable text", reason="text_control")
    return text or None


def check_free_quota(n) -> int | None:
    """A daily free quota: None (the deployment default) or a whole number 0..MAX_FREE_QUOTA."""
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_FREE_QUOTA):
        raise InvalidQuota(f"free_quota_per_day must be a whole number from 0 to {MAX_FREE_QUOTA} "
                           f"(or default), got {n!r}", high=MAX_FREE_QUOTA)
    return n


def parse_free_quota(text) -> int | None:
    """Operator text → a daily free quota; `default` → None (UPGATE_FREE_QUOTA_DEFAULT)."""
    stripped = text.strip() if isinstance(text, str) else ""
    if stripped == "default":
        return None
    try:
        return check_free_quota(numbers.whole(stripped))
    except numbers.NumberError:
        raise InvalidQuota(f"free_quota_per_day must be a whole number from 0 to {MAX_FREE_QUOTA} "
                           f"(or default), got {text!r}", high=MAX_FREE_QUOTA) from None


def parse_low_balance(text) -> int | None:
    """Operator text → the low-balance threshold in micro-toman; `off` (or blank) → None, no
    alert. The one parser of the CLI's AMOUNT|off and the console's field."""
    if text is None or (isinstance(text, str) and text.strip().lower() in ("", "off")):
        return None
    return check_low_balance(parse_amount(text, what="low_balance_toman"))


# ---- months (statements, transaction lists) ----------------------------------------------------

MONTH = re.compile(r"^([0-9]{4})-([0-9]{2})$")


class InvalidMonth(AccountError):
    """A month is not a Jalali YYYY-MM, or is outside what a statement can cover."""

    field = "month"
    reason = "month_malformed"


def check_month(text) -> str:
    """The month as "YYYY-MM" when it is a real Jalali month, else `InvalidMonth`."""
    m = MONTH.match(text.strip()) if isinstance(text, str) else None
    if not m or not 1 <= int(m.group(2)) <= 12 or not 1300 <= int(m.group(1)) <= 1500:
        raise InvalidMonth(f"month must be a Jalali month YYYY-MM (like 1405-09), got {text!r}",
                           reason="month_malformed")
    return m.group(0)
