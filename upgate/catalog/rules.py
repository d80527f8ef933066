"""The model catalog's rules: what a model is, how a catalog file is validated, how a model is shown.

Pure: no I/O. The operator writes a TOML file (``[[models]]`` entries, amounts as decimal
strings); ``parse`` validates the *whole* file first, so one bad entry refuses the load.
Storing it (Redis, atomic swap, version) is ``upgate.catalog.store``; the copy every gateway
node keeps in memory, reloaded on pub/sub, is ``upgate.catalog.cache``.

Resolving a model id (``catalog_cache.Catalog.resolve``), in this order:

1. A malformed id (no ``<provider>/`` prefix, uppercase, an unknown ``:suffix``) is
   404 ``model_not_found`` even before any catalog was loaded: no catalog could ever hold it.
2. No catalog loaded yet → 503 ``pricing_unavailable``.
3. An id that is not in the catalog, or is ``hidden``, → 404 ``model_not_found``.
"""
from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field, replace
from decimal import Decimal

from upgate.billing import money
from upgate.catalog.route_rules import Route, RouteError, check_provider, parse_routes, primary
from upgate.errors import GatewayError

# <provider>/<model>[/<more>][:free|:batch|:online], lowercase. Every path segment starts with
# a letter or digit, so there is no leading, trailing or doubled '/', and no '.'/'..' segment.
MODEL_ID = re.compile(
    r"^(?!.*\.\.)[a-z0-9][a-z0-9._-]*(?:/[a-z0-9][a-z0-9._-]*)+(?::(?:free|batch|online))?$")
MAX_ID_LENGTH = 200
# Every node holds, indexes and renders the whole catalog (GET /v1/models, the console's page):
# its size is a cost on every node, so it is bounded (OpenRouter's whole list is ~500 models).
MAX_MODELS = 10_000

CAPABILITIES = frozenset({"chat", "embeddings", "completions"})
PRICE_FIELDS = ("prompt_toman_per_million", "completion_toman_per_million",
                "request_toman", "web_search_toman")
# Prompt tokens the provider reports as read from its cache / written to it; unset = the prompt price.
CACHE_PRICE_FIELDS = ("cached_prompt_toman_per_million", "cache_write_toman_per_million")
ALL_PRICE_FIELDS = PRICE_FIELDS + CACHE_PRICE_FIELDS
_REQUIRED_PRICES = ("prompt_toman_per_million", "completion_toman_per_million")
_FIELDS = frozenset({"id", "provider", "upstream_model", "routes", "name", *ALL_PRICE_FIELDS, "capabilities",
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
    cached_prompt_toman_per_million: Decimal | None = None  # None: the prompt price
    cache_write_toman_per_million: Decimal | None = None  # None: the prompt price
    # every upstream that may serve it (upgate/catalog/route_rules.py); () = the one route
    # `provider`/`upstream_model` name. `provider`/`upstream_model` are always the primary's.
    routes: tuple[Route, ...] = ()
    # served by two or more routes: route health and failover apply (docs/routes.md)
    routed: bool = field(init=False, compare=False, repr=False)
    free: bool = field(init=False)  # id ends with ":free"
    online: bool = field(init=False)  # id ends with ":online"
    # The prices as exact integers, for pricing without Decimal on every request: (prompt,
    # completion) in micro-toman per million tokens, (request, web search) in micro-toman,
    # (cached prompt, cache write) in micro-toman per million tokens.
    rates: tuple[int, int, int, int, int, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "free", self.id.endswith(":free"))
        object.__setattr__(self, "online", self.id.endswith(":online"))
        object.__setattr__(self, "rates", tuple(_micro(self.price(f)) for f in ALL_PRICE_FIELDS))
        if not self.routes:
            object.__setattr__(self, "routes", (Route(self.provider, self.upstream_model),))
        # one copy of the model per route, naming that route's upstream: what answered a request
        # (same id and prices: the charge is the catalog's, whichever route answered)
        object.__setattr__(self, "_via", {r.route_id: self if (r.provider, r.upstream_model) ==
                                          (self.provider, self.upstream_model) else None
                                          for r in self.routes})
        object.__setattr__(self, "routed", len(self.routes) > 1)

    def via(self, route: Route) -> "Model":
        """This model as served by `route`: its provider and upstream model, the same prices."""
        found = self._via.get(route.route_id)
        if found is None:
            found = replace(self, provider=route.provider, upstream_model=route.upstream_model)
            self._via[route.route_id] = found
        return found

    def price(self, name: str) -> Decimal:
        """A price field in force: an unset cache price is the prompt price."""
        value = getattr(self, name)
        return self.prompt_toman_per_million if value is None else value

    @property
    def owned_by(self) -> str:
        """The provider part of the id (``openai`` in ``openai/gpt-4o-mini``)."""
        return self.id.split("/", 1)[0]

    def to_json(self) -> dict:
        """The stored form (prices as six-fractional-digit strings); a [[models]] table too.
        A model of one route keeps the form it always had; several are a `routes` list."""
        where = {"provider": self.provider, "upstream_model": self.upstream_model} if not self.routed \
            else {"routes": [r.to_json() for r in self.routes]}
        return {
            "id": self.id, **where,
            "name": self.name,
            **{f: money.fmt(money.parse_toman(getattr(self, f))) for f in PRICE_FIELDS},
            **{f: None if getattr(self, f) is None else money.fmt(money.parse_toman(getattr(self, f)))
               for f in CACHE_PRICE_FIELDS},
            "capabilities": sorted(self.capabilities),
            "context_length": self.context_length, "max_output_tokens": self.max_output_tokens,
            "hidden": self.hidden,
        }

    @classmethod
    def from_json(cls, d: dict) -> "Model":
        routes = tuple(Route(r["provider"], r["upstream_model"], int(r.get("priority", 0)),
                             int(r.get("weight", 1))) for r in d.get("routes") or ())
        first = primary(routes) if routes else Route(d["provider"], d["upstream_model"])
        return cls(
            id=d["id"], provider=first.provider, upstream_model=first.upstream_model, routes=routes,
            name=d["name"],
            **{f: Decimal(d[f]) for f in PRICE_FIELDS},
            **{f: Decimal(d[f]) for f in CACHE_PRICE_FIELDS if d.get(f) is not None},
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

    routes: tuple[Route, ...] = ()
    try:
        if "routes" in entry:
            if "provider" in entry or "upstream_model" in entry:
                raise RouteError("routes replaces provider and upstream_model: write one form or the other")
            routes = parse_routes(entry["routes"], mid, provider_names)
            first = primary(routes)
            provider, upstream = first.provider, first.upstream_model
        else:
            provider = check_provider("provider", entry.get("provider"), provider_names)
            upstream = _opt_str(where, "upstream_model", entry.get("upstream_model"), mid)
    except RouteError as e:
        raise CatalogError(f"{where}: {str(e).removeprefix('provider: ')}") from None

    prices = {}
    for name in ALL_PRICE_FIELDS:
        if name not in entry:
            if name in _REQUIRED_PRICES:
                raise CatalogError(f'{where}: {name} is required (a decimal string like "15000")')
            prices[name] = None if name in CACHE_PRICE_FIELDS else _ZERO
            continue
        prices[name] = _price(where, name, entry[name])
    if mid.endswith(":free") and any(prices.values()):
        paid = next(n for n in ALL_PRICE_FIELDS if prices[n])
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
        upstream_model=upstream,
        routes=routes if len(routes) > 1 else (),
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
    return validate(entries, provider_names)


def validate(entries: list, provider_names: set[str] | None) -> list[Model]:
    """Validate catalog entries (dicts shaped like ``[[models]]`` tables: a TOML file's, or
    ``models sync``'s); raise CatalogError at the first refused entry."""
    if not entries:
        raise CatalogError("no [[models]] entries: refusing to load an empty catalog")
    if len(entries) > MAX_MODELS:
        raise CatalogError(f"{len(entries)} models: a catalog holds at most {MAX_MODELS:,}")
    models: list[Model] = []
    first: dict[str, int] = {}
    for i, entry in enumerate(entries):
        m = _entry(i, entry, provider_names)
        if m.id in first:
            raise CatalogError(f"{_where(i, entry)}: duplicate id, first defined in entry {first[m.id] + 1}")
        first[m.id] = i
        models.append(m)
    return models


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
        "svc_pricing": {f: money.fmt(money.parse_toman(m.price(f))) for f in ALL_PRICE_FIELDS},
    }


def admin_record(m: Model, created: int) -> dict:
    """The model record plus what only the operator sees (routing and visibility)."""
    return {**model_record(m, created), "provider": m.provider,
            "upstream_model": m.upstream_model, "routes": [r.to_json() for r in m.routes],
            "hidden": m.hidden}


def check_allowed(allowed: frozenset[str] | None, model_ids: list[str]) -> None:
    """403 model_not_allowed for the first id outside a key's allowed_models (None = all).
    Ids match exactly: `acme/chat-1` does not allow `acme/chat-1:free`."""
    if allowed is None:
        return
    for mid in model_ids:
        if mid not in allowed:
            raise GatewayError("model_not_allowed", f"This key is not allowed to use the model {mid}.")


def not_found(model_id: str) -> GatewayError:
    """404 model_not_found, with the id shown no longer than any valid id."""
    shown = model_id if len(model_id) <= MAX_ID_LENGTH else model_id[:MAX_ID_LENGTH] + "…"
    return GatewayError("model_not_found", f"The model {shown!r} does not exist.")
