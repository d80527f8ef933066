"""The catalog in the store (Redis): atomic replace, version and meta, reading it back.

- ``replace`` writes the new catalog to a staging hash, then one Lua call renames it over
  ``keyspace.CATALOG``, stamps ``prices_updated_at`` from Redis ``TIME``, bumps the version in
  ``keyspace.CATALOG_META`` and publishes ``{"t": "catalog", "version": v}``. All three keys
  share the ``{catalog}`` hash tag (one cluster slot), so the swap is atomic everywhere.
- ``read_file``/``load_file`` read a catalog file and the providers file (the rules of a valid
  catalog are ``upgate.catalog.rules``'s).
- ``sync`` reprices a provider's models from an upstream model list (``upgate.catalog.price_sync``
  holds the rules) and swaps the result in the same way.

Sync service layer (redis.Redis / redis.RedisCluster clients): the CLI and the management API
call these functions; the gateway's in-memory copy is ``upgate.catalog.cache``.
"""
from __future__ import annotations

import logging
import os
import tomllib
from dataclasses import dataclass
from decimal import Decimal
from urllib.parse import urlsplit, urlunsplit

import pycurl

import orjson
import redis.exceptions

from upgate.billing import jalali
from upgate.catalog import price_sync
from upgate.store import keyspace
from upgate.catalog.rules import CatalogError, Model, parse, validate
from upgate.catalog.price_sync import SyncError
from upgate.store.connection import text

# Swap the staged catalog in, atomically.
# Input:  KEYS[1] staging hash (model id → JSON), KEYS[2] the catalog hash, KEYS[3] the meta hash
#         (all with the {catalog} tag: one slot). ARGV[1] the pub/sub channel. ARGV[2] the
#         provider a `models sync` priced ('' for a load), ARGV[3] its record (JSON object:
#         source, usd_toman, markup), stored as meta field `sync:<provider>` with `at` (unix
#         seconds, Redis TIME) and `version` added. ARGV[4] the version the caller based the
#         catalog on ('' = any): another one in force refuses the swap, nothing written.
# Output: {version, seconds, microseconds} (prices_updated_at is Redis TIME), or the error
#         "stale" when ARGV[4] is not the version in force.
SWAP = """
local rcall = redis.call
local staging, models, meta = KEYS[1], KEYS[2], KEYS[3]
local channel, provider, record, expect = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
if expect ~= '' and (rcall('HGET', meta, 'version') or '') ~= expect then
  rcall('DEL', staging)
  return redis.error_reply('stale')
end
local now = rcall('TIME')
rcall('RENAME', staging, models)
rcall('PERSIST', models)
rcall('HSET', meta, 'prices_updated_at', now[1] .. '.' .. string.format('%06d', tonumber(now[2])))
local version = rcall('HINCRBY', meta, 'version', 1)
if provider ~= '' then
  local rec = cjson.decode(record)
  rec['at'] = now[1]
  rec['version'] = tostring(version)
  rcall('HSET', meta, 'sync:' .. provider, cjson.encode(rec))
end
rcall('PUBLISH', channel, '{"t":"catalog","version":"' .. version .. '"}')
return {version, now[1], now[2]}
"""

# Read the catalog and its meta in one atomic step.
# Input:  KEYS[1] the meta hash, KEYS[2] the catalog hash.
# Output: {meta as a flat field/value list, catalog as a flat id/JSON list}
READ = """
return {redis.call('HGETALL', KEYS[1]), redis.call('HGETALL', KEYS[2])}
"""


def _pairs(flat) -> dict[str, str]:
    flat = [text(x) for x in flat]
    return dict(zip(flat[0::2], flat[1::2]))


class StaleCatalog(CatalogError):
    """Another catalog was stored between reading the one in force and replacing it."""


def replace(client, models: list[Model], *, sync: tuple[str, dict] | None = None,
            expect_version: str | None = None) -> tuple[str, float]:
    """Replace the catalog atomically with `models` (already validated by `parse`): stage a
    new hash, then one Lua call renames it in, stamps prices_updated_at from Redis TIME,
    bumps the version and publishes the swap. Sync client. Returns (version, prices_updated_at).
    `sync` = (provider, {"source", "usd_toman", "markup"}) records a price sync with the
    version; `expect_version` refuses the swap (StaleCatalog) when another version is in force."""
    if not models:
        raise CatalogError("refusing to store an empty catalog")
    staging = f"{keyspace.CATALOG}:staging:{os.urandom(8).hex()}"
    pipe = client.pipeline(transaction=False)
    pipe.hset(staging, mapping={m.id: orjson.dumps(m.to_json()) for m in models})
    pipe.expire(staging, 600)  # a crash between the two steps leaves nothing behind for long
    pipe.execute()
    provider, record = sync if sync is not None else ("", {})
    try:
        version, sec, usec = client.eval(SWAP, 3, staging, keyspace.CATALOG, keyspace.CATALOG_META,
                                         keyspace.CHANNEL, provider, orjson.dumps(record),
                                         expect_version or "")
    except redis.exceptions.ResponseError as e:
        if "stale" not in str(e):
            raise
        raise StaleCatalog("the catalog changed while this ran (another load or sync): "
                           "run it again") from None
    return text(version), int(sec) + int(usec) / 1_000_000


def store(client, models: list[Model]) -> str:
    """`replace`, returning only the new version."""
    return replace(client, models)[0]


def read_provider_names(providers_path) -> set[str]:
    """The ``[providers.X]`` names of the providers file (validated by the upstream module
    when it is available). Raises CatalogError with one line for the operator."""
    try:
        from upgate.upstream.providers import ProvidersError, load_providers
    except ImportError:  # pragma: no cover - the upstream package ships with upgate
        try:
            with open(providers_path, "rb") as f:
                doc = tomllib.load(f)
        except FileNotFoundError:
            raise CatalogError(f"providers file not found: {providers_path}") from None
        except (OSError, tomllib.TOMLDecodeError) as e:
            raise CatalogError(f"cannot read providers file {providers_path}: {e}") from None
        table = doc.get("providers")
        if not isinstance(table, dict) or not table:
            raise CatalogError(f"providers file {providers_path} has no [providers.NAME] table")
        return set(table)
    quiet = logging.getLogger("upgate.upstream")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # an unset API key only matters to the gateway, not here
    try:
        return set(load_providers(providers_path))
    except ProvidersError as e:
        raise CatalogError(str(e)) from None
    finally:
        quiet.setLevel(level)


def read_file(path, providers_path) -> list[Model]:
    """Read and validate a catalog file (nothing is written). `providers_path` None skips the
    provider-name check. Raises CatalogError: one line, prefixed with the file's path."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise CatalogError(f"catalog file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise CatalogError(f"cannot read catalog file {path}: {e}") from None
    names = read_provider_names(providers_path) if providers_path is not None else None
    try:
        return parse(text, names)
    except CatalogError as e:
        raise CatalogError(f"{path}: {e}") from None


def load_file(client, path, providers_path) -> tuple[int, str]:
    """Read, validate and store a catalog file: returns (number of models, new version).
    Nothing is written when the file is refused."""
    models = read_file(path, providers_path)
    return len(models), store(client, models)


def decode_snapshot(raw) -> tuple[dict[str, str], list[Model]]:
    meta_flat, models_flat = raw
    meta = _pairs(meta_flat)
    models = [Model.from_json(orjson.loads(v)) for v in _pairs(models_flat).values()]
    models.sort(key=lambda m: m.id)
    return meta, models


def read(client) -> tuple[str | None, float | None, list[Model]]:
    """(version, prices_updated_at, models sorted by id, hidden included) — sync client."""
    meta, models = decode_snapshot(client.eval(READ, 2, keyspace.CATALOG_META, keyspace.CATALOG))
    updated = meta.get("prices_updated_at")
    return meta.get("version"), float(updated) if updated else None, models


def syncs(meta: dict[str, str]) -> dict[str, dict]:
    """Provider → its last `models sync` record ({"source", "usd_toman", "markup", "at" (ISO
    8601 UTC), "version"}), from the catalog's meta hash."""
    out = {}
    for name, raw in meta.items():
        if name.startswith("sync:"):
            try:
                rec = orjson.loads(raw)
                rec["at"] = jalali.utc_iso(int(rec["at"]))
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                continue
            out[name[len("sync:"):]] = rec
    return out


def read_syncs(client) -> dict[str, dict]:
    """The last price sync of each provider (see `syncs`) — sync client."""
    return syncs({text(k): text(v) for k, v in client.hgetall(keyspace.CATALOG_META).items()})


# ---- models sync: reprice from an upstream model list ------------------------------------------

MAX_SOURCE_BYTES = 32 * 1024 * 1024  # OpenRouter's whole list is a few MB
SOURCE_TIMEOUT_S = 30.0


class ChangeTooLarge(SyncError):
    """A price moves more than --max-change allows (or --prune removes too many models):
    refused unless confirmed, so a broken source cannot zero the catalog."""

    reason = "price_change_too_large"

    def __init__(self, message: str, outcome: "SyncOutcome"):
        super().__init__(message, "max_change")
        self.outcome = outcome


@dataclass
class SyncOutcome:
    version: str | None  # the version in force afterwards
    plan: price_sync.Plan
    applied: bool
    over_limit: str | None = None  # why --max-change refuses it (a dry run reports, never refuses)

    def to_json(self) -> dict:
        """`{"version", "changed", "added", "removed", "unchanged"}` (docs/prices.md)."""
        return {"version": self.version,
                **{kind: [c.row() for c in self.plan.of(kind)] for kind in ("changed", "added", "removed")},
                "unchanged": self.plan.unchanged}


def fetch(source: str, *, timeout_s: float = SOURCE_TIMEOUT_S, max_bytes: int | None = None) -> bytes:
    """The source's bytes: an http(s) URL (price_sync.source_url; one GET, no redirect followed,
    within `timeout_s` in all) or a file, never more than `max_bytes` (default
    MAX_SOURCE_BYTES). Raises SyncError with one line."""
    max_bytes = MAX_SOURCE_BYTES if max_bytes is None else max_bytes
    if price_sync.source_url(source) is None:
        try:
            with open(source, "rb") as f:
                raw = f.read(max_bytes + 1)
        except OSError as e:
            raise SyncError(f"cannot read the source {source}: {e.strerror or e}", "source") from None
        if len(raw) > max_bytes:
            raise SyncError(f"the source is larger than {max_bytes} bytes: refused", "source")
        return raw
    buf = bytearray()

    def write(chunk: bytes):
        buf.extend(chunk)
        return None if len(buf) <= max_bytes else 0  # 0 aborts the transfer

    c = pycurl.Curl()
    try:
        c.setopt(pycurl.URL, source)
        c.setopt(pycurl.WRITEFUNCTION, write)
        c.setopt(pycurl.NOSIGNAL, 1)
        c.setopt(pycurl.FOLLOWLOCATION, 0)  # a redirect could lead anywhere: refused below
        c.setopt(pycurl.PROTOCOLS, pycurl.PROTO_HTTP | pycurl.PROTO_HTTPS)
        c.setopt(pycurl.TIMEOUT_MS, max(1, int(timeout_s * 1000)))
        c.setopt(pycurl.ACCEPT_ENCODING, "")
        c.perform()
        status = c.getinfo(pycurl.RESPONSE_CODE)
    except pycurl.error as e:
        if len(buf) > max_bytes:
            raise SyncError(f"the source is larger than {max_bytes} bytes: refused", "source") from None
        code = e.args[0] if e.args else None
        if code == pycurl.E_OPERATION_TIMEDOUT:
            raise SyncError(f"the source did not answer within {timeout_s:g} s", "source") from None
        raise SyncError(f"cannot fetch the source: {e.args[-1] if e.args else e}", "source") from None
    finally:
        c.close()
    if 300 <= status < 400:
        raise SyncError(f"the source answered HTTP {status} (a redirect): redirects are not followed; "
                        "give the final URL", "source")
    if status != 200:
        raise SyncError(f"the source answered HTTP {status}, not 200", "source")
    return bytes(buf)


def sync(client, source: str, *, provider: str, usd_toman, markup="1", include=(), prune: bool = False,
         dry_run: bool = False, max_change="30", confirmed: bool = False,
         provider_names: set[str] | None = None, timeout_s: float = SOURCE_TIMEOUT_S,
         max_bytes: int | None = None) -> SyncOutcome:
    """Reprice `provider`'s models from the upstream list at `source` (price_sync.plan), check
    the result like `models load` and swap it in, recording the source, rate and markup with
    the version. Dry run: the plan only. Raises SyncError (nothing written); ChangeTooLarge
    when a price moves more than `max_change` percent and `confirmed` is false."""
    rate, factor = price_sync.factor(usd_toman, "usd_toman"), price_sync.factor(markup, "markup")
    limit = price_sync.percent(max_change)
    if provider_names is not None and provider not in provider_names:
        known = ", ".join(sorted(provider_names)) or "none"
        raise SyncError(f"provider {provider!r} is not in the providers file (known: {known})", "provider")
    models = price_sync.read_source(fetch(source, timeout_s=timeout_s, max_bytes=max_bytes))
    version, _updated, old = read(client)
    plan = price_sync.plan(old, models, provider=provider, rate=rate, markup=factor,
                           include=tuple(include), prune=prune)
    try:
        new = validate(plan.entries, provider_names)
    except CatalogError as e:
        raise SyncError(f"the synced catalog is refused: {e}", "source") from None
    outcome = SyncOutcome(version, plan, applied=False, over_limit=_over_limit(plan, old, provider, limit))
    if dry_run or not plan.changes:
        return outcome
    if outcome.over_limit and not confirmed:
        raise ChangeTooLarge(outcome.over_limit, outcome)
    record = {"source": _shown(source), "usd_toman": str(rate), "markup": str(factor)}
    outcome.version, _ = replace(client, new, sync=(provider, record), expect_version=version)
    outcome.applied = True
    return outcome


def _shown(source: str) -> str:
    """The source as recorded and shown: a URL without any user:password in it."""
    parts = urlsplit(source)
    if parts.scheme in ("http", "https") and (parts.username or parts.password):
        return urlunsplit(parts._replace(netloc=parts.hostname + (f":{parts.port}" if parts.port else "")))
    return source


def _over_limit(plan: price_sync.Plan, old: list[Model], provider: str, limit: Decimal) -> str | None:
    """Why the plan moves more than `limit` percent, or None: a price moving further (or from
    0), or --prune removing a larger share of the provider's models."""
    worst = plan.worst_pct()
    if worst is None or worst > limit:
        moved = "from 0" if worst is None else f"by {worst}%"
        return (f"a price moves {moved}, over --max-change {limit}%: check the source and the "
                "rate, then run again with --yes")
    removed = len(plan.of("removed"))
    if removed:
        mine = sum(1 for m in old if m.provider == provider)
        if Decimal(removed * 100) / mine > limit:
            return (f"--prune removes {removed} of {mine} {provider} models, over --max-change "
                    f"{limit}%: run again with --yes")
    return None

