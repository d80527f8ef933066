"""API keys: the record and the operator's key operations on the store. The format, the hash,
the checks on each setting and the runtime view the gateway's auth cache keeps (``KeyInfo``) are
the pure upgate/services/key_rules.py, whose names this module also offers.

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

import re
import secrets
import time
from datetime import date, datetime, timedelta

import orjson

from upgate.billing import jalali, money
from upgate.catalog import aliases, store as catalog_store
from upgate.services import accounts, phones
from upgate.store import connection as store, keyspace
from upgate.services.accounts import UnknownAccount, atomic_write
from upgate.services.key_rules import (  # noqa: F401  (the rules are part of this module's API)
    ALPHABET, check_expires, check_models, check_monthly_limit, check_name, check_rpm, digest,
    display, generate, InvalidKeySetting, iso_ms, KEY_BODY_LENGTH, KEY_ID_SHAPE, KEY_LENGTH,
    KEY_PREFIX, KeyAdminError, KeyInfo, KeyRevoked, NAME_MAX, parse_expires, parse_models,
    parse_monthly_limit, parse_rpm, PepperMissing, PREFIX_LENGTH, RPM_DEFAULT, RPM_MAX, RPM_MIN, state, UnknownKey,
    view, well_formed,
)


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
    if not isinstance(key_id, str) or not KEY_ID_SHAPE.fullmatch(key_id):
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
    return view(_record(client, acct, key_id), jalali.month_key())


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
        raise InvalidKeySetting("nothing to change: give at least one setting", reason="nothing_to_change")

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
    out = [view(store.text_map(raw), month) for raw in pipe.execute() if raw] if kids else []
    out.sort(key=lambda v: (v["created_at"], v["key_id"]))
    return out


JALALI_DATE = re.compile(r"^(1[2-4][0-9]{2})[-/]([0-9]{1,2})[-/]([0-9]{1,2})$")
GREGORIAN_DATE = re.compile(r"^(19|20|21)[0-9]{2}-[0-9]{2}-[0-9]{2}$")


def parse_form_expiry(text: str) -> int:
    """A form's expiry: a Jalali date (``1405/12/29``; years 1200–1499 cannot be Gregorian
    ones a person means), in either language's page, means the END of that day in Tehran: the
    key works through it and stops as the next day begins (00:00 Tehran). A Gregorian date
    alone (``2031-03-21``, what a browser's date picker sends) means the same: the end of that
    day in Tehran, so one day typed either way is one expiry. Anything else is `parse_expires`'s
    ISO 8601 (a time without a zone is UTC). Must be in the future."""
    text = text.strip()
    m = JALALI_DATE.match(text)
    if m:
        try:
            day = jalali.parse_day("-".join(m.groups())).togregorian()
        except ValueError as e:
            raise InvalidKeySetting(str(e), reason="date_malformed") from None
    elif GREGORIAN_DATE.match(text):
        try:
            day = date.fromisoformat(text)
        except ValueError:
            raise InvalidKeySetting(f"not a date: {text!r}", reason="date_malformed") from None
    else:
        return parse_expires(text)
    end = datetime.combine(day + timedelta(days=1), datetime.min.time(), jalali.TEHRAN)
    return check_expires(int(end.timestamp() * 1000))


def catalog_models(client, models: list[str] | None) -> tuple[list[str] | None, list[str]]:
    """The one rule for allowed models against the catalog in force: (the list with every
    alias, exact or a pattern like ``claude-sonnet-*``, replaced by its model's catalog id, the
    names the catalog knows in no way). No catalog loaded yet: nothing is unknown. The customer's
    dashboard refuses an unknown name; the operator's faces say so and allow it (a model may be
    added later)."""
    if not models:
        return models, []
    version, _updated, items = catalog_store.read(client)
    if version is None:
        return list(models), []
    ids = {m.id for m in items}
    exact = {a: m.id for m in items for a in m.aliases if not aliases.is_pattern(a)}
    patterns = aliases.Patterns([(a, m.id) for m in items for a in m.aliases if aliases.is_pattern(a)])
    out, unknown = [], []
    for name in models:  # the routes' own rule (catalog/aliases.py): exact, then the longest pattern
        found = name if name in ids else exact.get(name) or patterns.match(name)
        if found is None:
            unknown.append(name)
        out.append(found or name)
    return list(dict.fromkeys(out)), unknown


def check_catalog(client, models: list[str] | None) -> list[str] | None:
    """`catalog_models`, refusing a name the catalog does not know (`model_unknown`)."""
    resolved, unknown = catalog_models(client, models)
    if unknown:
        e = InvalidKeySetting(f"not in the catalog in force: {', '.join(unknown)}", reason="model_unknown",
                              model=", ".join(unknown)[:120])
        e.field = "allowed_models"
        raise e
    return resolved


def form_settings(arg, *, clearing: bool) -> dict:
    """A key form's fields (named as the management API names them: name, rate_limit_rpm,
    monthly_limit_toman, allowed_models, expires_at; `arg(field)` → the trimmed text) →
    `create_key` / `update_key` arguments, through the parsers above. Persian and
    Arabic-Indic digits count as digits. Creating, a blank field is left out; updating
    (`clearing`), a blank field clears its setting (rpm stays). The console's and the
    dashboard's forms both come here."""
    def text(field: str) -> str:
        return phones.ascii_digits(arg(field) or "").strip()

    parsers = {"monthly_limit_toman": ("monthly_limit_micro",  # "۵۰٬۰۰۰" as the page prints it
                                       parse_monthly_limit),
               "allowed_models": ("allowed_models", parse_models),
               "expires_at": ("expires_at_ms", parse_form_expiry)}
    out: dict = {}
    name = (arg("name") or "").strip()
    if name or clearing:
        out["name"] = name or None
    try:
        field = "rate_limit_rpm"
        if text(field):
            out["rpm"] = parse_rpm(text(field))
        for field, (kwarg, parse) in parsers.items():
            if text(field):
                out[kwarg] = parse(text(field))
            elif clearing:
                out[kwarg] = None
    except ValueError as e:
        e.field = field  # the form field at fault, for a face that names it in its own words
        raise
    return out


FORM_FIELDS = ("name", "rate_limit_rpm", "monthly_limit_toman", "allowed_models", "expires_at")


def customer_form_settings(client, fields: dict[str, str], *, clearing: bool) -> dict:
    """`form_settings` for an account holder's form: the allowed models must be ones the catalog
    offers, and an alias (a name an agent sends, exact or a pattern) is taken as its model's id
    before the ids' shape is checked (`check_catalog`)."""
    names = [p.strip() for p in (fields.get("allowed_models") or "").split(",") if p.strip()]
    if names:
        fields = {**fields, "allowed_models": ", ".join(check_catalog(client, names))}
    return form_settings(lambda f: fields.get(f, ""), clearing=clearing)


def key_object(v: dict) -> dict:
    """THE key object (OPERATORS.md), from a key view: what the management API, the console
    and `upgate-admin key … --json` all show. Amounts as toman strings, times ISO 8601 UTC;
    `rate_limit_rpm` and `status` are the API's names, `rpm` and `state` stay beside them for
    old scripts. Never the hash, never the full key."""
    limit = v["monthly_limit_micro"]
    return {
        "key_id": v["key_id"],
        "account_id": v["account_id"],
        "name": v["name"],
        "prefix": v["prefix"],
        "last4": v["last4"],
        "rate_limit_rpm": v["rpm"],
        "rpm": v["rpm"],
        "monthly_limit_toman": money.fmt(limit) if limit is not None else None,
        "spent_this_month_toman": money.fmt(v["spent_this_month_micro"]),
        "held_toman": money.fmt(v["held_micro"]),
        "allowed_models": v["allowed_models"],
        "expires_at": iso_ms(v["expires_at_ms"]) if v["expires_at_ms"] is not None else None,
        "status": v["state"],
        "state": v["state"],
        "created_at": jalali.utc_iso(v["created_at"]) if v["created_at"] else None,
    }


to_json = key_object  # the name `key list --json` used: one object, one function


_PREFIX_QUERY = re.compile(r"(sk-up-[A-Za-z0-9]{4})(?:(?:…|\.\.\.)([A-Za-z0-9]{4}))?")


def looks_like_prefix(text) -> bool:
    """True for what an operator has of a key: its prefix (``sk-up-AbCd``), or how it is shown
    (``sk-up-AbCd…wxyz``)."""
    return isinstance(text, str) and _PREFIX_QUERY.fullmatch(text.strip()) is not None


def key_fields(client, account_ids: list[str], fields: tuple[str, ...], batch: int = 1000):
    """(account id, key id, [the key record's `fields`]) of every key of `account_ids`: two
    pipelined round trips per `batch` accounts (their key sets, then the fields). What a search
    over keys without an index reads (find_by_prefix, the console's accounts list)."""
    for start in range(0, len(account_ids), batch):
        chunk = account_ids[start:start + batch]
        pipe = client.pipeline(transaction=False)
        for acct in chunk:
            pipe.smembers(keyspace.account_keys(acct))
        pairs = [(acct, store.text(k)) for acct, kids in zip(chunk, pipe.execute()) for k in kids]
        if not pairs:
            continue
        pipe = client.pipeline(transaction=False)
        for acct, kid in pairs:
            pipe.hmget(keyspace.key_record(acct, kid), *fields)
        for (acct, kid), values in zip(pairs, pipe.execute()):
            yield acct, kid, [store.text(v) if v is not None else None for v in values]


def find_by_prefix(client, text: str, batch: int = 500) -> list[dict]:
    """The key objects whose prefix (and last four, when given) match, oldest first. Prefixes
    are not unique (four random characters) and not indexed: this reads every account's key
    set and each key's prefix, two round trips per `batch` accounts (an operator's search,
    never a request's path)."""
    m = _PREFIX_QUERY.fullmatch(text.strip()) if isinstance(text, str) else None
    if m is None:
        raise InvalidKeySetting(f"a key prefix looks like sk-up-AbCd (or sk-up-AbCd…wxyz), got {str(text)[:40]!r}",
                                 reason="prefix_malformed")
    prefix, last4 = m.group(1), m.group(2)
    ids = sorted(store.text(a) for a in client.sscan_iter(keyspace.ACCOUNTS, count=1000))
    found = [(acct, kid) for acct, kid, (p, l4) in key_fields(client, ids, ("prefix", "last4"), batch)
             if p == prefix and (last4 is None or l4 == last4)]
    month = jalali.month_key()
    out = [view(_record(client, acct, kid), month) for acct, kid in found]
    out.sort(key=lambda v: (v["created_at"], v["key_id"]))
    return [key_object(v) for v in out]


# ---- the key object for every face -----------------------------------------------------------

def create(client, pepper: str, account_id: str, **settings) -> dict:
    """Create a key (create_key) and answer its object with the full key under "key": the
    only time it is shown."""
    full, key_id, _prefix = create_key(client, pepper, account_id, **settings)
    return dict(key_object(find_key(client, key_id)), key=full)


def get(client, key_id: str) -> dict:
    return key_object(find_key(client, key_id))


def objects(client, account_id: str) -> list[dict]:
    """Every key of the account as key objects, oldest first."""
    return [key_object(v) for v in list_keys(client, account_id)]


def update(client, key_id: str, **changes) -> dict:
    """update_key, then the key object."""
    return key_object(update_key(client, key_id, **changes))


def revoke(client, key_id: str, *, account_id: str | None = None) -> tuple[dict, bool]:
    """revoke_key; (the key object after it, whether it was live until now)."""
    changed = revoke_key(client, key_id, account_id=account_id)
    return get(client, key_id), changed


__all__ = [
    "KEY_PREFIX", "KeyInfo", "generate", "well_formed", "digest", "display",
    "create_key", "update_key", "revoke_key", "list_keys", "find_key", "UNSET",
    "KeyAdminError", "InvalidKeySetting", "UnknownKey", "KeyRevoked", "PepperMissing",
    "UnknownAccount", "check_rpm", "parse_rpm", "check_monthly_limit", "check_models",
    "parse_models", "check_expires", "parse_expires", "check_name", "state", "to_json", "key_object",
    "create", "get", "objects", "update", "revoke", "parse_monthly_limit", "find_by_prefix",
    "looks_like_prefix",
]
