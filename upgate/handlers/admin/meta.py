"""/admin/v1/openapi.json (no token: it documents, it reveals nothing) and /admin/v1/audit-log."""
from __future__ import annotations

import orjson

from upgate.services import admin_log
from upgate.handlers.admin.base import AdminHandler
from upgate.handlers.admin.spec import Op, data_of


class AuditLogHandler(AdminHandler):
    PATH = "/admin/v1/audit-log"
    OPS = {"get": Op("Every admin write (CLI, API, console), newest first: who, what, when, target. "
                     "Never a secret.", data_of("AuditEntry"),
                     query={"limit": {"type": "integer", "minimum": 1, "maximum": admin_log.MAX_ENTRIES}})}

    async def get(self) -> None:
        limit = self.int_query("limit", 100, 1, admin_log.MAX_ENTRIES)
        self.write_json({"data": await self.call(admin_log.read, limit)})


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
