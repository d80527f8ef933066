"""A catalog model's routes: the upstreams that may serve it (docs/routes.md).

Pure: no I/O. A ``[[models]]`` entry names either one ``provider`` (+ ``upstream_model``), the
form every catalog had before routes, which becomes one route; or a ``routes = [...]`` list of
``{provider, upstream_model, priority, weight}`` tables. Both forms never mix in one entry:
an entry with both would leave the operator guessing which one is in force.
"""
from __future__ import annotations

from dataclasses import dataclass, field

MAX_ROUTES = 16  # more is a configuration mistake, and every one costs a health entry
MAX_WEIGHT = 1_000_000
MAX_PRIORITY = 1_000
_ROUTE_FIELDS = frozenset({"provider", "upstream_model", "priority", "weight"})


@dataclass(frozen=True)
class Route:
    provider: str  # a [providers.X] name
    upstream_model: str  # the model name that provider expects
    priority: int = 0  # lowest first
    weight: int = 1  # share of the traffic among the routes of one priority
    # the route's name in health records and metrics, unique within its model (a field, not a
    # property: it is read on every request)
    route_id: str = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "route_id", f"{self.provider}|{self.upstream_model}")

    def to_json(self) -> dict:
        return {"provider": self.provider, "upstream_model": self.upstream_model,
                "priority": self.priority, "weight": self.weight}


class RouteError(ValueError):
    """One line naming the route and the field (the catalog prefixes the entry)."""


def _int(where: str, name: str, value: object, low: int, high: int, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise RouteError(f"{where}: {name} must be a whole number from {low} to {high}, got {value!r}")
    return value


def parse_routes(value: object, model_id: str, provider_names: set[str] | None) -> tuple[Route, ...]:
    """The routes of one entry's ``routes = [...]``; raise RouteError at the first bad one."""
    if not isinstance(value, list) or not value:
        raise RouteError("routes must be a non-empty list of {provider, upstream_model, priority, "
                         "weight} tables")
    if len(value) > MAX_ROUTES:
        raise RouteError(f"routes has {len(value)} entries; at most {MAX_ROUTES}")
    routes: list[Route] = []
    seen: dict[str, int] = {}
    for i, item in enumerate(value):
        where = f"route {i + 1}"
        if not isinstance(item, dict):
            raise RouteError(f"{where}: must be a table like {{ provider = \"openrouter\", "
                             "upstream_model = \"…\", priority = 0, weight = 1 }")
        unknown = sorted(set(item) - _ROUTE_FIELDS)
        if unknown:
            raise RouteError(f"{where}: unknown field {unknown[0]!r} (known: {', '.join(sorted(_ROUTE_FIELDS))})")
        route = Route(provider=check_provider(where, item.get("provider"), provider_names),
                      upstream_model=_upstream(where, item.get("upstream_model"), model_id),
                      priority=_int(where, "priority", item.get("priority"), 0, MAX_PRIORITY, 0),
                      weight=_int(where, "weight", item.get("weight"), 1, MAX_WEIGHT, 1))
        if route.route_id in seen:
            raise RouteError(f"{where}: the same provider and upstream_model as route {seen[route.route_id] + 1}")
        seen[route.route_id] = i
        routes.append(route)
    return tuple(routes)


def check_provider(where: str, provider: object, provider_names: set[str] | None) -> str:
    if not isinstance(provider, str) or not provider:
        raise RouteError(f"{where}: provider is required (a [providers.NAME] name)")
    if provider_names is not None and provider not in provider_names:
        known = ", ".join(sorted(provider_names)) or "none"
        raise RouteError(f"{where}: provider {provider!r} is not in the providers file (known: {known})")
    return provider


def _upstream(where: str, value: object, default: str) -> str:
    if value is None:
        return default
    if not isinstance(value, str) or not value.strip():
        raise RouteError(f"{where}: upstream_model must be a non-empty string, got {value!r}")
    return value.strip()


def primary(routes: tuple[Route, ...]) -> Route:
    """The route named by a model's `provider`/`upstream_model`: the first of the lowest priority."""
    return min(routes, key=lambda r: r.priority)
