"""GET /v1/models and GET /v1/models/{id}: the catalog's visible models with `svc_pricing`.

No key is needed and nothing is counted toward rpm. Both read the node's in-memory catalog
(the bodies are rendered once per catalog version). When the request carries a valid key,
the X-RateLimit-* headers show that key's window, read without counting (`rate_peek`); a
missing, malformed, unknown or revoked key — or a store that does not answer — only means
no such headers: these routes never fail for the key's sake.
"""
from __future__ import annotations

import logging

import redis.exceptions

from upgate.services.auth import extract_key
from upgate.errors import GatewayError
from upgate.handlers.base import BaseHandler

log = logging.getLogger("upgate")


class _KeylessHandler(BaseHandler):
    async def peek_rate(self) -> None:
        """Set the X-RateLimit-* headers when a valid key came along; never raise for it."""
        if extract_key(self.request.headers) is None:
            return  # no key header: no Redis round trip at all
        ctx = self.ctx
        if not ctx.redis_ok:
            return  # the store is known to be down: answer at once, without the headers
        try:
            key, _account = await ctx.auth.authenticate(self.request.headers, ctx.client_address(self.request))
            self.set_rate(await ctx.ledger.rate_peek(key.account_id, key.key_id))
        except GatewayError:
            return  # invalid, revoked, expired or suspended: a keyless route ignores it
        except (redis.exceptions.RedisError, OSError) as e:
            log.warning("rate headers skipped on %s (request %s): store error %s",
                        self.request.path, self.request_id, type(e).__name__)


class ModelsHandler(_KeylessHandler):
    """`{"object": "list", "data": [model records]}`; 503 pricing_unavailable before any catalog."""

    async def get(self) -> None:
        await self.peek_rate()
        self.finish(self.ctx.catalog.list_json())


class ModelHandler(_KeylessHandler):
    """One model record. The openai client percent-encodes the id's slash
    (`acme%2Fchat-1:free`): Tornado already decodes the path argument once, so both forms
    arrive here as `acme/chat-1:free`. It is not decoded again: `acme%252Fchat-1` stays
    `acme%2Fchat-1`, a malformed id. Unknown, hidden or malformed → 404."""

    async def get(self, model_id: str) -> None:
        await self.peek_rate()
        self.finish(self.ctx.catalog.record_json(model_id))
