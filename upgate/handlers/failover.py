"""Failover of the proxy routes (a mixin of ProxyHandler): the request's candidates in order,
each model's routes inside it (docs/routes.md), all within the one hold admit placed.

A candidate failed before anything reached the client (CandidateFailed): the next route of the
same model, then the next model of the request's `models` list, as long as the failure is one
another upstream could fix (not invalid_request: the next would refuse the same body). At most
one attempt answers, and only that one is settled: a hold is sized once and billed once, at the
model's catalog price whichever route answered. A stream that failed after its first byte is
not a CandidateFailed (the client has content): it is never retried elsewhere.
"""
from __future__ import annotations

import math
import time

from upgate.errors import GatewayError
from upgate.handlers.stream import CLIENT_CLOSED, CandidateFailed

NO_FALLBACK = {"invalid_request"}  # the next candidate would refuse the same body
MAX_KEY_RETRIES = 8  # other keys of one pool tried after refusals, per route and request


def no_fallbacks(body: dict) -> bool:
    """The client's `provider.allow_fallbacks: false`: one route only (docs/routes.md)."""
    p = body.get("provider")
    return isinstance(p, dict) and p.get("allow_fallbacks") is False


class Failover:
    """Uses ProxyHandler's ctx, state (_aborted, _gone, _billed, _sse_open, failures), _try,
    _release and _finish_sse_error."""

    route_log: list | tuple = ()  # (model, route id, outcome, seconds) of a routed model's attempts

    def _check_cold(self, models) -> None:
        """429 when every candidate is cold (no I/O): a model of several routes when every
        route is, else by the spec's per-model cool-down."""
        routes, ledger = self.ctx.routes, self.ctx.ledger
        waits = [routes.model_cold(m) if m.routed else ledger.cold_until(m.id) for m in models]
        if all(w for w in waits):
            raise GatewayError("upstream_rate_limited", "This model is cooling down after repeated "
                               "provider rate limits.", retry_after=max(1, math.ceil(min(waits))))

    async def _forward(self, req, models) -> None:
        ctx = self.ctx
        last = None  # the last candidate's failure (none tried: upstream_unavailable)
        strikes: list[str] = []  # models the provider rate-limited: one cool-down strike each
        providers = ctx.providers
        for model in models:
            if self._aborted or self._gone:  # shutdown or the client left: no next candidate
                break
            if ctx.routes.model_cold(model) if model.routed else ctx.ledger.cold_until(model.id):
                continue
            # one route and one key: one attempt, exactly as before routes (the hot path)
            simple = not model.routed and not getattr(providers.get(model.provider), "pooled", False)
            try:
                if simple:
                    await self._try(req, model, model.routes[0])
                else:
                    await self._try_model(req, model, strikes)
                break
            except CandidateFailed as f:
                last = f.err
                if self._aborted or self._gone:  # we cancelled it: not the provider's failure
                    break
                if simple:  # (_try_model books its own)
                    self.failures.append((model.provider, f.err.code))
                    if f.strike:
                        strikes.append(model.id)
                if f.err.code in NO_FALLBACK:
                    break
        if self._billed:  # a candidate answered and was settled
            for m in strikes:
                await self._strike(m)
            return
        if last is None:
            last = GatewayError("upstream_unavailable")
        # every candidate failed before the client saw any content: nothing is charged, and a
        # `:free` request the provider never served goes back to the quota
        final = strikes.pop() if strikes else None
        for m in strikes:
            await self._strike(m)
        # The last strike rides in release's round trip, which returns no cool-down result: the
        # model was not cold before (cold ones are skipped) and is cold after → this made it cold.
        # (A strike of another node landing in the same instant would be counted here too.)
        warm = final is not None and not ctx.ledger.cold_until(final)
        outcome = CLIENT_CLOSED if self._gone else (502, "upstream_error") if self._aborted else \
            (last.status, last.code)
        await self._release(credit_free=True, strike=final, outcome=outcome)
        if warm and ctx.ledger.cold_until(final):
            self._count_cooldown(final)
        if self._gone:
            return
        if self._aborted:
            last = GatewayError("upstream_error", "The request was cut by the gateway's shutdown.")
        if self._sse_open:
            self._finish_sse_error(last, models[0].id)
            return
        raise last

    async def _try_model(self, req, model, strikes: list[str]) -> None:
        """`model`'s routes in turn until one answers (a pooled provider's route again with
        another key after a refusal); raises the last one's CandidateFailed. A single-route
        model's 429s strike the model, as before routes."""
        ctx = self.ctx
        routes = model.routes
        if model.routed:
            routes = ctx.routes.attempts(model, ctx.providers)
            if not routes:  # every route cold or disabled since the check: as for a cold model
                raise CandidateFailed(GatewayError("upstream_unavailable"))
            if no_fallbacks(req.body):
                routes = routes[:1]
            if not self.route_log:
                self.route_log = []
        failed = None
        for route in routes:
            refusals = 0
            while True:
                started = time.monotonic()
                try:
                    await self._try(req, model, route)
                except CandidateFailed as f:
                    failed = f
                    if self._aborted or self._gone:  # we cancelled it: not the provider's failure
                        raise
                    self.failures.append((route.provider, f.err.code))
                    provider = ctx.providers.get(route.provider)
                    if f.refused_key and refusals < MAX_KEY_RETRIES and ctx.routes.has_usable_key(provider):
                        refusals += 1  # the same route with another key of its pool
                        continue
                    break
                if model.routed:
                    ctx.routes.succeeded(model.id, route)
                return
            if model.routed:
                if self.route_log and self.route_log[-1][1:3] == (route.route_id, "ok"):
                    self.route_log.pop()  # it answered 200, then failed before any content
                self.route_log.append((model.id, route.route_id, failed.err.code, time.monotonic() - started))
                if failed.err.code not in NO_FALLBACK:
                    await ctx.routes.failed(model.id, route)
            elif failed.strike:
                strikes.append(model.id)
            if failed.err.code in NO_FALLBACK:
                break
        raise failed

    async def _strike(self, model_id: str) -> None:
        if await self.ctx.ledger.cooldown_strike(model_id) is not None:
            self._count_cooldown(model_id)

    def _count_cooldown(self, model_id: str) -> None:
        if self.ctx.metrics is not None:
            self.ctx.metrics.cooldowns.labels(model_id).inc()
