"""The shared base for every route: request id, JSON errors in the spec's shape, rate headers.

Every error flows through ``write_error``: a handler raises ``GatewayError`` (or a Tornado
``HTTPError``) and the client gets ``{"error": {...}}`` with X-Svc-Request-Id (the same id in
x-request-id, which the SDKs read), the X-RateLimit-* values when a key was seen, Retry-After and
``x-should-retry`` as the catalogue says.
"""
from __future__ import annotations

import asyncio
import logging
import os
import time

import orjson
import redis.exceptions
import tornado.web
from tornado.httputil import HTTPHeaders, format_timestamp

from upgate import __version__
from upgate.errors import GatewayError
from upgate.handlers.guard import UNAUTHENTICATED_BODY_MAX, BodyGuard
from upgate.billing import request_record
from upgate.billing.ledger import store_unavailable
from upgate.handlers.requests import BodyShape

log = logging.getLogger("upgate")

# redis-py's errors: a whole cluster unreachable is a RedisClusterException, not a RedisError
_STORE_CLIENT_ERRORS = (redis.exceptions.RedisError, redis.exceptions.RedisClusterException)
_HTTP_CODES = {400: "invalid_request", 404: "not_found", 405: "invalid_request", 413: "request_too_large"}


_SERVER = f"upgate/{__version__}"
_date = (0, "")


def _http_date() -> str:
    global _date
    now = int(time.time())
    if now != _date[0]:
        _date = (now, format_timestamp(now))
    return _date[1]


def set_page_headers(handler, csp: str) -> None:
    """The headers of every HTML page a person reads (console, dashboard): never cached, its own
    Content-Security-Policy, not sniffed, framed or given a full referrer."""
    handler.set_header("Content-Type", "text/html; charset=UTF-8")
    handler.set_header("Cache-Control", "no-store")
    handler.set_header("Content-Security-Policy", csp)
    handler.set_header("X-Content-Type-Options", "nosniff")
    handler.set_header("Referrer-Policy", "same-origin")
    handler.set_header("X-Frame-Options", "DENY")


def new_request_id() -> str:
    return "req_" + os.urandom(12).hex()


def header_block_refusal() -> bytes:
    """The 431 the HTTP layer writes for a header block past its limits (upgate/http/connection.py), before
    any handler exists: the spec's error shape and a request id all the same."""
    err, rid = GatewayError("request_header_too_large"), new_request_id()
    body = orjson.dumps(err.body())
    head = [f"HTTP/1.1 {err.status} Request Header Fields Too Large", f"Server: {_SERVER}",
            "Content-Type: application/json", f"Date: {_http_date()}", f"X-Svc-Request-Id: {rid}",
            f"X-Request-Id: {rid}", *(f"{k}: {v}" for k, v in err.headers().items()),
            "Connection: close", f"Content-Length: {len(body)}"]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin1") + body


class BaseHandler(BodyGuard, tornado.web.RequestHandler):
    """Dependencies arrive through ``initialize(ctx=...)`` from the route table, never globals.

    Every route streams its body in (upgate/handlers/guard.py): its credential is checked
    first, then its limit — 20 MB for a request with a key (or an admin token), 64 KB for one
    without — with the spec's 413, before any of the body is read. Tornado's own limit would
    answer a bare 400 or buffer the body first. Routes that take no body count and drop it; the
    proxy keeps it (``keep_body``).
    """

    NAMES_PARAM = False  # error.param: null on the client API, the field at fault on /admin/v1
    # The route needs a key: it is checked in prepare(), before any of the body is read or
    # `100 Continue` is sent; a refused request is answered and its connection closed.
    needs_key = False
    key = None  # keys.KeyInfo once authenticated
    account = None

    rate = None  # ledger.RateInfo once a key's window was read; headers on every response
    error: GatewayError | None = None  # what the access log reports

    def initialize(self, ctx) -> None:
        self.ctx = ctx
        self.started = time.monotonic()

    async def prepare(self) -> None:
        self._shape = BodyShape() if self.keep_body else None
        await super().prepare()

    async def authenticate(self) -> None:
        if self.needs_key and self._serves(self.request.method):  # (else Tornado's 405 follows)
            self.key, self.account = await self.ctx.auth.authenticate(self.request.headers,
                                                                      self.ctx.client_address(self.request))

    def body_limit(self) -> int:
        return self.ctx.settings.max_body_bytes if self.key is not None else UNAUTHENTICATED_BODY_MAX

    def bad_length(self) -> Exception:
        return GatewayError("invalid_request", "Content-Length is malformed.")

    def too_large(self) -> Exception:
        return GatewayError("request_too_large")

    @classmethod
    def _serves(cls, method: str) -> bool:
        name = method.lower()
        return getattr(cls, name, None) is not getattr(tornado.web.RequestHandler, name, None)

    def take(self, chunk: bytes) -> None:
        try:
            self._shape.feed(chunk)  # depth and value count, before anything is parsed
        except GatewayError as e:
            self.refuse(e)
            return
        self._body.append(chunk)

    def clear(self) -> None:
        # Tornado's clear() formats a Date per request and sets every default header through
        # set_header's checks; these values are known safe, and the Date changes once a second.
        # Runs on construction and again before an error response: the id must survive both.
        # x-request-id carries the same id for the SDKs (openai-python's `_request_id` and
        # `err.request_id`, openai-node's `requestID` read it).
        rid = self.__dict__.get("request_id")
        if rid is None:
            rid = self.request_id = new_request_id()
        self._headers = HTTPHeaders({"Server": _SERVER, "Content-Type": "application/json",
                                     "Date": _http_date(), "X-Svc-Request-Id": rid,
                                     "X-Request-Id": rid})
        self._apply_rate()
        self._write_buffer = []
        self._status_code = 200
        self._reason = "OK"
        self.set_default_headers()  # Tornado's hook, as its own clear() calls it

    def _apply_rate(self) -> None:
        rate = self.rate
        if rate is not None:  # integers: set_header's checks (an ABC isinstance each) are moot
            h = self._headers
            h["X-RateLimit-Limit"] = str(rate.limit)
            h["X-RateLimit-Remaining"] = str(rate.remaining)
            h["X-RateLimit-Reset"] = str(rate.reset_s)

    def set_rate(self, rate) -> None:
        self.rate = rate
        self._apply_rate()

    def write_json(self, obj, status: int = 200) -> None:
        """`obj` as JSON; bytes are taken as JSON already encoded (off the loop, for big bodies)."""
        self.set_status(status)
        self.finish(obj if isinstance(obj, bytes) else orjson.dumps(obj))

    def write_error(self, status_code: int, **kwargs) -> None:
        exc = kwargs.get("exc_info", (None, None, None))[1]
        if isinstance(exc, GatewayError):
            err = exc
        elif isinstance(exc, _STORE_CLIENT_ERRORS) and store_unavailable(exc):
            # never serve a billable request unbilled: the store must answer (and take writes) first
            self.ctx.redis_ok = False
            err = GatewayError("service_unavailable")
        elif isinstance(exc, tornado.web.HTTPError) and exc.status_code in _HTTP_CODES:
            err = GatewayError(_HTTP_CODES[exc.status_code], exc.log_message or None, status=exc.status_code)
        else:
            err = GatewayError("internal_error", status=status_code if status_code >= 500 else 500)
        self.error = err
        self.set_status(err.status)
        self._apply_rate()
        for name, value in err.headers().items():
            self.set_header(name, value)
        self.finish(self.error_bytes(err))

    def error_bytes(self, err: GatewayError) -> bytes:
        """The error's body: the spec's shape (handlers/messages.py: the Messages API's)."""
        return orjson.dumps(err.body(self.NAMES_PARAM))

    def log_exception(self, typ, value, tb) -> None:
        # Expected errors are one warning line at most; only the unexpected get a traceback.
        if isinstance(value, GatewayError):
            return
        if isinstance(value, tornado.web.HTTPError):
            return
        if isinstance(value, _STORE_CLIENT_ERRORS):
            log.warning("store error in %s (request %s): %s", self.request.path, self.request_id,
                        type(value).__name__)
            return
        log.error("unexpected error in %s %s (request %s)", self.request.method,
                  self.request.path, self.request_id, exc_info=(typ, value, tb))

    def on_finish(self) -> None:
        if self._status_code >= 400 and self.key is not None and getattr(self, "record", None) is None:
            self._keep_refused()  # (a served request pays one comparison here, nothing more)
        hook = getattr(self.ctx, "on_request_finished", None)
        if hook is not None:
            hook(self)

    def _keep_refused(self) -> None:
        """A refusal after the key was known, that no hold's settle or release recorded: keep its
        small record (billing/request_record.py) so the customer's and the operator's lookups
        find its X-Svc-Request-Id. One write, sent after the answer went out."""
        key = self.key
        rec = request_record.refused(
            request_id=self.request_id, account_id=key.account_id, key_id=key.key_id,
            key_prefix=key.prefix, route=self.request.path[:80], model=getattr(self, "model_id", None),
            status=self._status_code, code=self.error.code if self.error else None,
            stream=bool(getattr(self, "stream", False)),
            duration_ms=round((time.monotonic() - self.started) * 1000))
        task = asyncio.ensure_future(request_record.keep_refused(
            self.ctx.redis, rec, sharded=self.ctx.ledger.sharded, keep_days=self.ctx.settings.request_log_days))
        _WRITING.add(task)
        task.add_done_callback(_WRITING.discard)


_WRITING: set = set()  # refused records being written (a task needs a reference until it ends)


class NotFoundHandler(BaseHandler):
    """Every route the spec does not define, under any method: 404 not_found.

    Answered from the verb method, after the body (at most 64 KB: no key was checked) was read:
    answering from prepare() would make Tornado close the kept-alive connection rather than
    read the body, and a client that reuses it (every SDK's pool) would see a reset on its
    next request. A longer body gets the same 404 at once, and its connection is closed.
    """

    SUPPORTED_METHODS = ("GET", "HEAD", "POST", "DELETE", "PATCH", "PUT", "OPTIONS")

    def message(self) -> str:
        return f"Unknown route: {self.request.method} {self.request.path}"

    def too_large(self) -> Exception:
        return GatewayError("not_found", self.message())

    def _not_found(self, *_args) -> None:
        raise GatewayError("not_found", self.message())

    get = head = post = delete = patch = put = options = _not_found


class ResponsesHandler(NotFoundHandler):
    def message(self) -> str:
        return "POST /v1/responses is not enabled yet. Use POST /v1/chat/completions instead."
