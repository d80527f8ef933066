"""/admin/v1/openapi.json (no token: it documents, it reveals nothing) and /admin/v1/audit-log."""
from __future__ import annotations

import orjson

from upgate.services import admin_log
from upgate.handlers.admin.base import AdminHandler
from upgate.errors import GatewayError
from upgate.handlers.admin.spec import JDAY, Op, data_of


class AuditLogHandler(AdminHandler):
    PATH = "/admin/v1/audit-log"
    OPS = {"get": Op("Every admin write (CLI, API, console), newest first: who did what (a verb) to which "
                     "object, before and after, whether it was a replay. Filters: actor, account (what "
                     "was done to it and its keys), action (a verb or its noun), from/to (Jalali days). "
                     "CSV with ?format=csv. Never a secret.", data_of("AuditEntry"),
                     query={"limit": {"type": "integer", "minimum": 1, "maximum": admin_log.MAX_ENTRIES},
                            "actor": {"type": "string"}, "account": {"type": "string"},
                            "action": {"type": "string"}, "from": JDAY, "to": JDAY,
                            "format": {"enum": ["json", "csv"]}},
                     produces=("application/json", "text/csv"))}

    async def get(self) -> None:
        limit = self.int_query("limit", 100, 1, admin_log.MAX_ENTRIES)
        fmt = self.get_query_argument("format", "json")
        if fmt not in ("json", "csv"):
            raise GatewayError("invalid_request", "format must be json or csv.", param="format")
        q = {k: self.get_query_argument(k, None) for k in ("actor", "account", "action")}
        entries = await self.call(admin_log.search, **q, start=self.get_query_argument("from", None),
                                  end=self.get_query_argument("to", None), limit=limit)
        if fmt == "csv":
            self.set_header("Content-Type", "text/csv; charset=utf-8")
            self.finish(admin_log.to_csv(entries).encode())
            return
        self.write_json({"data": entries})


class OpenAPIHandler(AdminHandler):
    PATH = "/admin/v1/openapi.json"
    OPS = {"get": Op("This document: OpenAPI 3.1 of every admin route.", {"type": "object"}, auth=False)}
    _body: bytes | None = None

    async def get(self) -> None:
        from upgate.handlers.admin import HANDLERS, openapi

        if OpenAPIHandler._body is None:
            OpenAPIHandler._body = orjson.dumps(openapi(HANDLERS))
        self.finish(OpenAPIHandler._body)


HANDLERS = [AuditLogHandler, OpenAPIHandler]
