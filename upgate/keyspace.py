"""Every Redis key name upgate uses, built in one place.

Hash-tag rule: every key that one Lua script touches must live in one Redis Cluster slot, so
all per-account state carries the tag ``{a:<account_id>}``; Redis hashes only the text inside
the braces. A script may then read and write the wallet, the key record, the rpm window, the
stream slots, the free counter, the holds and the usage aggregates of one account atomically.
Keys looked up across accounts (key hash → owner, the catalog, a model's cool-down) carry
their own tags and are only ever touched by single-key commands or their own scripts.
"""
from __future__ import annotations

CHANNEL = "upgate:events"  # pub/sub: cache invalidation, catalog swaps, cool-downs


def tag(account_id: str) -> str:
    return "{a:" + account_id + "}"


def wallet(account_id: str) -> str:
    """Hash: phone, balance, held (micro-toman), suspended (0/1), free_quota, created_at."""
    return tag(account_id) + ":wallet"


def key_record(account_id: str, key_id: str) -> str:
    """Hash: settings, `held` (micro-toman of this key's open holds), `spent:<month>`."""
    return tag(account_id) + ":key:" + key_id


def account_keys(account_id: str) -> str:
    """Set of the account's key ids (listing)."""
    return tag(account_id) + ":keys"


def rpm(account_id: str, key_id: str) -> str:
    """Sorted set: one member per counted request, scored by its time in ms (sliding window)."""
    return tag(account_id) + ":rpm:" + key_id


def streams(account_id: str) -> str:
    """Sorted set: open stream slots (hold ids) scored by lease deadline in ms."""
    return tag(account_id) + ":streams"


def holds(account_id: str) -> str:
    """Sorted set: open hold ids scored by lease deadline in ms (what the reaper scans)."""
    return tag(account_id) + ":holds"


def hold(account_id: str, hold_id: str) -> str:
    """Hash: one in-flight request: key id, amount, free flag, stream flag, month, day, state."""
    return tag(account_id) + ":hold:" + hold_id


def free(account_id: str, day: str) -> str:
    """Counter of `:free` requests on one Tehran day; expires after the day."""
    return tag(account_id) + ":free:" + day


def usage(account_id: str, day: str) -> str:
    """Hash of settled aggregates for one Tehran day: `<dim>|<name>|<metric>` → integer."""
    return tag(account_id) + ":usage:" + day


def keyhash(digest: str) -> str:
    """String "<account_id>:<key_id>" for the HMAC of a full key (cross-account lookup)."""
    return "keyhash:" + digest


ACCOUNTS = "accounts"  # set of all account ids (operator listing)
REAP_INDEX = "reap:accounts"  # sorted set: account ids with open holds, scored by next deadline
CATALOG = "{catalog}:models"  # hash: model id → JSON record
CATALOG_META = "{catalog}:meta"  # hash: version, prices_updated_at


def cooldown(model: str) -> str:
    """Hash: strikes (consecutive upstream 429s), until_ms."""
    return "{m:" + model + "}:cooldown"
