"""GET /healthz (liveness, and the state of what the node depends on) and GET /metrics
(Prometheus text).

/healthz is a liveness check: a PaaS or Kubernetes restarts a node that fails it. A store
outage is not cured by restarting every gateway node (they serve 503 service_unavailable and
recover by themselves when it answers), so the node answers 200 with `"status": "degraded"`
and names what is down; only a draining node (shutting down) answers 503, so a load balancer
stops sending it new requests.
"""
from __future__ import annotations

import asyncio
import glob
import hmac
import os

from upgate.errors import GatewayError
from upgate.handlers.base import BaseHandler

PING_TIMEOUT_S = 1.0  # a probe's own timeout is typically 1 s: a hung store must not exceed it


class HealthHandler(BaseHandler):
    async def get(self) -> None:
        ctx = self.ctx
        try:
            await asyncio.wait_for(ctx.redis.ping(), PING_TIMEOUT_S)
            redis_ok = True
        except Exception:  # any failure means degraded; the reason is in the node's log
            redis_ok = False
        ctx.redis_ok = redis_ok
        down = [] if redis_ok else ["redis"]
        body = {
            "status": "degraded" if down else "ok",
            "down": down,
            "redis": "ok" if redis_ok else "unreachable",
            "catalog": "loaded" if ctx.catalog.loaded else "missing",
            "draining": ctx.draining,
            "pid": os.getpid(),
            "journal": _journal(ctx),
        }
        self.write_json(body, 503 if ctx.draining else 200)


def _journal(ctx) -> dict:
    """Settlements the store did not take yet (replayed once it answers): the counters of this
    process and the bytes waiting on disk (shared by the node's worker processes)."""
    ledger = ctx.ledger
    path = ctx.settings.journal_path
    pending = 0
    for name in (path, *glob.glob(glob.escape(path) + ".replay.*")):
        try:
            pending += os.stat(name).st_size
        except OSError:  # absent, or replayed meanwhile
            pass
    return {"journaled": getattr(ledger, "journaled", 0), "replayed": getattr(ledger, "replayed", 0),
            "pending_bytes": pending}


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
