"""GET /v1/models and GET /v1/models/{id}: the catalog's visible models with `svc_pricing`.

No key is needed and nothing is counted toward rpm. Both read the node's in-memory catalog
(the bodies are rendered once per catalog version), so they never touch Redis.
"""
from __future__ import annotations

from upgate.handlers.base import BaseHandler


class ModelsHandler(BaseHandler):
    """`{"object": "list", "data": [model records]}`; 503 pricing_unavailable before any catalog."""

    def get(self) -> None:
        self.finish(self.ctx.catalog.list_json())


class ModelHandler(BaseHandler):
    """One model record. The openai client percent-encodes the id's slash
    (`acme%2Fchat-1:free`): Tornado already decodes the path argument once, so both forms
    arrive here as `acme/chat-1:free`. It is not decoded again: `acme%252Fchat-1` stays
    `acme%2Fchat-1`, a malformed id. Unknown, hidden or malformed → 404."""

    def get(self, model_id: str) -> None:
        self.finish(self.ctx.catalog.record_json(model_id))
