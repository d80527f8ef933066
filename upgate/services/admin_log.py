"""The admin log (the operator's audit trail): every write an operator makes (CLI, management API,
console), newest first, as an entry a person reads as a sentence (OPERATORS.md "support desk"):

``{"id", "ts", "actor", "action", "object": {"type", "id"}, "account", "before", "after",
"replay", "note", "detail"}`` — `action` a stable verb (``account.topup``, ``key.revoke``,
``account.suspend``…, ``VERBS``) whatever face did it; `object` what it acted on; `account` the
account it concerns (for a key, its owner), for the filter; `before`/`after` the values it
changed; `replay` true when the write was a replay that changed nothing (a top-up sent again
with its ref: not a second top-up); `note` the operator's reason or note; `detail` a few plain
values (an amount, a ref, a setting); `time` and `target` (the names before this shape) stay
beside for old scripts. Never a secret: no key, no token, no body of a catalog.

A face records its write under the name it knows it by (the CLI's command path, the API's
``VERB /admin/v1/...`` route, the console's ``POST /admin/...`` form); `verb` turns each into the
one verb here. Entries written before this shape (``time``, ``target``, a route as action) are
read into it (`entry`).

Kept in one Redis list ``keyspace.ADMIN_LOG`` trimmed to the last `MAX_ENTRIES` in the same
transaction that adds (about 400 bytes an entry: ≈ 4 MB at the bound). Recording is one
round trip on the operator's side and never on the client path.
"""
from __future__ import annotations

import secrets
import time

import orjson

from upgate.billing import jalali
from upgate.errors import Reasoned
from upgate.i18n import N_
from upgate.store import connection as store, keyspace

MAX_ENTRIES = 10_000
_MAX_TEXT = 200  # a detail value longer than this is cut (a note, a phone, a name)

# verb → (object type, the sentence a reader sees: %(object)s is the object's words)
VERBS = {
    "account.create": ("account", N_("created account %(object)s")),
    "account.topup": ("account", N_("topped up account %(object)s")),
    "account.adjust": ("account", N_("adjusted the balance of account %(object)s")),
    "account.suspend": ("account", N_("suspended account %(object)s")),
    "account.resume": ("account", N_("resumed account %(object)s")),
    "account.update": ("account", N_("changed the settings of account %(object)s")),
    "account.set_free_quota": ("account", N_("changed the free quota of account %(object)s")),
    "account.set_low_balance": ("account", N_("changed the low-balance alert of account %(object)s")),
    "account.set_phone": ("account", N_("changed the phone of account %(object)s")),
    "account.note": ("account", N_("added a note to account %(object)s")),
    "key.create": ("account", N_("created a key on account %(object)s")),
    "key.update": ("key", N_("changed key %(object)s")),
    "key.revoke": ("key", N_("revoked key %(object)s")),
    "models.load": ("catalog", N_("loaded a new model catalog")),
    "models.sync": ("catalog", N_("synced model prices")),
    "webhook.resend": ("webhook", N_("sent failed webhook events again")),
    "webhook.test": ("webhook", N_("sent a test webhook")),
    "payments.verify": ("order", N_("verified payment %(object)s")),
    "admin_token.create": ("admin_token", N_("created admin token %(object)s")),
    "admin_token.revoke": ("admin_token", N_("revoked admin token %(object)s")),
    "migrate": ("store", N_("migrated the stored data")),
}
_SETS = {"account.update", "account.set_free_quota", "account.set_low_balance", "key.update", "key.create"}
# a face's own name for a write → its verb (the CLI's command paths map by rule: `verb`)
_ROUTES = {
    "POST /admin/v1/accounts": "account.create", "POST /admin/accounts": "account.create",
    "POST /admin/v1/accounts/{id}/topups": "account.topup", "POST /admin/accounts/{id}/topups": "account.topup",
    "POST /admin/v1/accounts/{id}/adjustments": "account.adjust",
    "POST /admin/accounts/{id}/adjustments": "account.adjust",
    "POST /admin/v1/accounts/{id}/suspend": "account.suspend", "POST /admin/accounts/{id}/suspend": "account.suspend",
    "POST /admin/v1/accounts/{id}/resume": "account.resume", "POST /admin/accounts/{id}/resume": "account.resume",
    "PATCH /admin/v1/accounts/{id}": "account.update", "POST /admin/accounts/{id}/settings": "account.update",
    "POST /admin/accounts/{id}/phone": "account.set_phone",
    "POST /admin/v1/accounts/{id}/notes": "account.note", "POST /admin/accounts/{id}/notes": "account.note",
    "POST /admin/v1/accounts/{id}/keys": "key.create", "POST /admin/accounts/{id}/keys": "key.create",
    "PATCH /admin/v1/keys/{key_id}": "key.update", "POST /admin/accounts/{id}/keys/{key_id}/update": "key.update",
    "DELETE /admin/v1/keys/{key_id}": "key.revoke", "POST /admin/accounts/{id}/keys/{key_id}/revoke": "key.revoke",
    "PUT /admin/v1/models": "models.load", "POST /admin/v1/models/sync": "models.sync",
    "POST /admin/models/sync": "models.sync",
    "POST /admin/v1/webhooks/resend": "webhook.resend", "POST /admin/webhooks/resend": "webhook.resend",
    "POST /admin/v1/webhooks/test": "webhook.test", "POST /admin/webhooks/test": "webhook.test",
    "POST /admin/v1/payments/{id}/verify": "payments.verify",
    "POST /admin/payments/{order_id}/verify": "payments.verify",
}


# verbs whose service function records its own entry (with before/after, replay, reason): a face's
# generic entry for them (`face_record`) would say the same thing twice
SELF_AUDITED = {"account.set_phone", "account.suspend", "account.resume", "account.note", "account.topup",
                "account.adjust", "migrate"}


def face_record(client, actor: str, action: str, target: str | None = None, detail: dict | None = None) -> None:
    """What a face records after a write it made: `record`, unless the service function did."""
    if verb(action) not in SELF_AUDITED:
        record(client, actor, action, target, detail)


def verb(action: str) -> str:
    """The stable verb of a face's name for a write: a route (``POST /admin/v1/accounts/{id}/topups``)
    by the table, a CLI command path (``account set-free-quota``) by rule, a verb as it is."""
    if action in _ROUTES:
        return _ROUTES[action]
    if action.startswith("POST /admin/payments/"):
        return "payments.verify"
    if " /" in action or action in VERBS:
        return action
    noun, _, rest = action.partition(" ")
    return (noun.replace("-", "_") + "." + rest.replace("-", "_").replace(" ", ".")) if rest else noun


def _plain(value):
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value][:20]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in list(value.items())[:20]}
    text = str(value)
    return text if len(text) <= _MAX_TEXT else text[:_MAX_TEXT] + "…"


def record(client, actor: str, action: str, target: str | None = None, detail: dict | None = None, *,
           before: dict | None = None, after: dict | None = None, replay: bool = False,
           note: str | None = None, account: str | None = None) -> None:
    """Append one entry (and trim the log to MAX_ENTRIES) in one transaction. `action` is a
    verb or a face's name for it; `target` the id acted on (an account, a key, an order)."""
    name = verb(action)
    kind = VERBS.get(name, (name.partition(".")[0], ""))[0]
    detail = {k: _plain(v) for k, v in (detail or {}).items()}
    if note is None:
        note = next((detail[k] for k in ("note", "reason", "text") if isinstance(detail.get(k), str)), None)
    obj_id = target
    if name == "key.create":  # the object is the account the key was made on
        account = account or target
    elif kind == "key":
        obj_id = detail.get("key_id") or target
        if account is None and obj_id:  # the key's owner, for the account filter
            owner = client.get(keyspace.key_owner(str(obj_id)))
            account = store.text(owner) if owner is not None else None
    elif kind == "account":
        account = account or target
    if after is None and name in _SETS:  # a setting's write: what it set is its after
        after = {k: v for k, v in detail.items() if k not in ("key_id", "phone")} or None
    entry = {"id": "aud_" + secrets.token_hex(8), "ts": jalali.utc_iso(time.time()), "actor": actor,
             "action": name, "object": {"type": kind, "id": obj_id}, "account": account,
             "before": _plain(before), "after": _plain(after), "replay": bool(replay),
             "note": _plain(note), "detail": detail, "time": None, "target": target}
    entry["time"] = entry["ts"]  # the older names, beside for old scripts (never instead)
    pipe = client.pipeline(transaction=True)
    pipe.lpush(keyspace.ADMIN_LOG, orjson.dumps(entry))
    pipe.ltrim(keyspace.ADMIN_LOG, 0, MAX_ENTRIES - 1)
    pipe.execute()


def entry(raw) -> dict:
    """A stored entry in the shape above (an entry from before it: its route read as a verb)."""
    e = orjson.loads(raw)
    if "ts" in e:
        return e
    name = verb(e.get("action") or "")
    kind = VERBS.get(name, (name.partition(".")[0], ""))[0]
    detail = e.get("detail") or {}
    target = e.get("target")
    obj_id = detail.get("key_id") or target if kind == "key" else target
    return {"id": "aud_old", "ts": e.get("time"), "actor": e.get("actor"), "action": name,
            "object": {"type": kind, "id": obj_id}, "account": target if kind == "account" else None,
            "before": None, "after": None, "replay": False, "note": detail.get("note"), "detail": detail,
            "time": e.get("time"), "target": target}


def read(client, limit: int = 100) -> list[dict]:
    """The newest `limit` entries (1 to MAX_ENTRIES), newest first."""
    check_limit(limit)
    return [entry(raw) for raw in client.lrange(keyspace.ADMIN_LOG, 0, limit - 1)]


_CHUNK = 500


def search(client, *, actor: str | None = None, account: str | None = None, action: str | None = None,
           start: str | None = None, end: str | None = None, limit: int = 100) -> list[dict]:
    """The newest `limit` entries that match every filter given: `actor` (a token's name, or
    "cli"), `account` (an account id: what was done to it and to its keys), `action` (a verb,
    or its noun: "key" is every key.*), `start`/`end` (Jalali days, Tehran). Reads the log (at
    most MAX_ENTRIES, ~4 MB) `_CHUNK` entries per round trip and stops at `limit` matches."""
    from upgate.services import periods
    from upgate.services.account_rules import normalize_id

    check_limit(limit)
    lo, hi = periods.bounds_ms(start, end)
    if account:
        account = normalize_id(account)
    actor = (actor or "").strip() or None
    action = (action or "").strip() or None
    out: list[dict] = []
    for first in range(0, MAX_ENTRIES, _CHUNK):
        raws = client.lrange(keyspace.ADMIN_LOG, first, first + _CHUNK - 1)
        for raw in raws:
            e = entry(raw)
            ms = _ms(e["ts"])
            if lo is not None and ms < lo:
                return out  # newest first: everything after this is older still
            if hi is not None and ms >= hi:
                continue
            if actor and e["actor"] != actor:
                continue
            if account and e.get("account") != account and e["object"].get("id") != account:
                continue
            if action and e["action"] != action and e["action"].partition(".")[0] != action:
                continue
            out.append(e)
            if len(out) >= limit:
                return out
        if len(raws) < _CHUNK:
            break
    return out


def _ms(iso: str | None) -> int:
    from datetime import datetime

    try:
        return int(datetime.fromisoformat(str(iso).replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        return 0


# ---- what a reader sees -----------------------------------------------------------------------

FIELD_WORDS = {"phone": N_("phone"), "status": N_("status"), "balance_toman": N_("balance"),
               "version": N_("data version"), "free_quota_per_day": N_("free requests a day"),
               "low_balance_toman": N_("low-balance alert"), "name": N_("name"), "rate_limit_rpm": N_("requests a minute"),
               "monthly_limit_toman": N_("monthly limit"), "allowed_models": N_("models"), "expires_at": N_("expiry")}
VALUE_WORDS = {"active": N_("active"), "suspended": N_("suspended")}
CSV_FIELDS = ("id", "ts", "actor", "action", "what", "object_type", "object_id", "account", "before", "after",
              "replay", "note", "detail")


def sentence(e: dict, translate=lambda s: s, object_words=None) -> str:
    """"topped up account 2f0c…" in the reader's language (`translate`): the verb and its object,
    never a route. `object_words(entry)` names the object (default: its id)."""
    words = VERBS.get(e["action"], (None, e["action"]))[1]
    obj = object_words(e) if object_words else (e["object"].get("id") or "")
    text = translate(words) if words else e["action"]
    return text % {"object": obj} if "%(object)s" in text else text


def changes(e: dict) -> list[tuple[str, object, object]]:
    """[(field, before, after)] of what the entry changed, in the order written."""
    before, after = e.get("before") or {}, e.get("after") or {}
    return [(k, before.get(k), after.get(k)) for k in dict.fromkeys([*before, *after])]


def to_csv(entries: list[dict]) -> str:
    """Entries as CSV (csv_safe): the sentence in English, before/after and detail as JSON."""
    from upgate.services import csv_safe

    def row(e):
        dump = lambda v: orjson.dumps(v).decode() if v else ""  # noqa: E731
        return {**e, "what": sentence(e), "object_type": e["object"].get("type"), "object_id": e["object"].get("id"),
                "before": dump(e.get("before")), "after": dump(e.get("after")), "detail": dump(e.get("detail")),
                "replay": "true" if e.get("replay") else "false"}
    return csv_safe.write(CSV_FIELDS, [row(e) for e in entries])


def check_limit(limit) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_ENTRIES:
        raise InvalidLimit(f"limit must be a whole number from 1 to {MAX_ENTRIES}, got {limit!r}", high=MAX_ENTRIES)
    return limit


class InvalidLimit(Reasoned):
    """A limit is out of range."""

    field = "limit"
    reason = "limit_range"
