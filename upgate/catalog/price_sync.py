"""Prices that follow the market: an upstream model list in dollars → catalog entries in toman.

Pure: no I/O. ``read_source`` checks a list in OpenRouter's ``GET /api/v1/models`` shape;
``plan`` turns the catalog in force plus that list into the new catalog entries and the list
of changes, which ``catalog.validate`` then checks like any catalog file. The service call
that fetches the source and swaps the catalog is ``catalog_store.sync``; the CLI and the
management API both call it.

toman per million = USD per token × 1,000,000 × rate × markup, in Decimal, rounded up to six
fractional digits (the catalog's resolution); the per-request fees (``request``,
``web_search``) are USD per request × rate × markup.
"""
from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, Decimal, InvalidOperation, localcontext
from fnmatch import fnmatchcase
from urllib.parse import urlsplit

from upgate.billing import money
from upgate.catalog import rules as catalog
from upgate.errors import Reasoned

# OpenRouter's pricing field → (catalog field, per million tokens?)
PRICE_MAP = (
    ("prompt", "prompt_toman_per_million", True),
    ("completion", "completion_toman_per_million", True),
    ("request", "request_toman", False),
    ("web_search", "web_search_toman", False),
    ("input_cache_read", "cached_prompt_toman_per_million", True),
    ("input_cache_write", "cache_write_toman_per_million", True),
)
_REQUIRED = ("prompt", "completion")
_Q = Decimal("0.000001")
MAX_FACTOR = Decimal(10) ** 9  # a rate or markup beyond this is a typo, not a price
MAX_USD = Decimal(10) ** 6  # per token or per request: beyond this, a broken source


class SyncError(Reasoned):
    """The sync is refused: one line for the operator; nothing is written. `field` names the
    input at fault (``source``, ``usd_toman``, ``markup``, ``include``, ``max_change``)."""

    reason = "sync_invalid"

    def __init__(self, message: str, field: str | None = None, **params):
        super().__init__(message, **params)
        self.field = field


_NUMERIC_LABEL = re.compile(r"^(0x[0-9a-f]*|[0-9]+)$")


def source_url(source: str) -> str | None:
    """The source as a URL to fetch, None when it is a file path; SyncError when it is a URL
    upgate does not fetch. Only http:// and https://; a host that is all numbers must be a
    plain dotted quad (127.0.0.1) or a bracketed IPv6: the odd forms a resolver also takes
    (2130706433, 0x7f.1, 0177.0.0.1, 127.1) only serve to disguise an address."""
    scheme, sep, _ = source.partition("://")
    if not sep or not re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*", scheme):
        return None
    if scheme.lower() not in ("http", "https"):
        raise SyncError(f"the source must be an http:// or https:// URL or a file, not {scheme}://", "source")
    try:
        host = urlsplit(source).hostname or ""
    except ValueError as e:
        raise SyncError(f"the source URL is malformed: {e}", "source") from None
    if not host:
        raise SyncError("the source URL has no host", "source")
    labels = host.rstrip(".").split(".")
    if ":" not in host and all(_NUMERIC_LABEL.match(label) for label in labels):
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            raise SyncError(f"the source host {host!r} is a numeric address in an odd form: "
                            "write it as a dotted quad (127.0.0.1)", "source") from None
    return source


@dataclass(frozen=True)
class SourceModel:
    id: str
    name: str | None
    context_length: int | None
    max_completion_tokens: int | None
    pricing: dict  # OpenRouter field → Decimal USD (per token, or per request for the fees)


@dataclass(frozen=True)
class Change:
    model: str
    kind: str  # "changed" | "added" | "removed"
    old: dict | None  # catalog price field → Decimal (None for an added model)
    new: dict | None  # (None for a removed model)
    change_pct: Decimal | None  # the largest |%| move of the prompt/completion prices; None: from 0

    def row(self) -> dict:
        """The JSON form: model, old → new prompt and completion prices, % change."""
        def price(side, name):
            return None if side is None else money.fmt(money.parse_toman(side[name]))
        return {"model": self.model,
                "old_prompt_toman_per_million": price(self.old, "prompt_toman_per_million"),
                "new_prompt_toman_per_million": price(self.new, "prompt_toman_per_million"),
                "old_completion_toman_per_million": price(self.old, "completion_toman_per_million"),
                "new_completion_toman_per_million": price(self.new, "completion_toman_per_million"),
                "change_pct": None if self.change_pct is None else f"{self.change_pct:.2f}"}


@dataclass
class Plan:
    entries: list[dict]  # the whole new catalog, as [[models]] tables (for catalog.validate)
    changes: list[Change] = field(default_factory=list)
    unchanged: int = 0  # the provider's matched models whose prices stay
    skipped: list[str] = field(default_factory=list)  # source models left out, with the reason

    def of(self, kind: str) -> list[Change]:
        return [c for c in self.changes if c.kind == kind]

    def worst_pct(self) -> Decimal | None:
        """The largest price move of a changed model (None: some price moved from 0)."""
        worst = Decimal(0)
        for c in self.of("changed"):
            if c.change_pct is None:
                return None
            worst = max(worst, c.change_pct)
        return worst


def factor(text: object, name: str) -> Decimal:
    """A rate or markup: a positive decimal ("61500", "1.15")."""
    try:
        value = Decimal(str(text).strip())
    except InvalidOperation:
        raise SyncError(f"{name} must be a positive decimal like \"61500\" or \"1.15\", got {text!r}",
                        name) from None
    if not value.is_finite() or value <= 0 or value > MAX_FACTOR:
        raise SyncError(f"{name} must be a positive decimal like \"61500\" or \"1.15\", got {text!r}", name)
    return value


def percent(text: object) -> Decimal:
    """--max-change: "30", "30%" or "12.5%" → Decimal percent (≥ 0)."""
    raw = str(text).strip().removesuffix("%")
    try:
        value = Decimal(raw)
    except InvalidOperation:
        value = Decimal(-1)
    if not value.is_finite() or value < 0:
        raise SyncError(f"max_change must be a percentage like 30 or 30%, got {text!r}", "max_change")
    return value


def toman(usd: Decimal, rate: Decimal, markup: Decimal, per_million: bool) -> Decimal:
    """USD (per token, or per request) → toman (per million tokens, or per request), exact,
    rounded up to six fractional digits."""
    with localcontext() as c:
        c.prec = 80  # exact: every factor is a short decimal
        value = usd * (Decimal(1_000_000) if per_million else 1) * rate * markup
        return value.quantize(_Q, rounding=ROUND_CEILING)


def _usd(model_id: str, name: str, value: object) -> Decimal | None:
    """One pricing field: a decimal string (or a JSON number) of USD. None: OpenRouter's "-1"
    (a price decided per request upstream), which no fixed price can follow."""
    if isinstance(value, bool) or not isinstance(value, (str, int, Decimal)):
        raise SyncError(f"source model {model_id}: pricing.{name} is not a decimal: {value!r}", "source")
    try:
        usd = Decimal(value.strip() if isinstance(value, str) else value)
    except InvalidOperation:
        raise SyncError(f"source model {model_id}: pricing.{name} is not a decimal: {value!r}",
                        "source") from None
    if not usd.is_finite():
        raise SyncError(f"source model {model_id}: pricing.{name} is not a decimal: {value!r}", "source")
    if usd > MAX_USD:
        raise SyncError(f"source model {model_id}: pricing.{name} is not a plausible price: {value!r}",
                        "source")
    return None if usd < 0 else usd


def _count(value: object) -> int | None:
    return value if type(value) is int and value > 0 else None


def read_source(raw: bytes | str) -> list[SourceModel]:
    """Check an upstream model list (``{"data": [{"id", "pricing": {...}, ...}]}``); raise
    SyncError naming what is wrong. Numbers are read as exact decimals, never floats."""
    try:
        doc = json.loads(raw, parse_float=Decimal)
    except (ValueError, UnicodeDecodeError) as e:
        raise SyncError(f"the source is not JSON ({type(e).__name__}: {str(e)[:80]})", "source") from None
    data = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(data, list):
        raise SyncError('the source is not a model list: expected {"data": [{"id", "pricing", ...}]}',
                        "source")
    if not data:
        raise SyncError("the source lists no models: refusing to sync from an empty list", "source")
    out, seen = [], set()
    for i, item in enumerate(data):
        mid = item.get("id") if isinstance(item, dict) else None
        if not isinstance(mid, str) or not mid.strip():
            raise SyncError(f"source entry {i + 1} has no id: not a model list", "source")
        pricing = item.get("pricing")
        if not isinstance(pricing, dict):
            raise SyncError(f"source model {mid}: pricing is missing or not an object", "source")
        prices = {}
        for name, _, _ in PRICE_MAP:
            if name in pricing and pricing[name] is not None:
                prices[name] = _usd(mid, name, pricing[name])
            elif name in _REQUIRED:
                raise SyncError(f"source model {mid}: pricing.{name} is missing", "source")
        if mid in seen:
            raise SyncError(f"source model {mid} is listed twice", "source")
        seen.add(mid)
        top = item.get("top_provider") if isinstance(item.get("top_provider"), dict) else {}
        name = item.get("name")
        out.append(SourceModel(id=mid, name=name.strip() if isinstance(name, str) and name.strip() else None,
                               context_length=_count(item.get("context_length")),
                               max_completion_tokens=_count(top.get("max_completion_tokens")),
                               pricing=prices))
    return out


def _prices(src: SourceModel, rate: Decimal, markup: Decimal) -> dict[str, Decimal] | None:
    """The catalog prices of a source model (None when a required price is per request upstream)."""
    out = {}
    for name, target, per_million in PRICE_MAP:
        usd = src.pricing.get(name)
        if usd is None:
            if name in _REQUIRED and name in src.pricing:
                return None
            continue
        out[target] = toman(usd, rate, markup, per_million)
    return out


def _pct(old: Decimal, new: Decimal) -> Decimal | None:
    if old == new:
        return Decimal(0)
    if old == 0:
        return None
    return (abs(new - old) * 100 / old).quantize(Decimal("0.01"), rounding=ROUND_CEILING)


def _move(old: dict, new: dict) -> Decimal | None:
    worst = Decimal(0)
    for name in ("prompt_toman_per_million", "completion_toman_per_million"):
        pct = _pct(old[name], new[name])
        if pct is None:
            return None
        worst = max(worst, pct)
    return worst


def _price_view(m: catalog.Model) -> dict[str, Decimal]:
    return {f: m.price(f) for f in catalog.ALL_PRICE_FIELDS}


def _view(entry: dict) -> dict[str, Decimal]:
    """The prices in force of a [[models]] table, as the catalog reads it (absent fees 0,
    absent cache prices the prompt price)."""
    prompt = Decimal(entry["prompt_toman_per_million"])
    return {f: Decimal(entry[f]) if f in entry else (prompt if f in catalog.CACHE_PRICE_FIELDS else Decimal(0))
            for f in catalog.ALL_PRICE_FIELDS}


def _entry(m: catalog.Model) -> dict:
    """A catalog model as a [[models]] table (None fields left out)."""
    return {k: v for k, v in m.to_json().items() if v is not None}


def plan(old: list[catalog.Model], source: list[SourceModel], *, provider: str, rate: Decimal,
         markup: Decimal, include: tuple[str, ...] = (), prune: bool = False) -> Plan:
    """The new catalog: `old` with `provider`'s models matched to the source (by upstream model,
    else by id) repriced, source models matching an `include` glob (on the source id,
    case-insensitive) added, and with `prune` the provider's models the source no longer lists
    removed. Other providers' models are kept as they are."""
    by_upstream = {s.id: s for s in source}
    by_lower = {s.id.lower(): s for s in source}
    result = Plan(entries=[])
    matched: set[str] = set()
    for m in old:
        src = None
        # a model of several routes is the provider's when one of its routes is (docs/routes.md);
        # --prune removes it only when every route is that provider's
        mine = [r for r in m.routes if r.provider == provider]
        if mine:
            src = next((by_upstream[r.upstream_model] for r in mine if r.upstream_model in by_upstream),
                       None) or by_lower.get(m.id)
        if src is None:
            if mine and len(mine) == len(m.routes) and prune:
                result.changes.append(Change(m.id, "removed", _price_view(m), None, Decimal(100)))
            else:
                result.entries.append(_entry(m))
            continue
        matched.add(src.id)
        prices = _prices(src, rate, markup)
        if prices is None:
            result.skipped.append(f"{src.id}: its price is decided per request upstream; "
                                  f"{m.id} keeps its prices")
            result.entries.append(_entry(m))
            continue
        if m.free:  # a :free model stays free whatever the paid variant costs
            prices = {k: Decimal(0) for k in prices}
        entry = _entry(m)
        for f in catalog.CACHE_PRICE_FIELDS:  # the source's cache prices, else the prompt price
            entry.pop(f, None)
        entry.update({k: str(v) for k, v in prices.items()})
        result.entries.append(entry)
        new_view = _view(entry)
        old_view = {f: m.price(f) for f in catalog.ALL_PRICE_FIELDS}
        if old_view == new_view:
            result.unchanged += 1
        else:
            result.changes.append(Change(m.id, "changed", old_view, new_view, _move(old_view, new_view)))
    taken = {m.id for m in old}
    patterns = tuple(p.lower() for p in include)
    for src in source:
        if src.id in matched or not any(fnmatchcase(src.id.lower(), p) for p in patterns):
            continue
        mid = src.id.lower()
        if mid in taken:
            result.skipped.append(f"{src.id}: the catalog's {mid} belongs to another provider")
            continue
        if not catalog.valid_id(mid):
            result.skipped.append(f"{src.id}: not a catalog id (<provider>/<model>[:free|:batch|:online])")
            continue
        prices = _prices(src, rate, markup)
        if prices is None:
            result.skipped.append(f"{src.id}: its price is decided per request upstream")
            continue
        if mid.endswith(":free") and any(prices.values()):
            result.skipped.append(f"{src.id}: a :free model with a price")
            continue
        entry = {"id": mid, "provider": provider, "upstream_model": src.id, "name": src.name or mid,
                 **{k: str(v) for k, v in prices.items()}}
        if src.context_length:
            entry["context_length"] = src.context_length
        if src.max_completion_tokens:
            entry["max_output_tokens"] = src.max_completion_tokens
        result.entries.append(entry)
        taken.add(mid)
        result.changes.append(Change(mid, "added", None, _view(entry), None))
    result.changes.sort(key=lambda c: (c.kind, c.model))
    return result
