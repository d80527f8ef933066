"""The console's base handler: session, XSRF, HTML errors, security headers, the executor.

XSRF is checked here, in `prepare`, for every console POST, rather than by Tornado's
application-wide ``xsrf_cookies`` setting: that setting would also demand the cookie on the
client API (/v1) and the management API (/admin/v1), which authenticate with Bearer tokens
and are not reachable by a browser's ambient cookies. A POST without a matching ``_xsrf``
field is refused with 403 before anything else runs.

Every cookie the console sets (session, XSRF, flash) is HttpOnly, SameSite=Strict, scoped to
/admin, and Secure when the request came over https (directly, or per the PaaS router's
``X-Forwarded-Proto``).
"""
from __future__ import annotations

import logging
import time
import urllib.parse
from pathlib import Path

import orjson
import tornado.web

from upgate.console import fmt, session
from upgate.handlers.base import new_request_id

log = logging.getLogger("upgate.console")

HERE = Path(__file__).parent
TEMPLATES = str(HERE / "templates")
STATIC = str(HERE / "static")
PREFIX = "/admin"
FLASH = "upgate_flash"
_STATIC_SETTINGS = {"static_path": STATIC, "static_url_prefix": PREFIX + "/static/"}
CSP = ("default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; "
       "frame-ancestors 'none'; base-uri 'none'")


class ConsoleHandler(tornado.web.RequestHandler):
    public = False  # True: reachable without a session (the sign-in page)
    writes = False  # True: a POST that changes something (refused to read-only tokens)

    def initialize(self, ctx) -> None:
        self.ctx = ctx
        self.pepper = ctx.settings.key_pepper
        self.started = time.monotonic()
        self.request_id = new_request_id()
        self.who = None  # the signed-in AdminToken

    @property
    def route_label(self) -> str:
        """The metrics' and access log's route for a page: its handler, never its path (which
        carries account and key ids)."""
        return "console:" + type(self).__name__

    def on_finish(self) -> None:
        hook = getattr(self.ctx, "on_request_finished", None)  # the access log line and metrics
        if hook is not None:
            hook(self)

    async def call(self, fn, *args, **kwargs):
        """A sync service function on the node's admin pool (the management API's): never on
        the event loop."""
        return await self.ctx.admin.call(fn, *args, **kwargs)

    # ---- rendering ---------------------------------------------------------------------------
    def get_template_path(self) -> str:
        return TEMPLATES

    def static_url(self, path: str, include_host=None, **kwargs) -> str:
        return tornado.web.StaticFileHandler.make_static_url(_STATIC_SETTINGS, path)

    def get_template_namespace(self) -> dict:
        ns = super().get_template_namespace()
        ns.update(fmt=fmt, who=self.who, flash=self.pop_flash(), message=None, nav=None)
        return ns

    def set_default_headers(self) -> None:
        self.set_header("Content-Type", "text/html; charset=UTF-8")
        self.set_header("Cache-Control", "no-store")
        self.set_header("Content-Security-Policy", CSP)
        self.set_header("X-Content-Type-Options", "nosniff")
        self.set_header("Referrer-Policy", "same-origin")
        self.set_header("X-Frame-Options", "DENY")

    def write_error(self, status_code: int, **kwargs) -> None:
        if status_code == 405:
            own = [m for m in self.SUPPORTED_METHODS  # the verbs this handler answers
                   if getattr(type(self), m.lower()) is not getattr(tornado.web.RequestHandler, m.lower())]
            self.set_header("Allow", ", ".join(own))
        exc = kwargs.get("exc_info", (None, None, None))[1]
        reason = exc.log_message if isinstance(exc, tornado.web.HTTPError) and exc.log_message else self._reason
        self.render("error.html", status=status_code, reason=reason)

    # ---- cookies -----------------------------------------------------------------------------
    # Signed with the console's own secret (session.cookie_secret, from the pepper) rather than
    # an application-wide cookie_secret: nothing outside the console signs cookies.
    def create_signed_value(self, name: str, value, version=None) -> bytes:
        return tornado.web.create_signed_value(session.cookie_secret(self.pepper), name, value, version=version)

    def get_signed_cookie(self, name: str, value=None, max_age_days: float = 31, min_version=None):
        if value is None:
            value = self.get_cookie(name)
        return tornado.web.decode_signed_value(session.cookie_secret(self.pepper), name, value,
                                               max_age_days=max_age_days, min_version=min_version)

    def is_https(self) -> bool:
        forwarded = self.request.headers.get("X-Forwarded-Proto", "").split(",")[0].strip().lower()
        return self.request.protocol == "https" or forwarded == "https"

    def set_cookie(self, name, value, domain=None, expires=None, path=PREFIX, expires_days=None, **kwargs):
        kwargs.setdefault("httponly", True)
        kwargs.setdefault("samesite", "Strict")
        kwargs.setdefault("secure", self.is_https())
        super().set_cookie(name, value, domain, expires, path, expires_days, **kwargs)

    def flash(self, text: str, kind: str = "ok", form: str | None = None) -> None:
        """A one-line message shown on the next page (after a redirect): at the top, or at the
        `form` it is about."""
        self.set_signed_cookie(FLASH, orjson.dumps({"text": text, "kind": kind, "form": form}), expires_days=None)

    def pop_flash(self) -> dict | None:
        raw = self.get_signed_cookie(FLASH, max_age_days=1 / 24)
        if FLASH in self.request.cookies:
            self.clear_cookie(FLASH, path=PREFIX)
        try:
            return orjson.loads(raw) if raw else None
        except orjson.JSONDecodeError:
            return None

    # ---- the session -------------------------------------------------------------------------
    def session_id(self) -> str | None:
        raw = self.get_signed_cookie(session.COOKIE, max_age_days=session.LIFETIME_S / 86400)
        return raw.decode() if raw else None

    async def prepare(self) -> None:
        if self.request.method not in ("GET", "HEAD"):
            self.check_xsrf_cookie()  # 403 for a forged or stale form
        if self.public:
            return
        self.who = await self.call(session.current, self.pepper, self.session_id())
        if self.who is None:
            self.clear_cookie(session.COOKIE, path=PREFIX)
            target = self.request.uri if self.request.method == "GET" else PREFIX + "/"
            self.redirect(PREFIX + "/login?" + urllib.parse.urlencode({"next": target}), status=303)
            return
        if self.writes and self.who.read_only:
            raise tornado.web.HTTPError(403, "This admin token is read-only: it can look, not change.")
