"""The console's base handler: session, XSRF, HTML errors, security headers, the executor.

The session is checked first, from the cookie alone, before any of a request's body is read
(upgate/handlers/guard.py): a page asked for without one is redirected to the sign-in page
without reading its body, and no console body may pass 64 KB (a form is a few hundred bytes).

XSRF is checked here, for every console POST, once its form is in (`read_form`, before the
verb runs), rather than by Tornado's application-wide ``xsrf_cookies`` setting: that setting
would also demand the cookie on the client API (/v1) and the management API (/admin/v1), which
authenticate with Bearer tokens and are not reachable by a browser's ambient cookies. A POST
without a matching ``_xsrf`` field is refused with 403 before its handler does anything.

Every cookie the console sets (session, XSRF, flash) is HttpOnly, SameSite=Strict, scoped to
/admin, and Secure when the request came over https (directly, or per the PaaS router's
``X-Forwarded-Proto``).
"""
from __future__ import annotations

import functools
import inspect
import logging
import time
import urllib.parse
from pathlib import Path

import orjson
from tornado.iostream import StreamClosedError
import tornado.web
from tornado import httputil

from upgate import i18n
from upgate.i18n import refusals as refusal_text
from upgate.services import refusals
from upgate.console import session, view
from upgate.handlers.base import new_request_id, set_page_headers
from upgate.handlers.guard import BodyGuard

log = logging.getLogger("upgate.console")

HERE = Path(__file__).parent
TEMPLATES = str(HERE / "templates")
STATIC = str(HERE / "static")
PREFIX = "/admin"
FLASH = "upgate_flash"
LANG_COOKIE = "upgate_lang"  # the operator's language, remembered a year (path /admin)
_STATIC_SETTINGS = {"static_path": STATIC, "static_url_prefix": PREFIX + "/static/"}
CSP = ("default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; "
       "frame-ancestors 'none'; base-uri 'none'")


def _form_first(verb):
    """Run `read_form` (the form parsed, its XSRF field checked) before `verb`."""
    @functools.wraps(verb)
    async def run(self, *args):
        self.read_form()
        result = verb(self, *args)
        if inspect.isawaitable(result):
            await result
    run.form_first = True
    return run


class ConsoleHandler(BodyGuard, tornado.web.RequestHandler):
    public = False  # True: reachable without a session (the sign-in page)
    writes = False  # True: a POST that changes something (refused to read-only tokens)
    keep_body = True  # the form, at most 64 KB

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        verb = cls.__dict__.get("post")
        if verb is not None and not getattr(verb, "form_first", False):
            cls.post = _form_first(verb)

    def initialize(self, ctx) -> None:
        self.ctx = ctx
        self.pepper = ctx.settings.key_pepper
        self.started = time.monotonic()
        self.request_id = new_request_id()
        self.who = None  # the signed-in AdminToken
        # English unless the operator chose Persian (?lang=fa, then remembered in a cookie)
        asked = self.get_query_argument("lang", None)
        self.lang = i18n.choose(asked, self.get_cookie(LANG_COOKIE), default=i18n.EN)
        if asked in i18n.LANGS and asked != self.get_cookie(LANG_COOKIE):
            self.set_cookie(LANG_COOKIE, asked, expires_days=365)
        self.fmt = i18n.Formatter(self.lang)

    @property
    def route_label(self) -> str:
        """The metrics' and access log's route for a page: its handler, never its path (which
        carries account and key ids)."""
        return "console:" + type(self).__name__

    def on_finish(self) -> None:
        hook = getattr(self.ctx, "on_request_finished", None)  # the access log line and metrics
        if hook is not None:
            hook(self)

    def too_large(self) -> Exception:
        return tornado.web.HTTPError(413, "A console form is at most 64 KB.")

    async def call(self, fn, *args, **kwargs):
        """A sync service function on the node's admin pools (the management API's): never on
        the event loop; a page's reads on the read pool, a form's write on the write pool."""
        node = self.ctx.admin
        run = node.read if self.request.method in ("GET", "HEAD") else node.call
        return await run(fn, *args, **kwargs)

    # ---- rendering ---------------------------------------------------------------------------
    async def render_page(self, template_name: str, **kwargs) -> None:
        """`render`, with the template run on the read pool: a page's size follows the data (a
        month of 5,000 top-ups, a catalog of 10,000 models: 0.2-0.3 s of Python to render),
        which must not hold the event loop. The handler is idle meanwhile, so it is not shared."""
        html = await self.ctx.admin.read(lambda _client: self.render_string(template_name, **kwargs))
        try:
            await self.finish(html)
        except StreamClosedError:  # the browser left meanwhile (a double click's first navigation)
            pass

    def get_template_path(self) -> str:
        return TEMPLATES

    def static_url(self, path: str, include_host=None, **kwargs) -> str:
        return tornado.web.StaticFileHandler.make_static_url(_STATIC_SETTINGS, path)

    def get_user_locale(self):
        return i18n.locale(self.lang)

    def lang_url(self, lang: str) -> str:
        """This page in another language (the switch in the header); a GET of the same page."""
        args = [(k, v) for k, vs in self.request.query_arguments.items() if k != "lang"
                for v in (x.decode("utf-8", "replace") for x in vs)]
        path = self.request.path if self.request.method in ("GET", "HEAD") else PREFIX + "/"
        return path + "?" + urllib.parse.urlencode(args + [("lang", lang)])

    def get_template_namespace(self) -> dict:
        ns = super().get_template_namespace()
        ns.update(fmt=self.fmt, who=self.who, flash=self.pop_flash(), message=None, nav=None,
                  lang=self.lang, rtl=self.fmt.rtl, lang_url=self.lang_url,
                  money=functools.partial(view.money, self.fmt),
                  money_micro=functools.partial(view.money_micro, self.fmt), short_id=view.short_id,
                  money_text=lambda v: self.fmt.toman(v) + " " + self.locale.translate("toman"))
        return ns

    def set_default_headers(self) -> None:
        set_page_headers(self, CSP)

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

    def said(self, e: ValueError) -> str:
        """A service refusal for the operator: in Persian the catalogue's sentence
        (upgate/i18n/refusals.py); in English the service's own exact line, as the CLI and the
        management API give it."""
        if self.lang == i18n.FA:
            return refusal_text.say(e, self.lang, self.locale.translate)
        return refusals.refusal(e).message

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

    def read_form(self) -> None:
        """The POSTed form into Tornado's body arguments, then the XSRF check: 403 for a
        forged or stale form."""
        req = self.request
        req.body = self.body_bytes() or b""
        httputil.parse_body_arguments(req.headers.get("Content-Type", ""), req.body, req.body_arguments,
                                      req.files, req.headers)
        for name, values in req.body_arguments.items():
            req.arguments.setdefault(name, []).extend(values)
        self.check_xsrf_cookie()

    async def authenticate(self) -> None:
        """The session, from its cookie: before any of the body is read."""
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
