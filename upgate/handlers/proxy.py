"""POST /v1/chat/completions, /v1/completions, /v1/embeddings: validate, admit, forward, settle.

No response means no charge: errors before admit place no hold; a provider error releases the
hold; a cut stream settles only what was relayed. Billing happens before the response's last
byte, so a client that reads /v1/svc/me right after sees the charge.
"""
from __future__ import annotations

import logging
import time

import orjson
import redis.exceptions

from upgate.billing import money, sizing
from upgate.catalog.rules import check_allowed
from upgate.errors import GatewayError
from upgate.handlers import body_work
from upgate.handlers.base import BaseHandler
from upgate.handlers.failover import Failover
from upgate.handlers.stream import CandidateFailed, StreamRelay
from upgate.http.request import header
from upgate.billing.ledger import Rejected, SettlementNotRecorded
from upgate.billing.output_count import as_ours, chars_output, estimate_tokens, tokens_or
from upgate.billing.refusals import LARGE_BODY
from upgate.handlers.requests import parse_json, validate
from upgate.upstream.client import UpstreamCut, UpstreamTimeout, UpstreamUnreachable
from upgate.upstream.dialects import decode_answer, prepare_body, request_headers
from upgate.upstream.errors import body_error_message, map_error

log = logging.getLogger("upgate")

_RATE_CODES = {"upstream_rate_limited", "free_capacity_exhausted"}


class ProxyHandler(Failover, StreamRelay, BaseHandler):
    ROUTE = "chat"  # validation rules
    PATH = "chat/completions"  # appended to the provider's base URL
    CAPABILITY = "chat"

    keep_body = True
    needs_key = True
    # Per-request state. Class defaults, because on_connection_close and on_finish may run
    # for a request that prepare() refused before it got anywhere.
    _call = None
    _gone = False  # the client went away
    _generated = False  # a stream's provider has finished a choice: its usage event comes next
    _aborted = False  # shutdown cut this request
    _sse_open = False
    _billed = True  # nothing to settle until a hold exists
    hold = None
    answered = None
    cost_micro = 0
    upstream_ms = 0.0  # time spent on the provider, summed over every attempt
    attempts: list | tuple = ()  # (provider, seconds) of every upstream attempt, for metrics
    failures: list | tuple = ()  # (provider, code) of every candidate that failed
    _attempt = None  # (provider, start) of the upstream attempt in progress
    stream = False
    billing = None  # "settled" | "released", for metrics
    free = False
    model_id = None  # the model the client asked for (its first, with a `models` list)
    names: dict = {}  # catalog id → the alias the client asked for it by (answers name it)
    ttfb_ms = None  # request arrival → the answering provider's response headers
    record = None  # the request record (upgate/services/records.py) settle/release kept; the access log too
    prompt_estimate: int | None = None  # the body's prompt tokens as sizing estimates them, once

    # ---- the request
    async def post(self) -> None:
        raw = self.body_bytes()
        if self._finished or raw is None:
            return
        ctx = self.ctx
        key = self.key  # checked in prepare(), before the body was read
        # a key admit refused is refused again here, before its body is parsed (refusals.py)
        try:
            ctx.refusals.check_rate(key.key_id)
        except Rejected as e:
            self.set_rate(e.rate)
            raise
        if len(raw) > LARGE_BODY:  # (the model is not known yet: may it be a free one?)
            free_model = any(m.free and self.CAPABILITY in m.capabilities and
                             (key.allowed_models is None or m.id in key.allowed_models)
                             for m in ctx.catalog.visible())
            await ctx.refusals.check_balance(ctx.redis, key.account_id, len(raw), free_model)
        req = None
        try:
            req = await body_work.run(len(raw), self._understand, raw)
            self._body = []
            models = [ctx.catalog.resolve(m) for m in req.model_ids]
            for m in models:
                if self.CAPABILITY not in m.capabilities:
                    raise GatewayError("invalid_request", f"Model {m.id} does not support {self.PATH}.")
            check_allowed(key.allowed_models, [m.id for m in models])  # (an alias checks as its model)
            self._check_cold(models)
        except GatewayError:
            if req is not None and req.model_ids:  # the refused request's record names it
                self.model_id = str(req.model_ids[0])[:200]
            await self._peek_rate(key)
            raise
        self.stream, self.model_id = req.stream, models[0].id
        if any(m.id != name for m, name in zip(models, req.model_ids)):
            self.names = {m.id: name for m, name in zip(models, req.model_ids)}
        free = all(m.free for m in models)
        hold_micro = 0 if free else sizing.hold_micro(req.body, models, prompt=self.prompt_estimate)
        alternative = None
        if free and (alt := ctx.catalog.alternative_for(models[0])) is not None:
            alternative = {
                "alternative_model": alt.id,
                "alternative_model_price_toman_per_million":
                    money.fmt(money.parse_toman(alt.completion_toman_per_million)),
            }
        try:
            self.hold = await ctx.ledger.admit(
                account_id=key.account_id, key_id=key.key_id, model=models[0].id,
                hold_micro=hold_micro, stream=req.stream, free=free, alternative=alternative,
                request_id=self.request_id)
        except Rejected as e:
            if e.rate is not None:
                self.set_rate(e.rate)
            ctx.refusals.note(key.key_id, key.account_id, e)
            if e.code == "insufficient_balance" and not free:
                self._smaller_fits(e, req.body, models, self.prompt_estimate)
            raise
        self.set_rate(self.hold.rate)
        self._billed = False
        self.free = free
        self.attempts, self.failures = [], []
        ctx.inflight[self.hold.hold_id] = self
        if ctx.metrics is not None:
            ctx.metrics.opened(self)
        try:
            await self._forward(req, models)
        except SettlementNotRecorded as e:
            # the store and the journal both refused the charge (logged for the operator): a JSON
            # client gets the 503, a stream already under way ends with an error event
            if not self._sse_open:
                raise
            if not self._finished and not self._gone:
                self._finish_sse_error(e, self.answered.id if self.answered else models[0].id)
        finally:
            ctx.inflight.pop(self.hold.hold_id, None)
            if ctx.metrics is not None:
                ctx.metrics.closed(self)
            if not self._billed:  # an unexpected error: never leave a hold behind
                await self._release()

    @staticmethod
    def _smaller_fits(e: Rejected, body: dict, models: list, prompt: int | None) -> None:
        """A 402 says when the same request with a smaller max_tokens would fit what is
        available (`svc.max_tokens_that_fit`), as the key's monthly-limit 429 does."""
        try:
            available = money.parse_toman((e.svc or {}).get("available_toman", "0"), allow_negative=True)
        except (ValueError, TypeError):
            return
        fits = sizing.max_tokens_within(body, models, available, prompt=prompt) if available > 0 else 0
        if fits > 0:
            e.svc = {**(e.svc or {}), "max_tokens_that_fit": fits}
            e.message = (f"The wallet's available balance does not cover this request's hold; the same "
                         f"request with max_tokens at most {fits} fits.")

    def _understand(self, raw: bytes):
        """The body's work (body_work.py: off the loop when large): parse, translate and
        validate it, and estimate its prompt once (the hold, the settle and a stream's
        estimate all use that one number)."""
        req = self._request(parse_json(raw, shape_checked=True))
        self.prompt_estimate = sizing.prompt_tokens(req.body)
        return req

    def _prompt(self, body) -> int:
        """The prompt's estimated tokens (computed by _understand; here for a body it never saw)."""
        if self.prompt_estimate is None:
            self.prompt_estimate = sizing.prompt_tokens(body)
        return self.prompt_estimate

    async def _peek_rate(self, key) -> None:
        """The X-RateLimit-* values for an error before admit. Best effort: a store that does not
        answer must not turn the spec's 4xx into a 503; the headers are then left out."""
        try:
            self.set_rate(await self.ctx.ledger.rate_peek(key.account_id, key.key_id))
        except (redis.exceptions.RedisError, OSError) as e:
            log.warning("rate headers left out of request %s: store error (%s)", self.request_id,
                        type(e).__name__)

    async def _try(self, req, model, route) -> None:
        """One attempt: `model` through `route` (handlers/failover.py picks them)."""
        ctx = self.ctx
        provider = ctx.providers.get(route.provider)
        if provider is None or not provider.available:
            raise CandidateFailed(GatewayError("upstream_unavailable"))
        if model.routed:
            model = model.via(route)  # names the route's provider and upstream model; same prices
        key_var, api_key = ctx.routes.pick_key(provider) if provider.pooled else (None, None)
        dialect, path = self._wire(provider)
        payload = prepare_body(req.body, dialect, model.upstream_model, req.stream, path=path)
        call = self._call = ctx.upstream.open(provider.url(path), payload,
                                              self._upstream_headers(provider, provider.headers(api_key)))
        self._attempt = (model.provider, time.monotonic())
        try:
            try:
                await call.start()
            except UpstreamUnreachable:
                raise CandidateFailed(GatewayError("upstream_unavailable")) from None
            except UpstreamTimeout:
                raise CandidateFailed(GatewayError("upstream_timeout")) from None
            except UpstreamCut:
                raise CandidateFailed(GatewayError("upstream_error")) from None
            if call.status != 200:
                try:
                    raw = await call.body()
                except (UpstreamCut, UpstreamTimeout):
                    raw = b""
                self._attempt_over()
                status, code, message = map_error(call.status, raw, provider, model.free, model)
                refused = key_var if call.status in (401, 403) else None
                if refused:  # out of its pool on every node, logged for the operator
                    await ctx.routes.refuse_key(provider.name, refused)
                raise CandidateFailed(GatewayError(code, message, status=status), strike=code in _RATE_CODES,
                                      refused_key=refused)
            self.answered = model
            if model.routed:  # booked now: the access log and metrics are written as the answer ends
                self.route_log.append((model.id, route.route_id, "ok", time.monotonic() - self._attempt[1]))
            self.ttfb_ms = round((time.monotonic() - self.started) * 1000)
            if req.stream:
                await self._relay_stream(call, model, req.body)
            else:
                await self._relay_json(call, model, req.body)
        finally:
            self._attempt_over()

    def _attempt_over(self) -> None:
        """The provider is done with the current attempt: book its time, once. Every attempt's
        wait is upstream time, failed, timed-out and cut ones included; otherwise a 504 or a
        fallback would count as the gateway's own overhead. Called before the response's last
        byte where one follows (the access log is written when the response finishes)."""
        if self._attempt is None:
            return
        provider, start = self._attempt
        self._attempt = None
        secs = time.monotonic() - start
        self.upstream_ms += secs * 1000
        self.attempts.append((provider, secs))

    # ---- non-streaming: one JSON body
    async def _relay_json(self, call, model, body) -> None:
        try:
            raw = await call.body()
            self._attempt_over()
            obj = decode_answer(self._dialect(model), raw)
            if not isinstance(obj, dict):
                raise ValueError("not an object")
        except UpstreamTimeout:  # headers, then not one body byte within the silence limit
            raise CandidateFailed(GatewayError("upstream_timeout")) from None
        except UpstreamCut:
            raise CandidateFailed(GatewayError("upstream_error", "The provider's response was cut off.")) from None
        except ValueError:  # orjson.JSONDecodeError included
            raise CandidateFailed(GatewayError("upstream_error", "The provider returned a malformed response.")) from None
        if isinstance(obj.get("error"), dict):  # some providers answer 200 with an error body
            raise CandidateFailed(GatewayError("upstream_error", body_error_message(
                obj["error"], self.ctx.providers.get(model.provider), model)))
        usage = obj.get("usage") if isinstance(obj.get("usage"), dict) else {}
        prompt = tokens_or(usage.get("prompt_tokens"), self._prompt(body))
        completion = tokens_or(usage.get("completion_tokens"), estimate_tokens(chars_output(obj, "message")))
        await self._settle(model, body, prompt, completion, usage)
        as_ours(obj, model, self.names.get(model.id))
        self._add_meta(obj, model)
        self.finish(self._answer_bytes(obj))

    # ---- billing
    async def _settle(self, model, body, prompt: int, completion: int, usage: dict | None = None,
                      code: str | None = None) -> None:
        """Charge by the provider's usage: cached prompt tokens at their own prices, or the
        provider's reported cost where its provider section says bill_by = "provider_cost".
        `code`: why a stream was cut part-way, for the request record (None: it completed)."""
        if self._billed:
            return
        self._billed = True
        self.billing = "settled"
        cached, write = sizing.cache_tokens(usage)
        self.cost_micro = sizing.cost_micro(model, prompt, completion, sizing.wants_web_search(body, model.id),
                                            cached, write)
        provider = self.ctx.providers.get(model.provider)
        # a model of several routes is billed at its catalog prices, whichever route answered
        if provider is not None and provider.bill_by == "provider_cost" and not model.routed:
            usd, rate = sizing.reported_cost(usage), self.ctx.catalog.cost_rate(model.provider)
            if usd is not None and rate is not None:  # else the token prices, as for any provider
                self.cost_micro = sizing.provider_cost_micro(usd, *rate)
        self.prompt_tokens, self.completion_tokens = prompt, completion
        self.record = self._record(200, code, prompt, completion, min(cached, prompt))
        if not await self.ctx.ledger.settle(
                self.key.account_id, self.hold.hold_id, key_id=self.key.key_id, model=model.id,
                cost_micro=self.cost_micro, prompt_tokens=prompt, completion_tokens=completion,
                cached_tokens=min(cached, prompt), cooldown_reset=model.id, record=self.record):
            # the store knew no such hold (lost in a failover, or closed by something else):
            # the answer went out uncharged, and only the operator can make that right
            log.warning("request %s: the store had no hold %s to settle; %d micro-toman for "
                        "account %s were not charged", self.request_id, self.hold.hold_id,
                        self.cost_micro, self.key.account_id)

    async def _release(self, credit_free: bool = False, strike: str | None = None,
                       outcome: tuple = (500, "internal_error")) -> None:
        """Charge nothing. `outcome`: (status, code) the request ended with."""
        if self._billed:
            return
        self._billed = True
        self.billing = "released"
        self.record = self._record(*outcome, 0, 0, 0)
        await self.ctx.ledger.release(self.key.account_id, self.hold.hold_id,
                                      credit_free=credit_free and self.free, strike=strike,
                                      record=self.record)

    def _record(self, status: int, code: str | None, prompt: int, completion: int, cached: int) -> dict:
        """The request's record (upgate/services/records.py): no content, only what it cost and how it went."""
        answered = self.answered
        return {"request_id": self.request_id, "account_id": self.key.account_id,
                "key_id": self.key.key_id, "key_prefix": self.key.prefix, "model": self.model_id,
                "answered_model": answered.id if answered else None,
                "provider": answered.provider if answered else None, "stream": self.stream,
                "status": status, "code": code, "prompt_tokens": prompt, "completion_tokens": completion,
                "cached_tokens": cached, "hold_micro": self.hold.hold_micro,
                "cost_micro": self.cost_micro if self.billing == "settled" else 0,
                "ttfb_ms": self.ttfb_ms if answered else None,
                "duration_ms": round((time.monotonic() - self.started) * 1000)}

    @property
    def _meta(self) -> bool:
        return header(self.request.headers, "X-Svc-Include-Meta") == "1"

    def _add_meta(self, obj: dict, model) -> None:
        if self._meta:
            obj["svc"] = {
                "request_id": self.request_id, "cost_toman": money.fmt(self.cost_micro),
                "hold_toman": money.fmt(self.hold.hold_micro), "model": model.id,
            }

    # ---- the client's and the provider's wire formats (hooks: handlers/messages.py speaks the
    # Messages API to its client; a provider's dialect decodes to chat, upstream/dialects.py)
    def _request(self, body: dict):
        """The validated request (ProxyRequest) for a parsed body."""
        return validate(body, self.ROUTE)

    def _answer_bytes(self, obj: dict) -> bytes:
        """A JSON answer (chat shape, settled) as the client's bytes."""
        return orjson.dumps(obj)

    def _upstream_headers(self, provider, headers: dict) -> dict:
        """The provider's request headers in its dialect (a Messages client adds its
        anthropic-beta)."""
        return request_headers(provider.dialect, headers)

    def _wire(self, provider) -> tuple[str, str]:
        """(dialect, path) a request of this route goes to `provider` in (handlers/responses.py
        sends a Responses request as it is to a provider that speaks that API)."""
        return provider.dialect, self.PATH

    def _dialect(self, model) -> str:
        provider = self.ctx.providers.get(model.provider)
        return provider.dialect if provider is not None else "openai"

    # ---- lifecycle
    def on_connection_close(self) -> None:
        super().on_connection_close()  # a body still coming: its future fails, the task ends
        self._gone = True
        if self._call is not None:
            if self._generated:
                self._call.nudge()  # the relay waits a moment for the usage event, then ends it
            else:
                self._call.cancel()

    def abort(self) -> None:
        """Graceful shutdown's grace period is over: cut this request, settling what was relayed."""
        self._aborted = True
        if self._call is not None:
            self._call.cancel()


class ChatHandler(ProxyHandler):
    pass


class CompletionsHandler(ProxyHandler):
    ROUTE, PATH, CAPABILITY = "completions", "completions", "completions"


class EmbeddingsHandler(ProxyHandler):
    ROUTE, PATH, CAPABILITY = "embeddings", "embeddings", "embeddings"
