"""The route table: the map of the service. `make_app(ctx)` is what `serve`, `demo` and tests call."""
from __future__ import annotations

import tornado.web

from upgate import console, dashboard
from upgate.handlers import admin
from upgate.handlers.base import NotFoundHandler, ResponsesHandler
from upgate.handlers.guard import unguarded
from upgate.handlers.health import HealthHandler, MetricsHandler
from upgate.handlers.me import MeHandler
from upgate.handlers.messages import CountTokensHandler, MessagesHandler
from upgate.handlers.models import ModelHandler, ModelsHandler
from upgate.handlers.proxy import ChatHandler, CompletionsHandler, EmbeddingsHandler
from upgate.handlers.responses import ResponsesAPIHandler, StoredResponseHandler
from upgate.handlers.usage import UsageHandler

_GONE = r"/v1/(?:files|fine_tuning|assistants|batches|audio|images)(?:/.*)?"


def make_app(ctx, **settings) -> tornado.web.Application:
    d = {"ctx": ctx}
    routes = [
        (r"/healthz", HealthHandler, d),
        (r"/metrics", MetricsHandler, d),
        (r"/v1/chat/completions", ChatHandler, d),
        (r"/v1/embeddings", EmbeddingsHandler, d),
        (r"/v1/completions", CompletionsHandler, d),
        (r"/v1/messages", MessagesHandler, d),  # the Anthropic Messages API (handlers/messages.py)
        (r"/v1/messages/count_tokens", CountTokensHandler, d),
        (r"/v1/models", ModelsHandler, d),
        (r"/v1/models/(.+)", ModelHandler, d),
        (r"/v1/svc/me", MeHandler, d),
        (r"/v1/svc/usage", UsageHandler, d),
        # the Responses API, an operator's choice (UPGATE_RESPONSES=on); off, the spec's 404
        *([(r"/v1/responses", ResponsesAPIHandler, d), (r"/v1/responses/.*", StoredResponseHandler, d)]
          if ctx is not None and ctx.settings.responses else [(r"/v1/responses(?:/.*)?", ResponsesHandler, d)]),
        (_GONE, NotFoundHandler, d),
        # the management API (/admin/v1/...): admin tokens only; after every /v1 route, so a
        # client request never tries these patterns (docs/admin-api.md)
        *admin.routes(d),
        # the operator's console: HTML pages under /admin/ (upgate/console/, docs/console.md)
        *console.routes(ctx),
        # the account holders' dashboard: HTML pages under /dashboard/ (upgate/dashboard/, docs/dashboard.md)
        *dashboard.routes(ctx),
    ]
    # every route checks its credential and size limit before it reads a body (guard.py): a
    # handler that does not would let anyone make the node hold any body it is sent
    if loose := unguarded(routes, NotFoundHandler):
        raise TypeError(f"handlers without upgate.handlers.guard.BodyGuard: {', '.join(loose)}")
    return tornado.web.Application(
        routes,
        default_handler_class=NotFoundHandler,
        default_handler_args=d,
        compress_response=False,  # streams must reach the client chunk by chunk
        log_function=lambda handler: None,  # the access log is ours (one JSON line, no content)
        **settings,
    )
