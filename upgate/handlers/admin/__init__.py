"""The management API under /admin/v1: one module per resource family, each ending with its
HANDLERS. `routes(d)` is the block app.py mounts; `openapi()` documents the same list."""
from __future__ import annotations

from upgate.handlers.admin import accounts, keys, meta, models, money, payments, reports, webhooks
from upgate.handlers.admin.base import AdminNotFoundHandler
from upgate.handlers.admin.spec import document, tornado_pattern

HANDLERS = [*accounts.HANDLERS, *keys.HANDLERS, *money.HANDLERS, *reports.HANDLERS,
            *models.HANDLERS, *webhooks.HANDLERS, *payments.HANDLERS, *meta.HANDLERS]


def routes(d: dict) -> list[tuple]:
    return [*((tornado_pattern(h.PATH), h, d) for h in HANDLERS), (r"/admin/v1/.*", AdminNotFoundHandler, d)]


def openapi(handlers=HANDLERS) -> dict:
    return document(handlers)
