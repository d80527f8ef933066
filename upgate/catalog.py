"""The model catalog: ids, prices, capabilities, and the copy every gateway node keeps in memory.

Where it lives:

- The operator writes a TOML file (``[[models]]`` entries, amounts as decimal strings) and runs
  ``upgate-admin models load FILE``. ``parse`` validates the *whole* file first; one bad entry
  refuses the load and the catalog in force stays as it was.
- ``store`` writes the new catalog to a staging hash, then one Lua call renames it over
  ``keyspace.CATALOG``, stamps ``prices_updated_at`` from Redis ``TIME``, bumps the version in
  ``keyspace.CATALOG_META`` and publishes ``{"t": "catalog", "version": v}``. All three keys
  share the ``{catalog}`` hash tag (one cluster slot), so the swap is atomic everywhere.
- Every node holds a ``Catalog``: one immutable snapshot read in one Lua call (records and
  version together) and swapped in by a single assignment, so a request never sees half of
  one catalog and half of another. It reloads on the pub/sub event and, in case a message
  was missed, on a version poll.

Resolving a model id (``Catalog.resolve``), in this order:

1. A malformed id (no ``<provider>/`` prefix, uppercase, an unknown ``:suffix``) is
   404 ``model_not_found`` even before any catalog was loaded: no catalog could ever hold it.
2. No catalog loaded yet → 503 ``pricing_unavailable``.
3. An id that is not in the catalog, or is ``hidden``, → 404 ``model_not_found``.
"""
from __future__ import annotations

import asyncio
import logging
import os
import re
import tomllib
from dataclasses import dataclass, field
from decimal import Decimal

import orjson

from upgate import keyspace, money
from upgate.background import stop_if_cancelled
from upgate.errors import GatewayError
from upgate.store import text

log = logging.getLogger("upgate.catalog")

# <provider>/<model>[/<more>][:free|:batch|:online], lowercase. Every path segment starts with
# a letter or digit, so there is no leading, trailing or doubled '/', and no '.'/'..' segment.
MODEL_ID = re.compile(
    r"^(?!.*\.\.)[a-z0-9][a-z0-9._-]*(?:/[a-z0-9][a-z0-9._-]*)+(?::(?:free|batch|online))?$")
MAX_ID_LENGTH = 200

CAPABILITIES = frozenset({"chat", "embeddings", "completions"})
PRICE_FIELDS = ("prompt_toman_per_million", "completion_toman_per_million",
                "request_toman", "web_search_toman")
_REQUIRED_PRICES = ("prompt_toman_per_million", "completion_toman_per_million")
_FIELDS = frozenset({"id", "provider", "upstream_model", "name", *PRICE_FIELDS, "capabilities",
                     "context_length", "max_output_tokens", "hidden"})
_DECIMAL = re.compile(r"^[0-9]+(?:\.[0-9]+)?$")
_ZERO = money.to_decimal(0)


def valid_id(model_id: str) -> bool:
    """True when `model_id` has the shape the spec allows (it may still be unknown)."""
    return (isinstance(model_id, str) and len(model_id) <= MAX_ID_LENGTH
            and MODEL_ID.match(model_id) is not None)


def _micro(toman) -> int:
    scaled = Decimal(toman or 0) * money.MICRO
    if scaled != scaled.to_integral_value():
        raise ValueError(f"a price has more than six fractional digits: {toman}")
    return int(scaled)


@dataclass(frozen=True)
class Model:
    id: str
    provider: str  # a [providers.X] name: where requests for this model are sent
    upstream_model: str  # the model name the provider expects
    name: str
    prompt_toman_per_million: Decimal
    completion_toman_per_million: Decimal
    request_toman: Decimal
    web_search_toman: Decimal
    capabilities: frozenset[str]
    context_length: int | None = None
    max_output_tokens: int | None = None
    hidden: bool = False
    free: bool = field(init=False)  # id ends with ":free"
    online: bool = field(init=False)  # id ends with ":online"
    # The four prices as exact integers, for pricing without Decimal on every request:
    # (prompt, completion) in micro-toman per million tokens, (request, web search) in micro-toman.
    rates: tuple[int, int, int, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "free", self.id.endswith(":free"))
        object.__setattr__(self, "online", self.id.endswith(":online"))
        object.__setattr__(self, "rates", tuple(_micro(getattr(self, f)) for f in PRICE_FIELDS))

    @property
    def owned_by(self) -> str:
        """The provider part of the id (``openai`` in ``openai/gpt-4o-mini``)."""
        return self.id.split("/", 1)[0]

    def to_json(self) -> dict:
        """The stored form (prices as six-fractional-digit strings)."""
        return {
            "id": self.id, "provider": self.provider, "upstream_model": self.upstream_model,
            "name": self.name,
            **{f: money.fmt(money.parse_toman(getattr(self, f))) for f in PRICE_FIELDS},
            "capabilities": sorted(self.capabilities),
            "context_length": self.context_length, "max_output_tokens": self.max_output_tokens,
            "hidden": self.hidden,
        }

    @classmethod
    def from_json(cls, d: dict) -> "Model":
        return cls(
            id=d["id"], provider=d["provider"], upstream_model=d["upstream_model"], name=d["name"],
            **{f: Decimal(d[f]) for f in PRICE_FIELDS},
            capabilities=frozenset(d["capabilities"]),
            context_length=d.get("context_length"), max_output_tokens=d.get("max_output_tokens"),
            hidden=bool(d.get("hidden", False)),
        )


class CatalogError(ValueError):
    """The catalog file is refused; the message is one line naming the entry and the field."""


# ---- parsing and validation ---------------------------------------------------------------

def _where(index: int, entry: object) -> str:
    mid = entry.get("id") if isinstance(entry, dict) else None
    return f"entry {index + 1} ({mid})" if isinstance(mid, str) and mid else f"entry {index + 1} (no id)"


def _price(where: str, name: str, value: object) -> Decimal:
    if isinstance(value, bool) or value is None:
        raise CatalogError(f'{where}: {name} must be a decimal string like "15000" or "0.5"')
    if isinstance(value, float):
        raise CatalogError(f'{where}: {name} must be a decimal string (write "{value}", not {value}): '
                           "floats are not exact")
    if isinstance(value, int):
        text = str(value)
    elif isinstance(value, str):
        text = value.strip()
    else:
        raise CatalogError(f'{where}: {name} must be a decimal string like "15000" or "0.5"')
    if text.startswith("-"):
        raise CatalogError(f"{where}: {name} must not be negative, got {value!r}")
    if not _DECIMAL.match(text):
        raise CatalogError(f'{where}: {name} must be a decimal string like "15000" or "0.5", got {value!r}')
    try:
        return money.to_decimal(money.parse_toman(text))
    except money.AmountError as e:
        raise CatalogError(f"{where}: {name}: {e}") from None


def _opt_int(where: str, name: str, value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise CatalogError(f"{where}: {name} must be a positive integer, got {value!r}")
    return value


def _opt_str(where: str, name: str, value: object, default: str) -> str:
    if value is None:
        return default
    if not isinstance(value, str) or not value.strip():
        raise CatalogError(f"{where}: {name} must be a non-empty string, got {value!r}")
    return value.strip()


def _entry(index: int, entry: object, provider_names: set[str] | None) -> Model:
    where = _where(index, entry)
    if not isinstance(entry, dict):
        raise CatalogError(f"{where}: must be a [[models]] table")
    unknown = sorted(set(entry) - _FIELDS)
    if unknown:
        raise CatalogError(f"{where}: unknown field {unknown[0]!r} "
                           f"(known: {', '.join(sorted(_FIELDS))})")

    mid = entry.get("id")
    if not isinstance(mid, str) or not mid:
        raise CatalogError(f"{where}: id is required (a string like \"openai/gpt-4o-mini\")")
    if not valid_id(mid):
        hint = "lowercase" if mid != mid.lower() else "shaped"
        raise CatalogError(f"{where}: id {mid!r} is not {hint} like <provider>/<model>"
                           "[:free|:batch|:online] (lowercase letters, digits, '.', '_', '-')")

    provider = entry.get("provider")
    if not isinstance(provider, str) or not provider:
        raise CatalogError(f"{where}: provider is required (a [providers.NAME] name)")
    if provider_names is not None and provider not in provider_names:
        known = ", ".join(sorted(provider_names)) or "none"
        raise CatalogError(f"{where}: provider {provider!r} is not in the providers file (known: {known})")

    prices = {}
    for name in PRICE_FIELDS:
        if name not in entry:
            if name in _REQUIRED_PRICES:
                raise CatalogError(f'{where}: {name} is required (a decimal string like "15000")')
            prices[name] = _ZERO
            continue
        prices[name] = _price(where, name, entry[name])
    if mid.endswith(":free") and any(prices.values()):
        paid = next(n for n in PRICE_FIELDS if prices[n])
        raise CatalogError(f'{where}: {paid} must be "0" for a :free model')

    caps = entry.get("capabilities", ["chat"])
    if not isinstance(caps, list) or not caps or not all(isinstance(c, str) for c in caps):
        raise CatalogError(f"{where}: capabilities must be a non-empty list of strings "
                           f"({', '.join(sorted(CAPABILITIES))})")
    bad = [c for c in caps if c not in CAPABILITIES]
    if bad:
        raise CatalogError(f"{where}: unknown capability {bad[0]!r} "
                           f"(known: {', '.join(sorted(CAPABILITIES))})")

    hidden = entry.get("hidden", False)
    if not isinstance(hidden, bool):
        raise CatalogError(f"{where}: hidden must be true or false, got {hidden!r}")

    return Model(
        id=mid,
        provider=provider,
        upstream_model=_opt_str(where, "upstream_model", entry.get("upstream_model"), mid),
        name=_opt_str(where, "name", entry.get("name"), mid),
        capabilities=frozenset(caps),
        context_length=_opt_int(where, "context_length", entry.get("context_length")),
        max_output_tokens=_opt_int(where, "max_output_tokens", entry.get("max_output_tokens")),
        hidden=hidden,
        **prices,
    )


def _toml_kind(value: object) -> str:
    """How the operator wrote `value` in TOML, for a message."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a float"
    if isinstance(value, str):
        return "a string"
    return "a date or time"


def parse(text: str, provider_names: set[str] | None) -> list[Model]:
    """Validate a whole catalog file; raise CatalogError at the first refused entry.

    `provider_names` are the names of the providers file's ``[providers.X]`` tables; None
    skips that check (the caller vouches for the providers)."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise CatalogError(f"not valid TOML: {e}") from None
    extra = sorted(set(doc) - {"models"})
    if extra:
        raise CatalogError(f"unknown top-level key {extra[0]!r}: the file holds only [[models]] entries")
    entries = doc.get("models")
    if isinstance(entries, dict):
        raise CatalogError("models is a single table ([models]); write each model as its own "
                           "[[models]] entry, with double brackets")
    if entries is not None and not isinstance(entries, list):
        raise CatalogError(f"models is {_toml_kind(entries)}; write each model as its own "
                           "[[models]] entry")
    if not entries:
        raise CatalogError("no [[models]] entries: refusing to load an empty catalog")
    models: list[Model] = []
    first: dict[str, int] = {}
    for i, entry in enumerate(entries):
        m = _entry(i, entry, provider_names)
        if m.id in first:
            raise CatalogError(f"{_where(i, entry)}: duplicate id, first defined in entry {first[m.id] + 1}")
        first[m.id] = i
        models.append(m)
    return models


# ---- the store: atomic replace --------------------------------------------------------------

# Swap the staged catalog in, atomically.
# Input:  KEYS[1] staging hash (model id → JSON), KEYS[2] the catalog hash, KEYS[3] the meta hash
#         (all with the {catalog} tag: one slot). ARGV[1] the pub/sub channel.
# Output: {version, seconds, microseconds} (prices_updated_at is Redis TIME).
_SWAP = """
local rcall = redis.call
local staging, models, meta = KEYS[1], KEYS[2], KEYS[3]
local channel = ARGV[1]
local now = rcall('TIME')
rcall('RENAME', staging, models)
rcall('PERSIST', models)
rcall('HSET', meta, 'prices_updated_at', now[1] .. '.' .. string.format('%06d', tonumber(now[2])))
local version = rcall('HINCRBY', meta, 'version', 1)
rcall('PUBLISH', channel, '{"t":"catalog","version":"' .. version .. '"}')
return {version, now[1], now[2]}
"""

# Read the catalog and its meta in one atomic step.
# Input:  KEYS[1] the meta hash, KEYS[2] the catalog hash.
# Output: {meta as a flat field/value list, catalog as a flat id/JSON list}
_READ = """
return {redis.call('HGETALL', KEYS[1]), redis.call('HGETALL', KEYS[2])}
"""


def _pairs(flat) -> dict[str, str]:
    flat = [text(x) for x in flat]
    return dict(zip(flat[0::2], flat[1::2]))


def replace(client, models: list[Model]) -> tuple[str, float]:
    """Replace the catalog atomically with `models` (already validated by `parse`): stage a
    new hash, then one Lua call renames it in, stamps prices_updated_at from Redis TIME,
    bumps the version and publishes the swap. Sync client. Returns (version, prices_updated_at)."""
    if not models:
        raise CatalogError("refusing to store an empty catalog")
    staging = f"{keyspace.CATALOG}:staging:{os.urandom(8).hex()}"
    pipe = client.pipeline(transaction=False)
    pipe.hset(staging, mapping={m.id: orjson.dumps(m.to_json()) for m in models})
    pipe.expire(staging, 600)  # a crash between the two steps leaves nothing behind for long
    pipe.execute()
    version, sec, usec = client.eval(_SWAP, 3, staging, keyspace.CATALOG, keyspace.CATALOG_META,
                                     keyspace.CHANNEL)
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


def _decode_snapshot(raw) -> tuple[dict[str, str], list[Model]]:
    meta_flat, models_flat = raw
    meta = _pairs(meta_flat)
    models = [Model.from_json(orjson.loads(v)) for v in _pairs(models_flat).values()]
    models.sort(key=lambda m: m.id)
    return meta, models


def read(client) -> tuple[str | None, float | None, list[Model]]:
    """(version, prices_updated_at, models sorted by id, hidden included) — sync client."""
    meta, models = _decode_snapshot(client.eval(_READ, 2, keyspace.CATALOG_META, keyspace.CATALOG))
    updated = meta.get("prices_updated_at")
    return meta.get("version"), float(updated) if updated else None, models


# ---- records ------------------------------------------------------------------------------

def model_record(m: Model, created: int) -> dict:
    """The OpenAI model shape plus the gateway's fields and the `svc_pricing` block."""
    return {
        "id": m.id,
        "object": "model",
        "created": int(created),
        "owned_by": m.owned_by,
        "name": m.name,
        "context_length": m.context_length,
        "max_output_tokens": m.max_output_tokens,
        "capabilities": sorted(m.capabilities),
        "svc_pricing": {f: money.fmt(money.parse_toman(getattr(m, f))) for f in PRICE_FIELDS},
    }


def admin_record(m: Model, created: int) -> dict:
    """The model record plus what only the operator sees (routing and visibility)."""
    return {**model_record(m, created), "provider": m.provider,
            "upstream_model": m.upstream_model, "hidden": m.hidden}


def check_allowed(allowed: frozenset[str] | None, model_ids: list[str]) -> None:
    """403 model_not_allowed for the first id outside a key's allowed_models (None = all).
    Ids match exactly: `acme/chat-1` does not allow `acme/chat-1:free`."""
    if allowed is None:
        return
    for mid in model_ids:
        if mid not in allowed:
            raise GatewayError("model_not_allowed", f"This key is not allowed to use the model {mid}.")


# ---- the in-memory copy on every node ---------------------------------------------------------

def _not_found(model_id: str) -> GatewayError:
    shown = model_id if len(model_id) <= MAX_ID_LENGTH else model_id[:MAX_ID_LENGTH] + "…"
    return GatewayError("model_not_found", f"The model {shown!r} does not exist.")


class _Snapshot:
    """One catalog version, complete, never mutated: what a node serves between swaps."""

    def __init__(self, version: str, prices_updated_at: float | None, models: list[Model]):
        self.version = version
        self.prices_updated_at = prices_updated_at
        created = int(prices_updated_at or 0)
        self.all = {m.id: m for m in models}
        self.visible = [m for m in models if not m.hidden]
        self.by_id = {m.id: m for m in self.visible}
        # rendered once per version: the models endpoints never re-render per request
        records = [model_record(m, created) for m in self.visible]
        self.list_body = orjson.dumps({"object": "list", "data": records})
        self.record_bodies = {r["id"]: orjson.dumps(r) for r in records}
        paid_chat = [m for m in self.visible if not m.free and "chat" in m.capabilities]
        self.cheapest_paid_chat = min(
            paid_chat, default=None,
            key=lambda m: (m.completion_toman_per_million, m.prompt_toman_per_million,
                           m.request_toman, m.id))


class Catalog:
    """The catalog as one gateway node sees it (asyncio). Swaps happen by one assignment."""

    def __init__(self, client):
        self.client = client
        self._snap: _Snapshot | None = None
        self._task: asyncio.Task | None = None
        self._again = False

    # state
    @property
    def loaded(self) -> bool:
        return self._snap is not None

    @property
    def version(self) -> str | None:
        return self._snap.version if self._snap else None

    @property
    def prices_updated_at(self) -> float | None:
        return self._snap.prices_updated_at if self._snap else None

    # loading
    async def reload(self) -> None:
        """Read the whole catalog in one atomic step and swap it in at once. A store without a
        catalog leaves the current one in force. Redis errors propagate to the caller."""
        raw = await self.client.eval(_READ, 2, keyspace.CATALOG_META, keyspace.CATALOG)
        meta, models = _decode_snapshot(raw)
        version = meta.get("version")
        if version is None or not models:
            if self._snap is not None:
                log.warning("the store holds no catalog; keeping version %s", self._snap.version)
            return
        updated = meta.get("prices_updated_at")
        self._snap = _Snapshot(version, float(updated) if updated else None, models)
        log.info("catalog version %s in force: %d models", version, len(models))

    def on_event(self, msg: dict) -> asyncio.Task | None:
        """A pub/sub message: `{"t": "catalog"}` schedules a reload; other types are ignored.
        Reloads coalesce: while one runs, further events make it run once more."""
        if not isinstance(msg, dict) or msg.get("t") != "catalog":
            return None
        if self._task is not None and not self._task.done():
            self._again = True
            return self._task
        self._task = asyncio.get_running_loop().create_task(self._reload_soon())
        return self._task

    async def _reload_soon(self) -> None:
        while True:
            self._again = False
            try:
                await self.reload()
            except Exception as e:  # the poll loop is the backstop
                log.warning("catalog reload failed (%s); will retry on the next poll", type(e).__name__)
                return
            if not self._again:
                return

    async def poll(self, interval_s: float) -> None:
        """Belt and braces: every `interval_s`, one HGET of the version; reload when it moved
        (a pub/sub message missed while the subscription was down)."""
        while True:
            await asyncio.sleep(interval_s)
            stop_if_cancelled()
            try:
                remote = await self.client.hget(keyspace.CATALOG_META, "version")
                if remote is not None and text(remote) != self.version:
                    await self.reload()
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.warning("catalog version poll failed (%s)", type(e).__name__)

    # lookups
    def _require(self) -> _Snapshot:
        snap = self._snap
        if snap is None:
            raise GatewayError("pricing_unavailable")
        return snap

    def _lookup(self, model_id: str) -> tuple[_Snapshot, Model]:
        if not valid_id(model_id):
            raise _not_found(str(model_id))
        snap = self._require()
        model = snap.by_id.get(model_id)
        if model is None:
            raise _not_found(model_id)
        return snap, model

    def resolve(self, model_id: str) -> Model:
        """The visible model for `model_id`: 404 model_not_found for a malformed id (even
        before any catalog), 503 pricing_unavailable before any catalog, 404 for an unknown
        or hidden id."""
        return self._lookup(model_id)[1]

    def get(self, model_id: str) -> Model | None:
        """Any model of the catalog in force, hidden ones included (None when absent)."""
        snap = self._snap
        return snap.all.get(model_id) if snap else None

    def visible(self) -> list[Model]:
        snap = self._snap
        return list(snap.visible) if snap else []

    def alternative_for(self, free_model: Model) -> Model | None:
        """A visible paid model to suggest with free_quota_exceeded: the same id without
        ":free" when it exists, else the cheapest visible paid chat model."""
        snap = self._snap
        if snap is None:
            return None
        if free_model.id.endswith(":free"):
            same = snap.by_id.get(free_model.id[: -len(":free")])
            if same is not None and not same.free:
                return same
        return snap.cheapest_paid_chat

    def list_json(self) -> bytes:
        """The GET /v1/models body, rendered once per catalog version."""
        return self._require().list_body

    def record_json(self, model_id: str) -> bytes:
        """The GET /v1/models/{id} body (same resolution rules as `resolve`)."""
        snap, model = self._lookup(model_id)
        return snap.record_bodies[model.id]
