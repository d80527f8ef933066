"""The routes report: every route of the catalog in force with its shared health. One function
that `upgate-admin models routes`, GET /admin/v1/routes and the console's models page call, so
all three show the same object (docs/routes.md).

A model of two or more routes shows each route's own health (lua/route_health.lua); a model of
one route shows the spec's per-model cool-down (lua/cooldown.lua), the only health it has, with
its rate-limit strikes as `failures`.
"""
from __future__ import annotations

from upgate.billing import jalali
from upgate.catalog import store as catalog_store
from upgate.store import connection as store, keyspace
from upgate.errors import Reasoned


class UnknownModel(Reasoned):
    """The model id asked for is not in the catalog in force."""

    reason = "model_unknown"


def report(client, model_id: str | None = None) -> dict:
    """{"routes": [{model, provider, upstream_model, priority, weight, state, cold_until,
    failures}]}: state "healthy" | "cold", cold_until an ISO-8601 UTC time or None."""
    _, _, models = catalog_store.read(client)
    if model_id is not None:
        models = [m for m in models if m.id == model_id]
        if not models:
            raise UnknownModel(f"model {model_id!r} is not in the catalog in force", model=str(model_id)[:80])
    pipe = client.pipeline(transaction=False)
    for m in models:
        pipe.hgetall(keyspace.route_health(m.id) if m.routed else keyspace.cooldown(m.id))
    states = pipe.execute() if models else []
    now_s, now_us = client.time()
    now_ms = int(now_s) * 1000 + int(now_us) // 1000
    rows = []
    for m, raw in zip(models, states):
        fields = {store.text(k): int(v) for k, v in raw.items()}
        for r in sorted(m.routes, key=lambda r: r.priority):
            if m.routed:
                failures, until = fields.get(r.route_id + ":f", 0), fields.get(r.route_id + ":u", 0)
            else:
                failures, until = fields.get("strikes", 0), fields.get("until_ms", 0)
            cold = until > now_ms
            rows.append({"model": m.id, "provider": r.provider, "upstream_model": r.upstream_model,
                         "priority": r.priority, "weight": r.weight,
                         "state": "cold" if cold else "healthy",
                         "cold_until": jalali.utc_iso((until + 999) // 1000) if cold else None,
                         "failures": failures})
    return {"routes": rows}
