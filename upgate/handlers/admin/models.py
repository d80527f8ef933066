"""/admin/v1/models: the catalog in force (hidden models too) and its replacement from TOML.

Every call into the catalog (rules: upgate/catalog/rules.py; store: upgate/catalog/store.py) lives
in the two functions below."""
from __future__ import annotations

import orjson

from upgate.billing import jalali
from upgate.catalog import rules as catalog, store as catalog_store
from upgate.errors import GatewayError
from upgate.services import prices, routes
from upgate.handlers.admin.base import AdminHandler
from upgate.handlers.admin.spec import TIME, Op, nullable, obj, ref


def _read(client) -> bytes:
    """Encoded here, on the read pool: 10,000 models are ~5 MB of JSON (~25 ms to encode)."""
    version, updated, items = catalog_store.read(client)
    created = int(updated or 0)
    return orjson.dumps({"data": [catalog.admin_record(m, created) for m in items], "version": version,
                         "prices_updated_at": jalali.utc_iso(updated) if updated else None,
                         "price_syncs": catalog_store.read_syncs(client)})


def _replace(client, text: str, provider_names: set[str]) -> dict:
    items = catalog.parse(text, provider_names)  # the whole file checked first: refused whole
    version, updated = catalog_store.replace(client, items)
    return {"version": version, "prices_updated_at": jalali.utc_iso(updated), "models": len(items)}


class ModelsHandler(AdminHandler):
    PATH = "/admin/v1/models"
    OPS = {
        "get": Op("The catalog in force, hidden models included, with toman prices.",
                  obj({"data": {"type": "array", "items": ref("Model")},
                       "version": nullable({"type": "string"}), "prices_updated_at": nullable(TIME),
                       "price_syncs": {"type": "object"}})),
        "put": Op("Replace the catalog with a TOML document (the `models load` format). Checked "
                  "whole first: one bad entry refuses it all and the catalog in force stays.",
                  obj({"version": {"type": "string"}, "prices_updated_at": TIME, "models": {"type": "integer"}}),
                  body={"type": "string"}, body_type="application/toml"),
    }

    async def get(self) -> None:
        self.write_json(await self.call(_read))

    async def put(self) -> None:
        ctype = self.request.headers.get("Content-Type", "").split(";")[0].strip().lower()
        if ctype != "application/toml":
            raise GatewayError("invalid_request", "The catalog is sent as TOML with Content-Type: application/toml.",
                               param="Content-Type")
        try:
            text = (self.body_bytes() or b"").decode("utf-8")
        except UnicodeDecodeError:
            raise GatewayError("invalid_request", "The catalog is not UTF-8 text.") from None
        self.log_detail = {"bytes": len(text)}
        self.write_json(await self.call(_replace, text, set(self.ctx.providers)))



_CHANGE = {"type": "array", "items": {"type": "object"}}


class SyncHandler(AdminHandler):
    PATH = "/admin/v1/models/sync"
    OPS = {"post": Op(
        "Reprice a provider's models from an upstream model list (OpenRouter's GET /api/v1/models "
        "shape) at an http(s) `source`, as `upgate-admin models sync`: toman per million = USD per "
        "token × 1,000,000 × usd_toman × markup. A price moving more than max_change (default 30%) "
        "is refused with 422 price_change_too_large (its plan in error.svc) unless yes is true; "
        "dry_run plans and writes nothing.",
        obj({"version": nullable({"type": "string"}), "changed": _CHANGE, "added": _CHANGE,
             "removed": _CHANGE, "unchanged": {"type": "integer"}}),
        body=obj({"source": {"type": "string", "format": "uri"}, "provider": {"type": "string"},
                  "usd_toman": {"type": "string"}, "markup": {"type": "string"},
                  "include": {"type": "array", "items": {"type": "string"}}, "prune": {"type": "boolean"},
                  "dry_run": {"type": "boolean"}, "max_change": {"type": "string", "examples": ["30%"]},
                  "yes": {"type": "boolean"}}, required=["source", "provider", "usd_toman"]),
        errors={422: "price_change_too_large"})}

    FIELDS = ("source", "provider", "usd_toman", "markup", "include", "prune", "dry_run", "max_change", "yes")

    async def post(self) -> None:
        body = self.json_body(self.FIELDS, required=("source", "provider", "usd_toman"))
        if body.get("source"):  # the log keeps no query or credentials of a URL (a token may ride there)
            self.log_detail = dict(self.log_detail, source=prices.shown_source(body["source"]))
        args = {k: body[k] for k in self.FIELDS if body.get(k) is not None}
        try:
            out = await self.call(prices.sync, **args, provider_names=set(self.ctx.providers), remote=True)
        except catalog_store.ChangeTooLarge as e:
            raise GatewayError("price_change_too_large", str(e), param="max_change",
                               svc=e.outcome.to_json()) from None
        self.unlogged = args.get("dry_run") is True  # a dry run writes nothing: not in the admin log
        self.write_json(out)


class RoutesHandler(AdminHandler):
    PATH = "/admin/v1/routes"
    OPS = {"get": Op("Every route of the catalog in force (or of one model) with its shared health: "
                     "state healthy or cold, cold_until, failures in a row (docs/routes.md).",
                     obj({"routes": {"type": "array", "items": ref("Route")}}),
                     query={"model": {"type": "string"}})}

    async def get(self) -> None:
        self.write_json(await self.call(routes.report, self.get_query_argument("model", None)))


HANDLERS = [ModelsHandler, SyncHandler, RoutesHandler]
