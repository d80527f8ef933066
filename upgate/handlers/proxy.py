"""POST /v1/chat/completions, /v1/completions, /v1/embeddings: validate, admit, forward, settle.

No response means no charge: errors before admit place no hold; a provider error releases the
hold; a cut stream settles only what was relayed. Billing happens before the response's last
byte, so a client that reads /v1/svc/me right after sees the charge.
"""
from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import deque

import orjson
import redis.exceptions
import tornado.iostream
import tornado.web

from upgate import money, sizing
from upgate.catalog import check_allowed
from upgate.errors import GatewayError
from upgate.handlers.base import BaseHandler
from upgate.http1 import header
from upgate.ledger import Rejected, SettlementNotRecorded
from upgate.refusals import LARGE_BODY
from upgate.requests import parse_json, validate, wants_web_search
from upgate.upstream import sse
from upgate.upstream.client import UpstreamCut, UpstreamTimeout, UpstreamUnreachable
from upgate.upstream.dialects import prepare_body
from upgate.upstream.errors import body_error_message, map_error

log = logging.getLogger("upgate")

_BATCH = 64 * 1024  # bytes of a stream's backlog written before waiting for the client
_NO_FALLBACK = {"invalid_request"}  # the next model would refuse the same body
_RATE_CODES = {"upstream_rate_limited", "free_capacity_exhausted"}
# A client that leaves once the provider has finished generating: how long the provider's usage
# event (what it bills us by) is waited for, rather than billing an estimate of what was relayed.
USAGE_GRACE_S = 10.0
_MAX_TOKENS = 100_000_000  # per request and kind: more than any context window holds
_CLIENT_CLOSED = (499, "client_closed")  # a request record's outcome when the client left first
# How most providers write a chunk that finishes nothing: a byte search skips _finishes for it.
_NOT_DONE = b'"finish_reason":null'


class _Failed(Exception):
    """This candidate failed before anything reached the client: try the next one."""

    def __init__(self, err: GatewayError, strike: bool = False):
        self.err, self.strike = err, strike


class ProxyHandler(BaseHandler):
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
    ttfb_ms = None  # request arrival → the answering provider's response headers
    record = None  # the request record (upgate/records.py) settle/release kept; the access log too

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
        try:
            req = validate(parse_json(raw, shape_checked=True), self.ROUTE)
            self._body = []
            models = [ctx.catalog.resolve(m) for m in req.model_ids]
            for m in models:
                if self.CAPABILITY not in m.capabilities:
                    raise GatewayError("invalid_request", f"Model {m.id} does not support {self.PATH}.")
            check_allowed(key.allowed_models, req.model_ids)
            self._check_cold(models)
        except GatewayError:
            await self._peek_rate(key)
            raise
        self.stream, self.model_id = req.stream, models[0].id
        free = all(m.free for m in models)
        hold_micro = 0 if free else sizing.hold_micro(req.body, models)
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

    async def _peek_rate(self, key) -> None:
        """The X-RateLimit-* values for an error before admit. Best effort: a store that does not
        answer must not turn the spec's 4xx into a 503; the headers are then left out."""
        try:
            self.set_rate(await self.ctx.ledger.rate_peek(key.account_id, key.key_id))
        except (redis.exceptions.RedisError, OSError) as e:
            log.warning("rate headers left out of request %s: store error (%s)", self.request_id,
                        type(e).__name__)

    def _check_cold(self, models) -> None:
        waits = [self.ctx.ledger.cold_until(m.id) for m in models]
        if all(w for w in waits):
            raise GatewayError("upstream_rate_limited", "This model is cooling down after repeated "
                               "provider rate limits.", retry_after=max(1, math.ceil(min(waits))))

    async def _forward(self, req, models) -> None:
        ctx = self.ctx
        last = None  # the last candidate's failure (none tried: upstream_unavailable)
        strikes: list[str] = []  # models the provider rate-limited: one cool-down strike each
        for model in models:
            if self._aborted or self._gone:  # shutdown or the client left: no next candidate
                break
            if ctx.ledger.cold_until(model.id):
                continue
            try:
                await self._try(req, model)
                break
            except _Failed as f:
                last = f.err
                if self._aborted or self._gone:  # we cancelled it: not the provider's failure
                    break
                self.failures.append((model.provider, f.err.code))
                if f.strike:
                    strikes.append(model.id)
                if f.err.code in _NO_FALLBACK:
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
        outcome = _CLIENT_CLOSED if self._gone else (502, "upstream_error") if self._aborted else \
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

    async def _strike(self, model_id: str) -> None:
        if await self.ctx.ledger.cooldown_strike(model_id) is not None:
            self._count_cooldown(model_id)

    def _count_cooldown(self, model_id: str) -> None:
        if self.ctx.metrics is not None:
            self.ctx.metrics.cooldowns.labels(model_id).inc()

    async def _try(self, req, model) -> None:
        ctx = self.ctx
        provider = ctx.providers.get(model.provider)
        if provider is None or not provider.available:
            raise _Failed(GatewayError("upstream_unavailable"))
        payload = prepare_body(req.body, provider.dialect, model.upstream_model, req.stream,
                               path=self.PATH)
        call = self._call = ctx.upstream.open(provider.url(self.PATH), payload, provider.headers())
        self._attempt = (model.provider, time.monotonic())
        try:
            try:
                await call.start()
            except UpstreamUnreachable:
                raise _Failed(GatewayError("upstream_unavailable")) from None
            except UpstreamTimeout:
                raise _Failed(GatewayError("upstream_timeout")) from None
            except UpstreamCut:
                raise _Failed(GatewayError("upstream_error")) from None
            if call.status != 200:
                try:
                    raw = await call.body()
                except (UpstreamCut, UpstreamTimeout):
                    raw = b""
                self._attempt_over()
                status, code, message = map_error(call.status, raw, provider, model.free, model)
                raise _Failed(GatewayError(code, message, status=status), strike=code in _RATE_CODES)
            self.answered = model
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
            obj = orjson.loads(raw)
            if not isinstance(obj, dict):
                raise ValueError("not an object")
        except UpstreamTimeout:  # headers, then not one body byte within the silence limit
            raise _Failed(GatewayError("upstream_timeout")) from None
        except UpstreamCut:
            raise _Failed(GatewayError("upstream_error", "The provider's response was cut off.")) from None
        except ValueError:  # orjson.JSONDecodeError included
            raise _Failed(GatewayError("upstream_error", "The provider returned a malformed response.")) from None
        if isinstance(obj.get("error"), dict):  # some providers answer 200 with an error body
            raise _Failed(GatewayError("upstream_error", body_error_message(
                obj["error"], self.ctx.providers.get(model.provider), model)))
        usage = obj.get("usage") if isinstance(obj.get("usage"), dict) else {}
        prompt = _int(usage.get("prompt_tokens"), sizing.prompt_tokens(body))
        completion = _int(usage.get("completion_tokens"), _tokens(_chars_json(obj)))
        await self._settle(model, body, prompt, completion, usage)
        _as_ours(obj, model)
        self._add_meta(obj, model)
        self.finish(orjson.dumps(obj))

    # ---- streaming: relay each event as it arrives
    def _open_sse(self) -> None:
        if self._sse_open:
            return
        self._sse_open = True
        self.set_header("Content-Type", "text/event-stream")
        self.set_header("Cache-Control", "no-cache")
        self.set_header("X-Accel-Buffering", "no")
        self.last_write = time.monotonic()

    def ping(self) -> None:
        """Keep a buffering proxy from closing a quiet stream (called by the node's sweeper)."""
        if self._finished or self._gone or not self.stream:
            return
        self._open_sse()
        self.write(sse.KEEPALIVE)
        self.flush()
        self.last_write = time.monotonic()

    async def _relay_stream(self, call, model, body) -> None:
        """Events are parsed in libcurl's write callback (relay_now). While this task waits,
        content events go straight to the client from there: no task wake per event, which
        was a fifth of a stream's cost. Everything else (a usage event; an error; [DONE]; a
        malformed event), everything after it, and everything that comes while this task is
        busy or the client is not reading, goes to the backlog, which this task relays in
        order. The stream is settled at its end, by the last usage the provider reported: some
        report it on every chunk, and the first is not the bill. The client's headers go out
        with the first event (or the first keep-alive): a provider that answers 200 and then
        fails before any event is a failed candidate, and the next `models` entry is tried."""
        parser = sse.SSEParser()
        # The gateway asked upstream for usage on the client's behalf; a client that did not ask
        # must not get a chunk with empty `choices` (common code indexes choices[0]).
        meta = self._meta
        relay_usage = _client_wants_usage(body) or meta
        out = self.request.connection
        backlog: deque[bytes] = deque()  # events for this task, in arrival order
        parked = False  # this task waits in call.wait(): relay_now may write itself
        ended = False  # the relay is over: whatever else the provider sends is dropped
        chars = 0  # of content the client was sent: what a cut stream is billed for
        last: dict = {}  # the last chunk relayed: a usage chunk of our own copies its id

        def relay_now(data: bytes) -> bool:
            nonlocal chars, last
            if ended:
                return False
            events = parser.feed(data)
            if not events:
                return False
            # (after a held usage chunk, everything keeps its order through the backlog)
            if not parked or backlog or held is not None or not self._sse_open or not out.writable():
                backlog.extend(events)
                return True
            sent, n_chars = [], 0
            for n, payload in enumerate(events):
                obj = _content_event(payload)
                if obj is None:
                    backlog.extend(events[n:])
                    break
                n_chars += _chars_chunk(obj)
                if not self._generated and _finishes(payload, obj):
                    self._generated = True
                _as_ours(obj, model)
                sent.append(sse.event(orjson.dumps(obj)))
                last = obj
            if sent:
                out.write(b"".join(sent))
                chars += n_chars
                self.last_write = time.monotonic()
            return bool(backlog)

        usage = None  # the last usage the provider reported
        # Its usage chunk, relayed once the stream is settled: one with no choices, or (with
        # X-Svc-Include-Meta) any, since the svc block goes on the chunk with the final usage,
        # whatever else it carries (LiteLLM's has `choices: [{"index": 0, "delta": {}}]`).
        held = None
        done = False

        def send(obj: dict) -> int:
            nonlocal last
            _as_ours(obj, model)
            event = sse.event(orjson.dumps(obj))
            if not self._sse_open:
                self._open_sse()  # the headers leave with the first event
            self.write(event)
            last = obj
            return len(event)

        call.relay_to(relay_now)
        try:
            while True:
                wrote = 0
                # in batches: a client that reads slowly then waits for one batch at a time
                # (the whole backlog in one write would keep it "not reading" for as long as it
                # takes to read it all, and the sweep would cut it), and other connections get
                # the loop between batches
                while backlog and not done and not self._gone and wrote < _BATCH:
                    payload = backlog.popleft()
                    if payload == b"[DONE]":
                        done = True
                        break
                    try:
                        obj = orjson.loads(payload)
                    except orjson.JSONDecodeError:
                        raise UpstreamCut("malformed event") from None
                    if not isinstance(obj, dict):
                        continue
                    if isinstance(obj.get("error"), dict):
                        raise UpstreamCut(body_error_message(
                            obj["error"], self.ctx.providers.get(model.provider), model))
                    chars += _chars_chunk(obj)
                    if not self._generated and _finishes(payload, obj):
                        self._generated = True
                    if held is not None and held.get("choices"):
                        # a held chunk with choices is not the last event after all: it goes
                        # out now, in order (the svc block then rides on a usage chunk of ours)
                        wrote += send(held)
                        held = None
                    if isinstance(obj.get("usage"), dict):
                        usage = obj["usage"]
                        if meta or not obj.get("choices"):
                            held = obj  # (a held one without choices carried nothing else)
                            continue
                        if not relay_usage:
                            del obj["usage"]
                    wrote += send(obj)
                if wrote and not self._gone:
                    self.last_write = time.monotonic()
                    try:
                        await self.flush()
                    except tornado.iostream.StreamClosedError:
                        self._gone = True
                        break
                    if backlog:
                        await asyncio.sleep(0)
                    continue  # more may have come meanwhile
                if done or self._gone:
                    break
                if call.over:
                    if call.error is not None:
                        raise call.error
                    break
                parked = True
                try:
                    await call.wait()
                finally:
                    parked = False
            if self._gone and usage is None and self._generated:
                usage = await _usage_after_leave(call, backlog)
        except (UpstreamCut, UpstreamTimeout) as e:
            if not self._sse_open and not self._gone and usage is None:
                raise _Failed(GatewayError("upstream_timeout" if isinstance(e, UpstreamTimeout)
                                           else "upstream_error")) from None  # nothing sent yet
            self._attempt_over()
            if held is not None and held.get("choices") and not self._gone:
                send(held)  # its content was counted as relayed
            await self._cut(model, body, chars, e, usage)
            return
        except tornado.iostream.StreamClosedError:
            self._gone = True
        finally:
            ended = True
            backlog.clear()
        if not self._sse_open and not self._gone and not done and usage is None:
            raise _Failed(GatewayError("upstream_error", "The provider's stream ended before any event."))
        self._attempt_over()
        self._open_sse()  # (an answer of no content events: the headers go with what follows)
        if self._gone or not done and usage is None:
            # the client left, or the provider ended without [DONE] or usage: bill its usage if
            # it came, else what was relayed
            await self._cut(model, body, chars, None, usage)
            return
        if usage is not None:
            await self._settle(model, body, *_usage_tokens(usage, body, chars), usage)
            if held is None and meta:  # its usage chunk went out before content that followed
                held = self._usage_chunk(model, last, usage)
            if held is not None and relay_usage:
                self._add_meta(held, model)
                send(held)
        elif not self._billed:  # the provider sent no usage: estimate from what was relayed
            prompt, completion = sizing.prompt_tokens(body), _tokens(chars)
            await self._settle(model, body, prompt, completion)
            if relay_usage:  # the client asked for usage (or meta): it gets the estimate, marked so
                chunk = self._usage_chunk(model, last, {
                    "prompt_tokens": prompt, "completion_tokens": completion,
                    "total_tokens": prompt + completion, "estimated": True})
                self._add_meta(chunk, model)
                send(chunk)
        self.finish(sse.DONE)

    def _usage_chunk(self, model, last: dict, usage: dict) -> dict:
        """A usage chunk of our own, shaped like the stream's last chunk."""
        return {"id": last.get("id") or "gen-" + self.request_id,
                "object": last.get("object") or "chat.completion.chunk",
                "created": last.get("created") or int(time.time()), "model": model.id,
                "provider": model.provider, "choices": [], "usage": usage}

    async def _cut(self, model, body, chars: int, error: Exception | None, usage: dict | None) -> None:
        """Mid-stream failure, client disconnect or shutdown: settle what was consumed, by the
        provider's last usage if it reported one, else by what the client was sent."""
        if not self._billed:
            code = _CLIENT_CLOSED[1] if self._gone else "upstream_timeout" \
                if isinstance(error, UpstreamTimeout) else "upstream_error"
            if usage is not None:
                await self._settle(model, body, *_usage_tokens(usage, body, chars), usage, code=code)
            elif chars:
                await self._settle(model, body, sizing.prompt_tokens(body), _tokens(chars), code=code)
            else:
                await self._release(credit_free=True, outcome=(_CLIENT_CLOSED[0] if self._gone else 200, code))
        if self._gone or self._finished:
            return
        if self._aborted:
            err = GatewayError("upstream_error", "The stream was cut by the gateway's shutdown.")
        elif isinstance(error, UpstreamTimeout):  # headers, then not one byte of the body
            err = GatewayError("upstream_timeout")
            self.failures.append((model.provider, "upstream_timeout"))
        else:
            err = GatewayError("upstream_error", "The provider's stream failed part-way.")
            self.failures.append((model.provider, "upstream_error"))
        self._finish_sse_error(err, model.id)

    def _finish_sse_error(self, err: GatewayError, model_id: str) -> None:
        """One last chunk-shaped event with an `error` object: the openai client raises on it."""
        chunk = {
            "id": "gen-" + self.request_id, "object": "chat.completion.chunk",
            "created": int(time.time()), "model": model_id,
            "choices": [{"index": 0, "delta": {}, "finish_reason": "error"}],
            "error": err.body()["error"],
        }
        self.error = err
        self._open_sse()
        try:
            self.finish(sse.event(orjson.dumps(chunk)))
        except tornado.iostream.StreamClosedError:
            self._gone = True

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
        self.cost_micro = sizing.cost_micro(model, prompt, completion, wants_web_search(body, model.id),
                                            cached, write)
        provider = self.ctx.providers.get(model.provider)
        if provider is not None and provider.bill_by == "provider_cost":
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
        """The request's record (upgate/records.py): no content, only what it cost and how it went."""
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


# ---- small pure helpers
def _client_wants_usage(body: dict) -> bool:
    opts, usage = body.get("stream_options"), body.get("usage")
    return (isinstance(opts, dict) and opts.get("include_usage") is True) or \
        (isinstance(usage, dict) and usage.get("include") is True)


def _int(value, default: int) -> int:
    """A provider's token count, or `default` (our estimate) when it is not a plausible one:
    not an integer, negative, or beyond any model's reach (a cost past the money range would
    make the settlement fail and leave the answer uncharged)."""
    return value if type(value) is int and 0 <= value <= _MAX_TOKENS else default


def _tokens(chars: int) -> int:
    """Estimate tokens from relayed characters (about four characters a token)."""
    return (chars + 3) // 4


def _as_ours(obj: dict, model) -> None:
    """A provider's answer or chunk as the client sees it: our model id, the provider named
    (both stream paths and the JSON answer must agree)."""
    obj["model"] = model.id
    obj.setdefault("provider", model.provider)


def _usage_tokens(usage: dict, body: dict, chars: int) -> tuple[int, int]:
    """(prompt, completion) tokens of a provider's usage object; what it leaves out, estimated."""
    return (_int(usage.get("prompt_tokens"), sizing.prompt_tokens(body)),
            _int(usage.get("completion_tokens"), _tokens(chars)))


def _finishes(payload: bytes, obj: dict) -> bool:
    """The chunk ends a choice: the provider is done generating (its usage event follows)."""
    if _NOT_DONE in payload:
        return False
    for choice in _list(obj.get("choices")):
        if isinstance(choice, dict) and choice.get("finish_reason"):
            return True
    return False


async def _usage_after_leave(call, backlog: deque) -> dict | None:
    """The client left after the provider finished generating: wait a moment for the usage
    event the provider bills by, rather than bill an estimate that cannot see reasoning
    tokens and undercounts non-Latin text. Then the call is over either way."""
    deadline = time.monotonic() + USAGE_GRACE_S
    try:
        while True:
            while backlog:
                obj = _event_obj(backlog.popleft())
                if obj is None:  # [DONE], or something no usage will follow
                    return None
                if isinstance(obj.get("usage"), dict):
                    return obj["usage"]
            left = deadline - time.monotonic()
            if call.over or left <= 0:
                return None
            try:
                await asyncio.wait_for(call.wait(), left)
            except asyncio.TimeoutError:
                return None
    finally:
        call.cancel()


def _event_obj(payload: bytes) -> dict | None:
    """An event's JSON object; None for [DONE], malformed JSON or anything but an object."""
    if payload == b"[DONE]":
        return None
    try:
        obj = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return None
    return obj if isinstance(obj, dict) else None


def _content_event(payload: bytes) -> dict | None:
    """The event as a dict when it is plain content (no usage, no error): what libcurl's
    callback may relay by itself. None for anything the relay's task must see."""
    obj = _event_obj(payload)
    if obj is None or isinstance(obj.get("usage"), dict) or isinstance(obj.get("error"), dict):
        return None
    return obj


def _list(value) -> list:
    """A field that should hold a list: anything else counts as empty (a provider's odd shape
    must not crash the count a cut stream is billed by)."""
    return value if isinstance(value, list) else []


def _chars_message(m: dict) -> int:
    """Characters of output in a message or a stream delta: text, reasoning, a refusal and
    tool-call arguments (a JSON answer without usage is billed by the same count as a stream)."""
    n = 0
    for field in ("content", "reasoning", "refusal"):
        v = m.get(field)
        if isinstance(v, str):
            n += len(v)
    for call in _list(m.get("tool_calls")):
        fn = call.get("function") if isinstance(call, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("arguments"), str):
            n += len(fn["arguments"])
    return n


def _chars_chunk(obj: dict) -> int:
    n = 0
    for choice in _list(obj.get("choices")):
        if not isinstance(choice, dict):
            continue
        delta = choice.get("delta")
        if isinstance(delta, dict):
            n += _chars_message(delta)
        text = choice.get("text")
        if isinstance(text, str):
            n += len(text)
    return n


def _chars_json(obj: dict) -> int:
    n = 0
    for choice in _list(obj.get("choices")):
        if not isinstance(choice, dict):
            continue
        msg = choice.get("message")
        if isinstance(msg, dict):
            n += _chars_message(msg)
        if isinstance(choice.get("text"), str):
            n += len(choice["text"])
    return n
