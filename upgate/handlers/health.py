"""GET /healthz (liveness, and the state of what the node depends on) and GET /metrics
(Prometheus text).

/healthz is a liveness check: a PaaS or Kubernetes restarts a node that fails it. A store
outage is not cured by restarting every gateway node (they serve 503 service_unavailable and
recover by themselves when it answers), so the node answers 200 with `"status": "degraded"`
and names what is down; only a draining node (shutting down) answers 503, so a load balancer
stops sending it new requests. A node with no model catalog is not ready either (503, the
reason in `reason`): it could only refuse every model, and the first `models load` (which every
node picks up at once) cures it, so a load balancer should not send it traffic meanwhile.
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
        if ctx.store_refusal:
            down.append("redis-eviction")
        reason = None if ctx.catalog.loaded else "no model catalog is loaded (upgate-admin models load FILE)"
        body = {
            "status": "not_ready" if reason else "degraded" if down else "ok",
            "reason": reason,
            "down": down,
            "warnings": [ctx.store_refusal, *ctx.store_warnings] if ctx.store_refusal else ctx.store_warnings,
            "redis": "ok" if redis_ok else "unreachable",
            "catalog": "loaded" if ctx.catalog.loaded else "missing",
            "draining": ctx.draining,
            "pid": os.getpid(),
            "journal": _journal(ctx),
        }
        self.write_json(body, 503 if ctx.draining or reason else 200)


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
    async def get(self) -> None:
        if not await metrics_allowed(self.ctx, self.request.headers):
            raise GatewayError("invalid_api_key", "/metrics needs `Authorization: Bearer <token>`: "
                               "UPGATE_METRICS_TOKEN or an admin token.")
        metrics = self.ctx.metrics
        if metrics is None:
            raise GatewayError("not_found", "Metrics are not enabled on this node.")
        body, content_type = metrics.render()
        self.set_header("Content-Type", content_type)
        self.finish(body)


async def metrics_allowed(ctx, headers) -> bool:
    """/metrics shows business figures: closed unless the operator opened it
    (UPGATE_METRICS_PUBLIC=1), or the request carries UPGATE_METRICS_TOKEN or an admin token."""
    if ctx.settings.metrics_public:
        return True
    scheme, _, token = headers.get("Authorization", "").strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return False
    expected = ctx.settings.metrics_token
    if expected and hmac.compare_digest(token.encode(), expected.encode()):
        return True
    return await _admin_token(ctx, token)


async def _admin_token(ctx, token: str) -> bool:
    """An admin token (upgate/services/admin_tokens.py, read-only ones included), through the node's
    management-API cache (`ctx.admin`, present once the management API is built in)."""
    admin = getattr(ctx, "admin", None)
    if admin is None:
        return False
    return await admin.verify(token) is not None
