"""The base of every /admin/v1 route: admin-token auth, the read-only rule, service errors
mapped to the one error catalogue, JSON bodies, and the admin log of every write.

A handler subclass declares ``PATH`` and ``OPS`` (see spec.py) and writes its verbs as
parse → ``await self.call(service_fn, ...)`` → ``self.write_json(...)``. The token is checked
in prepare(), before any of the body is read (upgate/handlers/guard.py): a request without a
valid one may send 64 KB, one with it the body limit (20 MB, a catalog). Every verb in OPS is
wrapped (``__init_subclass__``) so that, after it runs, a write is recorded; a service refusal
(a ValueError) becomes 400/404/409 here and only here.
"""
from __future__ import annotations

import functools
import logging
from contextlib import contextmanager

import orjson

from upgate.services import accounts, admin_log, refusals
from upgate.errors import GatewayError
from upgate.handlers.admin.spec import READ_VERBS, Op
from upgate.handlers.base import BaseHandler, NotFoundHandler
from upgate.handlers.guard import UNAUTHENTICATED_BODY_MAX

log = logging.getLogger("upgate")


def service_error(e: ValueError, param: str | None = None, force: bool = False) -> GatewayError:
    """The one place a service refusal becomes an API error, through the vocabulary every face
    shares (upgate/services/refusals.py): its code and message, and the field the service (or
    the handler's `field` context) blamed."""
    r = refusals.refusal(e)
    if r.code == "not_found":
        return GatewayError(r.code, r.message or None)
    blamed = param if force else r.field or param
    return GatewayError(r.code, r.message or None, param=blamed)


@contextmanager
def field(name: str, *, parsing: bool = False):
    """Blame `name` for a ValueError raised inside that names no field itself — or, when
    `parsing` one body field, whatever field the shared rule's error names (a rule such as
    `parse_amount` serves balance_toman and low_balance_toman alike)."""
    try:
        yield
    except GatewayError:
        raise
    except ValueError as e:
        if parsing or getattr(e, "field", None) is None:
            raise service_error(e, name, force=parsing) from None
        raise


def _authorized(verb: str, fn):
    @functools.wraps(fn)
    async def run(self, *args):
        op: Op = self.OPS[verb]
        try:
            await fn(self, *args)
        except GatewayError:
            raise
        except ValueError as e:
            raise service_error(e) from None
        if op.auth and verb not in READ_VERBS and self.get_status() < 300 and not self.unlogged:
            await self.log_write(args)
    run.admin_wrapped = True
    return run


class NoStore:
    """Every /admin/v1 answer, errors included (BaseHandler.clear runs this hook again before
    an error): no cache, proxy or browser keeps balances, keys or statements."""

    def set_default_headers(self) -> None:
        self.set_header("Cache-Control", "no-store")


class AdminNotFoundHandler(NoStore, NotFoundHandler):
    """An unknown route under /admin/v1: 404 in this API's shape."""

    NAMES_PARAM = True


class AdminHandler(NoStore, BaseHandler):
    keep_body = True
    NAMES_PARAM = True
    PATH = ""
    OPS: dict[str, Op] = {}
    token = None  # the AdminToken once authorized
    log_detail: dict | None = None  # what the admin log keeps of this write (set by the verb)
    log_target: str | None = None  # the id acted on, when the path does not carry it (a new account)
    unlogged = False  # set by a verb that turned out to write nothing (a dry run)

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        for verb in cls.OPS:  # the verb may be inherited (top-ups and adjustments share one)
            fn = getattr(cls, verb, None)
            if fn is not None and not getattr(fn, "admin_wrapped", False):
                setattr(cls, verb, _authorized(verb, fn))

    @property
    def route_label(self) -> str:  # the metrics' and access log's route: the template, not the ids
        return self.PATH

    async def authenticate(self) -> None:
        verb = self.request.method.lower()
        op = self.OPS.get(verb)
        if op is not None and op.auth:  # (a verb the route lacks: Tornado's 405 follows)
            await self.authorize(verb)

    def body_limit(self) -> int:
        return self.ctx.settings.max_body_bytes if self.token is not None else UNAUTHENTICATED_BODY_MAX

    async def authorize(self, verb: str) -> None:
        node = self.ctx.admin
        address = node.address(self.request)
        scheme, _, token = (self.request.headers.get("Authorization") or "").strip().partition(" ")
        token = token.strip() if scheme.lower() == "bearer" else ""
        wait = await node.wait_before(address, token)
        if wait:
            raise GatewayError("admin_auth_throttled", retry_after=wait)
        found = await node.verify(token) if token else None
        if found is None:
            node.failed(address)
            raise GatewayError("invalid_admin_token")
        self.token = found
        if found.read_only and verb not in READ_VERBS:
            raise GatewayError("read_only_token")

    async def call(self, fn, *args, **kwargs):
        """A sync service function on the admin pools (never on the event loop): a read verb's
        on the read pool, anything else on the write pool, so reads never hold up writes."""
        node = self.ctx.admin
        run = node.read if self.request.method in ("GET", "HEAD") else node.call
        return await run(fn, *args, **kwargs)

    @property
    def actor(self) -> str:
        return self.token.name

    def json_body(self, allowed: tuple[str, ...], required: tuple[str, ...] = ()) -> dict:
        raw = self.body_bytes() or b""
        try:
            body = orjson.loads(raw) if raw.strip() else {}
        except orjson.JSONDecodeError:
            raise GatewayError("invalid_request", "The body is not valid JSON.") from None
        if not isinstance(body, dict):
            raise GatewayError("invalid_request", "The body must be a JSON object.")
        for name in body:
            if name not in allowed:
                raise GatewayError("invalid_request", f"Unknown field {name!r}; allowed: {', '.join(allowed)}.",
                                   param=str(name)[:100])
        for name in required:
            if body.get(name) is None:
                raise GatewayError("invalid_request", f"{name} is required.", param=name)
        self.log_detail = {k: v for k, v in body.items() if not isinstance(v, dict)}
        return body

    def text(self, body: dict, name: str, limit: int = 1000) -> str | None:
        value = body.get(name)
        if value is not None and (not isinstance(value, str) or len(value) > limit):
            raise GatewayError("invalid_request", f"{name} must be text of at most {limit} characters.",
                               param=name)
        return value

    def amount(self, body: dict, name: str, *, allow_negative: bool = False) -> int | None:
        """A toman amount → micro-toman. JSON numbers are refused: amounts are decimal strings."""
        value = body.get(name)
        if value is None:
            return None
        if not isinstance(value, str):
            raise GatewayError("invalid_request", f"{name} must be a decimal string like \"1500.00\", "
                               "never a JSON number.", param=name)
        with field(name, parsing=True):
            return accounts.parse_amount(value, allow_negative=allow_negative, what=name)

    def int_query(self, name: str, default: int, low: int, high: int) -> int:
        raw = self.get_query_argument(name, None)
        if raw is None:
            return default
        if not (raw.isascii() and raw.isdigit() and low <= int(raw) <= high):
            raise GatewayError("invalid_request", f"{name} must be a whole number from {low} to {high}.",
                               param=name)
        return int(raw)

    async def log_write(self, args) -> None:
        """After the answer went out: a failure here is logged, the write itself stands."""
        action = f"{self.request.method} {self.PATH}"
        target = self.log_target or (args[0] if args else None)
        try:
            await self.call(admin_log.face_record, self.actor, action, target, self.log_detail)
        except Exception as e:  # the store went away between the write and its log entry
            log.warning("admin write by %s not recorded in the admin log: %s %s (%s)", self.actor,
                        action, args[0] if args else "", type(e).__name__)
