"""The operator's console at /admin/: server-rendered pages (Tornado templates and one CSS
file shipped as package data) over the same service functions the management API and the CLI
call. No JavaScript, no build step, nothing fetched from elsewhere.

`routes(ctx)` is the block app.py mounts. See docs/console.md.
"""
from __future__ import annotations

import tornado.web

from upgate.console import account_forms, operations, pages, payments
from upgate.console.base import STATIC
from upgate.handlers.guard import BodyGuard

__all__ = ["routes"]

_ID = r"([^/]+)"


class StaticHandler(BodyGuard, tornado.web.StaticFileHandler):
    """The stylesheet: no credential, so at most 64 KB of a body, dropped."""


def routes(ctx) -> list:
    d = {"ctx": ctx}
    acct = r"/admin/accounts/" + _ID
    return [
        (r"/admin/?", pages.OverviewHandler, d),  # /admin too: a typed address lands here
        (r"/admin/login", pages.LoginHandler, d),
        (r"/admin/logout", pages.LogoutHandler, d),
        (r"/admin/accounts", pages.AccountsHandler, d),
        (r"/admin/accounts\.csv", account_forms.AccountsCsvHandler, d),
        (acct, pages.AccountHandler, d),
        (acct + r"/topups", pages.TopupHandler, d),
        (acct + r"/adjustments", pages.AdjustmentHandler, d),
        (acct + r"/(suspend|resume)", pages.SuspendHandler, d),
        (acct + r"/settings", pages.SettingsHandler, d),
        (acct + r"/phone", account_forms.PhoneHandler, d),
        (acct + r"/notes", account_forms.NoteHandler, d),
        (acct + r"/statement\.csv", pages.StatementCsvHandler, d),
        (acct + r"/keys", pages.KeyCreateHandler, d),
        (acct + r"/keys/" + _ID + r"/update", pages.KeyUpdateHandler, d),
        (acct + r"/keys/" + _ID + r"/revoke", pages.KeyRevokeHandler, d),
        (r"/admin/models", pages.ModelsHandler, d),
        (r"/admin/models/sync", operations.PriceSyncHandler, d),
        (r"/admin/requests", operations.RequestsHandler, d),
        (r"/admin/requests/" + _ID, operations.RequestHandler, d),
        (r"/admin/audit", operations.AuditHandler, d),
        (r"/admin/webhooks", operations.WebhooksHandler, d),
        (r"/admin/webhooks/(resend|test)", operations.WebhookWriteHandler, d),
        (r"/admin/payments", payments.PaymentsHandler, d),
        (r"/admin/payments/(ord_[0-9a-f]{1,40})/verify", payments.PaymentVerifyHandler, d),
        (r"/admin/static/(.*)", StaticHandler, {"path": STATIC}),
        # last: any other /admin/ address is the console's own 404 page (/admin/v1/... is the
        # management API's, whose routes come first and whose unknown paths answer JSON)
        (r"/admin/(?!v1(?:/|$)).*", pages.NotFoundPage, d),
    ]
