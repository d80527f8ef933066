"""Prometheus metrics for one node, and the per-request JSON access-log line.

Neither ever holds prompt or response content or key material: the log names the key by its
display prefix only (see upgate/http/access_log.py for how lines are written).

With several worker processes on one port (`upgate serve --processes N`), a scrape reaches
one worker at random, so each worker writes its samples to files in PROMETHEUS_MULTIPROC_DIR
(prometheus-client's multiprocess mode, set up by `upgate serve` before this module is
imported) and /metrics renders the sum over every worker. Gauges therefore move by inc/dec
(a callback gauge would only ever show the worker that was scraped).

A request's samples are tallied in plain dicts and handed to prometheus-client once a second
(and before every render): its inc() and observe() take a lock and several Python calls each,
~3% of a request's CPU for five samples, where a dict increment is one. A worker's samples
therefore reach a scrape of another worker within a second.
"""
from __future__ import annotations

import asyncio
import bisect
import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client import values
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from upgate.billing import money


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
                                "(given up after the retry window), overflow (moved to the failed list from a full "
                                "outbox), dropped (lost: webhooks off, or the failed list full)", ["outcome"], registry=r)
        # models of several routes (docs/routes.md): each attempt by route and outcome ("ok" or
        # the failure's code), and its wait for the response headers (or the failure)
        self.route_requests = Counter("upgate_route_requests_total", "Attempts on a route of a model "
                                      "of several routes, by outcome", ["model", "route", "outcome"],
                                      registry=r)
        self.route_seconds = Histogram("upgate_route_seconds", "A route's wait for response headers "
                                       "(or its failure)", ["model", "route"], buckets=_SLOW, registry=r)
        self.cooldowns = Counter("upgate_cooldowns_total", "Models turned cold", ["model"], registry=r)
        self.payments = Counter("upgate_payments_total", "Payment verifications and their outcomes, per "
                                "gateway: paid (credited now), already_paid, not_paid, amount_mismatch, "
                                "unavailable, refused, expired; started (sent to the bank page); "
                                "throttled (a customer past payments/bounds.py, nothing asked)",
                                ["gateway", "outcome"], registry=r)
        self.sms = Counter("upgate_sms_sends_total", "Sign-in texts asked of the SMS provider by outcome: "
                           "sent, failed; paused (refused to every phone while it is failing)",
                           ["outcome"], registry=r)
        # livesum: the sum over the workers alive now (a dead worker's file is dropped)
        self.streams = Gauge("upgate_open_streams", "Streams open on this node", registry=r,
                             multiprocess_mode="livesum")
        self.inflight = Gauge("upgate_inflight_requests", "Billable requests in flight on this node",
                              registry=r, multiprocess_mode="livesum")
        self._children: dict = {}
        self._bounds = {self.overhead: _FAST, self.upstream: _SLOW, self.route_seconds: _SLOW}
        self._counts: dict = {}  # (counter or gauge, labels) → change not yet handed over
        self._timings: dict = {}  # (histogram, labels) → [sum, count in each bucket (+Inf last)]

    def child(self, metric, *labels: str):
        """`metric.labels(*labels)`, cached: prometheus-client checks and locks on every call.
        Every label set here is bounded (routes, statuses, codes, providers, outcomes)."""
        key = (metric, labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*labels)
        return found

    def count_payment(self, gateway: str, outcome: str, n: int = 1) -> None:
        """One payment step's outcome (upgate/payments/): bounded labels, gateways × outcomes."""
        self.count(self.payments, (gateway, outcome), n)

    def count(self, metric, labels: tuple = (), n: int = 1) -> None:
        """Add `n` to a counter (or move a gauge) with these label values, at the next flush."""
        key, counts = (metric, labels), self._counts
        counts[key] = counts.get(key, 0) + n

    def time(self, histogram, label: str | tuple, seconds: float) -> None:
        """Observe `seconds` in a histogram with one label (or a tuple of them), at the next flush."""
        key = (histogram, label if isinstance(label, tuple) else (label,))
        found = self._timings.get(key)
        if found is None:
            found = self._timings[key] = [0.0] + [0] * (len(self._bounds[histogram]) + 1)
        found[0] += seconds
        found[1 + bisect.bisect_left(self._bounds[histogram], seconds)] += 1  # (le: value <= bound)

    def flush(self) -> None:
        """Hand the tallied samples to prometheus-client."""
        counts, self._counts = self._counts, {}
        for (metric, labels), n in counts.items():
            if n:
                (self.child(metric, *labels) if labels else metric).inc(n)
        timings, self._timings = self._timings, {}
        for (histogram, labels), (total, *buckets) in timings.items():
            child = self.child(histogram, *labels)
            child._sum.inc(total)  # what observe() does, a bucket's worth at a time
            for value, n in zip(child._buckets, buckets):
                if n:
                    value.inc(n)

    async def run_flusher(self, interval_s: float = 1.0) -> None:
        while True:
            await asyncio.sleep(interval_s)
            self.flush()

    def opened(self, handler) -> None:
        """A billable request took its hold (it is in ctx.inflight until closed())."""
        self.count(self.inflight)
        if handler.stream:
            self.count(self.streams)

    def closed(self, handler) -> None:
        self.count(self.inflight, (), -1)
        if handler.stream:
            self.count(self.streams, (), -1)

    def reaped(self, n: int) -> None:
        """The node's reaper released `n` holds a stalled or crashed node left behind."""
        self.holds.labels("reaped").inc(n)

    def render(self) -> tuple[bytes, str]:
        self.flush()
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
    err = getattr(handler, "error", None)  # (the console's pages have none: their errors are HTML)
    code = err.code if err is not None else ""
    total = time.monotonic() - handler.started
    upstream_ms = getattr(handler, "upstream_ms", 0.0)
    m = ctx.metrics
    if m is not None:
        m.count(m.requests, (route, str(status), code))
        if route.startswith("/v1/") and route != "/v1/models":
            m.time(m.overhead, route, max(0.0, total - upstream_ms / 1000))
        for provider, seconds in getattr(handler, "attempts", ()):  # every attempt, failed ones too
            m.time(m.upstream, provider, seconds)
        outcome = getattr(handler, "billing", None)
        if outcome:
            m.count(m.holds, ("placed",))
            m.count(m.holds, (outcome,))
        for model, route_id, outcome, seconds in getattr(handler, "route_log", ()):
            m.count(m.route_requests, (model, route_id, outcome))
            m.time(m.route_seconds, (model, route_id), seconds)
        for provider, failed in getattr(handler, "failures", ()):  # each failed candidate
            if failed.startswith(("upstream_", "free_capacity")):
                m.count(m.upstream_errors, (provider, failed))
    if ctx.access_log is None:
        return
    key = getattr(handler, "key", None)
    record = getattr(handler, "record", None)
    ts, overhead_ms = round(time.time(), 3), round(max(0.0, total * 1000 - upstream_ms), 3)
    if record is not None:  # a billable request: the fields of its request record too, in one literal
        r = record
        line = {"ts": ts, "request_id": handler.request_id, "method": handler.request.method,
                "route": route, "status": status, "code": code or None, "key": key.prefix,
                "account": key.account_id, "model": r["model"], "stream": bool(handler.stream),
                "upstream_ms": round(upstream_ms, 2), "overhead_ms": overhead_ms,
                "cost_micro": handler.cost_micro, "account_id": r["account_id"], "key_id": r["key_id"],
                "key_prefix": r["key_prefix"], "answered_model": r["answered_model"],
                "provider": r["provider"], "prompt_tokens": r["prompt_tokens"],
                "completion_tokens": r["completion_tokens"], "cached_tokens": r["cached_tokens"],
                "hold_toman": money.fmt(r["hold_micro"]), "cost_toman": money.fmt(r["cost_micro"]),
                "ttfb_ms": r["ttfb_ms"], "duration_ms": r["duration_ms"]}
    else:
        hold = getattr(handler, "hold", None)
        answered = getattr(handler, "answered", None)
        line = {"ts": ts, "request_id": handler.request_id, "method": handler.request.method,
                "route": route, "status": status, "code": code or None,
                "key": key.prefix if key is not None else None,
                "account": key.account_id if key is not None else None,
                "model": answered.id if answered is not None else None,
                "stream": bool(getattr(handler, "stream", False)),
                "upstream_ms": round(upstream_ms, 2), "overhead_ms": overhead_ms,
                "cost_micro": getattr(handler, "cost_micro", 0) if hold is not None else 0}
    ctx.access_log.write(line)


def _route(handler) -> str:
    """A bounded label: the route, never a raw unknown path (that would let anyone grow the
    metric's cardinality without limit). The management API's and the console's handlers name
    theirs (`route_label`): their paths carry account and key ids."""
    label = getattr(handler, "route_label", None)
    if label:
        return label
    path = handler.request.path
    if type(handler).__name__ in ("NotFoundHandler", "ResponsesHandler"):
        return "unmatched"
    if path.startswith("/v1/models/"):
        return "/v1/models/{id}"
    return path
