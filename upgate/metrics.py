"""Prometheus metrics for one node, and the per-request JSON access-log line.

Neither ever holds prompt or response content or key material: the log names the key by its
display prefix only (see upgate/access_log.py for how lines are written).

With several worker processes on one port (`upgate serve --processes N`), a scrape reaches
one worker at random, so each worker writes its samples to files in PROMETHEUS_MULTIPROC_DIR
(prometheus-client's multiprocess mode, set up by `upgate serve` before this module is
imported) and /metrics renders the sum over every worker. Gauges therefore move by inc/dec
(a callback gauge would only ever show the worker that was scraped).
"""
from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client import values
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from upgate import records


def multiprocess() -> bool:
    """True when samples go through files shared by every worker process (decided by
    prometheus-client when it was imported, from PROMETHEUS_MULTIPROC_DIR)."""
    return bool(getattr(values.ValueClass, "_multiprocess", False))


_FAST = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1)
_SLOW = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class Metrics:
    def __init__(self):
        r = self.registry = CollectorRegistry()
        self.requests = Counter("upgate_requests_total", "Requests by route, status and error code",
                                ["route", "status", "code"], registry=r)
        self.overhead = Histogram("upgate_overhead_seconds", "Time spent in the gateway itself "
                                  "(total minus upstream)", ["route"], buckets=_FAST, registry=r)
        self.upstream = Histogram("upgate_upstream_seconds", "Time waiting on the provider",
                                  ["provider"], buckets=_SLOW, registry=r)
        self.holds = Counter("upgate_holds_total", "Holds by outcome", ["outcome"], registry=r)
        self.upstream_errors = Counter("upgate_upstream_errors_total", "Provider failures",
                                       ["provider", "code"], registry=r)
        self.webhooks = Counter("upgate_webhook_deliveries_total", "Webhook delivery attempts by outcome: "
                                "delivered (2xx), retried (failed, another attempt scheduled), failed "
                                "(given up after the retry window)", ["outcome"], registry=r)
        self.cooldowns = Counter("upgate_cooldowns_total", "Models turned cold", ["model"], registry=r)
        # livesum: the sum over the workers alive now (a dead worker's file is dropped)
        self.streams = Gauge("upgate_open_streams", "Streams open on this node", registry=r,
                             multiprocess_mode="livesum")
        self.inflight = Gauge("upgate_inflight_requests", "Billable requests in flight on this node",
                              registry=r, multiprocess_mode="livesum")
        self._children: dict = {}

    def child(self, metric, *labels: str):
        """`metric.labels(*labels)`, cached: prometheus-client checks and locks on every call.
        Every label set here is bounded (routes, statuses, codes, providers, outcomes)."""
        key = (metric, labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*labels)
        return found

    def opened(self, handler) -> None:
        """A billable request took its hold (it is in ctx.inflight until closed())."""
        self.inflight.inc()
        if handler.stream:
            self.streams.inc()

    def closed(self, handler) -> None:
        self.inflight.dec()
        if handler.stream:
            self.streams.dec()

    def reaped(self, n: int) -> None:
        """The node's reaper released `n` holds a stalled or crashed node left behind."""
        self.holds.labels("reaped").inc(n)

    def render(self) -> tuple[bytes, str]:
        if multiprocess():
            from prometheus_client import multiprocess as mp

            registry = CollectorRegistry()
            mp.MultiProcessCollector(registry)
            return generate_latest(registry), CONTENT_TYPE_LATEST
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


def observe(ctx, handler) -> None:
    """Called once per request from BaseHandler.on_finish."""
    route = _route(handler)
    status = handler.get_status()
    err = handler.error
    code = err.code if err is not None else ""
    total = time.monotonic() - handler.started
    upstream_ms = getattr(handler, "upstream_ms", 0.0)
    m = ctx.metrics
    if m is not None:
        m.child(m.requests, route, str(status), code).inc()
        if route.startswith("/v1/") and route != "/v1/models":
            m.child(m.overhead, route).observe(max(0.0, total - upstream_ms / 1000))
        for provider, seconds in getattr(handler, "attempts", ()):  # every attempt, failed ones too
            m.child(m.upstream, provider).observe(seconds)
        outcome = getattr(handler, "billing", None)
        if outcome:
            m.child(m.holds, "placed").inc()
            m.child(m.holds, outcome).inc()
        for provider, failed in getattr(handler, "failures", ()):  # each failed candidate
            if failed.startswith(("upstream_", "free_capacity")):
                m.child(m.upstream_errors, provider, failed).inc()
    if ctx.access_log is None:
        return
    key = getattr(handler, "key", None)
    hold = getattr(handler, "hold", None)
    answered = getattr(handler, "answered", None)
    line = {
        "ts": round(time.time(), 3),
        "request_id": handler.request_id,
        "method": handler.request.method,
        "route": route,
        "status": status,
        "code": code or None,
        "key": key.prefix if key is not None else None,
        "account": key.account_id if key is not None else None,
        "model": answered.id if answered is not None else None,
        "stream": bool(getattr(handler, "stream", False)),
        "upstream_ms": round(upstream_ms, 2),
        "overhead_ms": round(max(0.0, total * 1000 - upstream_ms), 3),
        "cost_micro": getattr(handler, "cost_micro", 0) if hold is not None else 0,
    }
    record = getattr(handler, "record", None)
    if record is not None:  # a billable request: the fields of its request record too
        for name, value in records.log_fields(record).items():
            line.setdefault(name, value)
        line["model"] = record.get("model")
    ctx.access_log.write(line)


def _route(handler) -> str:
    """A bounded label: the route, never a raw unknown path (that would let anyone grow the
    metric's cardinality without limit)."""
    path = handler.request.path
    if type(handler).__name__ in ("NotFoundHandler", "ResponsesHandler"):
        return "unmatched"
    if path.startswith("/v1/models/"):
        return "/v1/models/{id}"
    return path
