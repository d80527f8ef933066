"""/admin/v1/models: the catalog in force (hidden models too) and its replacement from TOML.

Every call into the catalog (rules: upgate/catalog/rules.py; store: upgate/catalog/store.py) lives
in the two functions below."""
from __future__ import annotations

import orjson

from upgate.billing import jalali
from upgate.catalog import rules as catalog, store as catalog_store
from upgate.errors import GatewayError
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


HANDLERS = [ModelsHandler]
