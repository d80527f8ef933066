"""GET /healthz (liveness, and the store's state) and GET /metrics (Prometheus text)."""
from __future__ import annotations

import hmac

from upgate.errors import GatewayError
from upgate.handlers.base import BaseHandler


class HealthHandler(BaseHandler):
    async def get(self) -> None:
        ctx = self.ctx
        try:
            await ctx.redis.ping()
            redis_ok = True
        except Exception:  # any failure means degraded; the reason is in the node's log
            redis_ok = False
        ctx.redis_ok = redis_ok
        body = {
            "status": "ok" if redis_ok else "degraded",
            "redis": "ok" if redis_ok else "unreachable",
            "catalog": "loaded" if ctx.catalog.loaded else "missing",
            "draining": ctx.draining,
        }
        self.write_json(body, 200 if redis_ok and not ctx.draining else 503)


class MetricsHandler(BaseHandler):
    def get(self) -> None:
        token = self.ctx.settings.metrics_token
        if token:
            given = self.request.headers.get("Authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
                raise GatewayError("invalid_api_key")
        metrics = self.ctx.metrics
        if metrics is None:
            raise GatewayError("not_found", "Metrics are not enabled on this node.")
        body, content_type = metrics.render()
        self.set_header("Content-Type", content_type)
        self.finish(body)
