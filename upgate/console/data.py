"""What each console page shows, gathered in one sync call per page (run in the executor).

Only composition: every number comes from the service functions the management API and the
CLI call (accounts, keys, usage, catalog, transactions, statements, records); nothing here
decides, validates or computes money. Refusals (ValueError subclasses) pass through to the
handler, which shows their one-line message.
"""
from __future__ import annotations

from upgate.billing import jalali
from upgate.catalog import rules as catalog, store as catalog_store
from upgate.services import accounts, keys, notes, records, routes, statements, transactions, usage
from upgate.payments import orders

REQUESTS_SHOWN = 25


def find_accounts(client, q: str) -> list[dict]:
    """An account id (exact) or a phone number → the matching accounts (`accounts.show` views)."""
    q = (q or "").strip()
    if not q:
        return []
    try:
        acct = accounts.normalize_id(q)
    except accounts.UnknownAccount:  # not an id: a phone number, or a refusal naming the phone
        return accounts.list_accounts(client, phone=accounts.check_phone(q))
    return [accounts.show(client, acct)]


def is_request_id(q: str) -> bool:
    """What the search box sends to a request's record: an id as X-Svc-Request-Id carries it."""
    return (q or "").strip().startswith("req_")


ORDERS_SHOWN = 10
NOTES_SHOWN = 50  # the account page's newest top-up orders (all of them: /admin/payments)


def account_page(client, account_id: str, month: str | None, default_quota: int) -> dict:
    view = accounts.show(client, account_id)
    acct = view["account_id"]
    month = month or jalali.month_key()
    days = usage.month_days(month)
    raw = usage.fetch(client, acct, days)
    out = {
        "account": view,
        "month": month,
        "keys": keys.list_keys(client, acct),
        "usage_days": usage.by_day(days, usage.report(raw, "day")),
        "usage_models": usage.report(raw, "model"),
        "transactions": transactions.list_transactions(client, acct, month=month),
        "statement": statements.statement(client, acct, month),
        "requests": records.list_requests(client, acct, limit=REQUESTS_SHOWN),
        "orders": orders.list_orders(client, account_id=acct, limit=ORDERS_SHOWN)["data"],
        "notes": notes.list_notes(client, acct, NOTES_SHOWN),
    }
    # the objects this page is drawn from, as the API and `upgate-admin --json` show them (one
    # function per noun): published in the page as data (objects.html), shown by nothing else
    out["objects"] = {"account": accounts.account_object(view, default_quota),
                      "keys": [keys.key_object(k) for k in out["keys"]],
                      "transactions": out["transactions"], "requests": out["requests"]}
    return out


def statement_csv(client, account_id: str, month: str | None) -> tuple[str, str]:
    st = statements.statement(client, account_id, month)
    return st["month"], statements.to_csv(st)


def models_page(client) -> dict:
    """What `upgate-admin models list` shows: the catalog in force and each provider's last
    price sync."""
    version, updated, items = catalog_store.read(client)
    created = int(updated or 0)
    return {"version": version, "prices_updated_at": updated,
            "models": [catalog.admin_record(m, created) for m in items],
            "price_syncs": catalog_store.read_syncs(client),
            "routes": routes.report(client)["routes"]}  # what `upgate-admin models routes` shows


def overview_days() -> list[str]:
    """The current Jalali month up to today: the overview's period."""
    return usage.month_days(jalali.month_key())


def node_health(ctx) -> dict:
    """This node's state, as /healthz reports it, and the providers and cold models it routes
    by (its in-memory catalog and cool-down map: no I/O, run on the loop)."""
    from upgate.handlers.health import _journal

    models = ctx.catalog.visible()
    cold = sorted((m.id, left) for m in models if (left := model_cold(ctx, m)))
    # a model of several routes may be warm while some of its routes are cold
    cold_routes = sorted((m.id, r.route_id, left) for m in models if m.routed for r in m.routes
                         if (left := ctx.routes.cold_left(m.id, r)))
    cold_ids = {m for m, _ in cold}
    providers = [{"name": p.name, "dialect": p.dialect, "available": p.available,
                  "models": sum(1 for m in models if any(r.provider == p.name for r in m.routes)),
                  "cold": sum(1 for m in models if m.id in cold_ids and any(r.provider == p.name for r in m.routes))}
                 for p in sorted(ctx.providers.values(), key=lambda p: p.name)]
    return {"node": {"redis_ok": ctx.redis_ok, "catalog_version": ctx.catalog.version,
                     "draining": ctx.draining, "inflight": len(ctx.inflight), "journal": _journal(ctx)},
            "providers": providers, "cold": cold, "cold_routes": cold_routes}


def model_cold(ctx, model) -> float | None:
    """Seconds a model stays cold on this node (no I/O): every route cold for a model of
    several routes (docs/routes.md), else the spec's per-model cool-down."""
    return ctx.routes.model_cold(model) if model.routed else ctx.ledger.cold_until(model.id)
