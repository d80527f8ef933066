"""The admin log: every write an operator makes (CLI, management API, console), newest first.

One entry: ``{"time": ISO 8601 UTC, "actor": "cli" | <admin token name>, "action",
"target", "detail"}`` — `action` names the command or route (``account topup``,
``POST /admin/v1/accounts/{id}/topups``), `target` the id it acted on (or None), `detail`
a few plain values (an amount, a ref, a setting). Never a secret: no key, no token, no body
of a catalog, nothing of a prompt.

Kept in one Redis list ``keyspace.ADMIN_LOG`` trimmed to the last `MAX_ENTRIES` in the same
transaction that adds (about 300 bytes an entry: ≈ 3 MB at the bound). Recording is one
round trip on the operator's side and never on the client path.
"""
from __future__ import annotations

import time

import orjson

from upgate.billing import jalali
from upgate.store import keyspace
from upgate.errors import Reasoned

MAX_ENTRIES = 10_000
_MAX_TEXT = 200  # a detail value longer than this is cut (a note, a phone, a name)


def _plain(value):
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value][:20]
    text = str(value)
    return text if len(text) <= _MAX_TEXT else text[:_MAX_TEXT] + "…"


def record(client, actor: str, action: str, target: str | None = None,
           detail: dict | None = None) -> None:
    """Append one entry (and trim the log to MAX_ENTRIES) in one transaction."""
    entry = {"time": jalali.utc_iso(time.time()), "actor": actor, "action": action,
             "target": target, "detail": {k: _plain(v) for k, v in (detail or {}).items()}}
    pipe = client.pipeline(transaction=True)
    pipe.lpush(keyspace.ADMIN_LOG, orjson.dumps(entry))
    pipe.ltrim(keyspace.ADMIN_LOG, 0, MAX_ENTRIES - 1)
    pipe.execute()


def read(client, limit: int = 100) -> list[dict]:
    """The newest `limit` entries (1 to MAX_ENTRIES), newest first."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_ENTRIES:
        raise InvalidLimit(f"limit must be a whole number from 1 to {MAX_ENTRIES}, got {limit!r}", high=MAX_ENTRIES)
    return [orjson.loads(raw) for raw in client.lrange(keyspace.ADMIN_LOG, 0, limit - 1)]


class InvalidLimit(Reasoned):
    """A limit is out of range."""

    field = "limit"
    reason = "limit_range"
