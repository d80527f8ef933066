"""The dashboard's base handler: language, session, body limit, XSRF, HTML errors, headers.

Checks before a byte of the body is read: the gateway's one rule for every face
(upgate/handlers/guard.py, `BodyGuard`): the credential first (the session cookie; none → 303
to /dashboard/login), then the declared size (413 above BODY_MAX). Only then is the body taken
in, counted chunk by chunk against the same limit, parsed as a form, and its ``_xsrf`` field
checked (403) before the handler's ``submit`` runs: a POST handler implements ``submit``,
never ``post``, so no form can skip the check. XSRF is checked here rather than by the application-wide setting, which
would also demand it on the Bearer-token APIs.

Cookies: ``upgate_dash`` (the session; services/dash_sessions.py) and ``upgate_lang`` (the
chosen language) are HttpOnly, SameSite=Lax (the return from a payment gateway is a top-level
navigation from another site and must keep the session), Secure behind https, path /dashboard.
Tornado's ``_xsrf`` cookie is SameSite=Strict and scoped the same way.

Payments (upgate/payments/) build on this class: `self.account_id` is the signed-in account,
`self.blocked()` says whether it may change anything (suspended accounts may not).
"""
from __future__ import annotations

import logging
import time
import urllib.parse
from pathlib import Path

import tornado.httputil
import tornado.web

from upgate import i18n
from upgate.i18n import refusals as refusal_text
from upgate.handlers.base import new_request_id, set_page_headers
from upgate.handlers.guard import BodyGuard
from upgate.services import accounts, dash_sessions

log = logging.getLogger("upgate.dashboard")

HERE = Path(__file__).parent
TEMPLATES = str(HERE / "templates")
STATIC = str(HERE / "static")
PREFIX = "/dashboard"
LANG_COOKIE = "upgate_lang"
BODY_MAX = 16 * 1024  # a form of a few fields; nothing the dashboard takes is larger
_STATIC_SETTINGS = {"static_path": STATIC, "static_url_prefix": PREFIX + "/static/"}
CSP = ("default-src 'none'; style-src 'self'; img-src 'self' data:; script-src 'self'; "
       "form-action 'self' https:; frame-ancestors 'none'; base-uri 'none'")


class Refused(tornado.web.HTTPError):
    """An expected refusal shown as an error page (status, one-line message already translated)."""

    def __init__(self, status: int, message: str):
        super().__init__(status, message)
        self.message = message


class DashboardHandler(BodyGuard, tornado.web.RequestHandler):
    public = False  # True: reachable without a session (sign-in pages)
    writes = False  # True: a form that changes something (refused to suspended accounts)
    keep_body = True  # the form, at most BODY_MAX
    nav: str | None = None  # the menu entry of this page

    def initialize(self, ctx) -> None:
        self.ctx = ctx
        self.started = time.monotonic()
        self.request_id = new_request_id()
        self.session: dict | None = None
        self.account: dict | None = None  # accounts.show of the signed-in account
        self.lang = i18n.DEFAULT

    @property
    def route_label(self) -> str:
        """The metrics' and access log's route: the handler, never the path (it carries ids)."""
        return "dashboard:" + type(self).__name__

    @property
    def account_id(self) -> str | None:
        return self.session["account_id"] if self.session else None

    def on_finish(self) -> None:
        hook = getattr(self.ctx, "on_request_finished", None)
        if hook is not None:
            hook(self)

    async def call(self, fn, *args, **kwargs):
        """A sync service function on the node's pools (never on the event loop): a page's
        reads on the read pool, a form's work on the write pool."""
        node = self.ctx.admin
        run = node.read if self.request.method in ("GET", "HEAD") else node.call
        return await run(fn, *args, **kwargs)

    # ---- language ----------------------------------------------------------------------------
    def get_user_locale(self):
        return i18n.locale(self.lang)

    def _choose_language(self) -> None:
        asked = self.get_query_argument("lang", None)
        self.lang = i18n.choose(asked, self.get_cookie(LANG_COOKIE))
        if asked in i18n.LANGS and asked != self.get_cookie(LANG_COOKIE):
            self.set_cookie(LANG_COOKIE, asked, expires_days=365)

    def lang_url(self, lang: str) -> str:
        """This page in the other language (the switch on every page)."""
        args = [(k, v) for k, vs in self.request.query_arguments.items() if k != "lang"
                for v in (x.decode("utf-8", "replace") for x in vs)]
        return self.request.path + "?" + urllib.parse.urlencode(args + [("lang", lang)])

    # ---- rendering ---------------------------------------------------------------------------
    def get_template_path(self) -> str:
        return TEMPLATES

    def static_url(self, path: str, include_host=None, **kwargs) -> str:
        return tornado.web.StaticFileHandler.make_static_url(_STATIC_SETTINGS, path)

    def get_template_namespace(self) -> dict:
        ns = super().get_template_namespace()
        ns.update(fmt=i18n.Formatter(self.lang), lang=self.lang, rtl=self.lang == i18n.FA,
                  outcome=lambda code, status: refusal_text.outcome(code, status, self.lang, self.locale.translate),
                  account=self.account, nav=self.nav, lang_url=self.lang_url, message=None,
                  blocked=self.blocked())
        return ns

    def set_default_headers(self) -> None:
        set_page_headers(self, CSP)

    def write_error(self, status_code: int, **kwargs) -> None:
        exc = kwargs.get("exc_info", (None, None, None))[1]
        _ = self.locale.translate
        if isinstance(exc, Refused):
            reason = exc.message
        elif status_code == 404:
            reason = _("Not found.")
        elif status_code == 413:
            reason = _("That form is larger than the dashboard accepts.")
        elif status_code == 405:
            reason = _("This address only takes a form. Open the page it is on.")
        elif status_code == 403:
            reason = _("This form has expired. Go back, reload the page and try again.")
        else:
            reason = _("Something went wrong on our side. Please try again in a moment.")
        if status_code == 405:  # (a write route: its form is the only way in)
            self.set_header("Allow", "POST")
        self.render("error.html", status=status_code, reason=reason)

    def log_exception(self, typ, value, tb) -> None:
        if isinstance(value, tornado.web.HTTPError):
            return  # expected: the page says what happened
        log.error("unexpected error in %s %s (request %s)", self.request.method, self.request.path,
                  self.request_id, exc_info=(typ, value, tb))

    # ---- cookies -----------------------------------------------------------------------------
    def is_https(self) -> bool:
        forwarded = self.request.headers.get("X-Forwarded-Proto", "").split(",")[0].strip().lower()
        return self.request.protocol == "https" or forwarded == "https"

    def set_cookie(self, name, value, domain=None, expires=None, path=PREFIX, expires_days=None, **kwargs):
        kwargs.setdefault("httponly", True)
        kwargs.setdefault("samesite", "Strict" if name == "_xsrf" else "Lax")
        kwargs.setdefault("secure", self.is_https())
        super().set_cookie(name, value, domain, expires, path, expires_days, **kwargs)

    def session_id(self) -> str | None:
        return self.get_cookie(dash_sessions.COOKIE)

    def start_session(self, session_id: str) -> None:
        self.set_cookie(dash_sessions.COOKIE, session_id, expires_days=dash_sessions.LIFETIME_S / 86400)

    def end_session(self) -> None:
        self.clear_cookie(dash_sessions.COOKIE, path=PREFIX)

    # ---- the checks before the body (BodyGuard's hooks) ----------------------------------------
    async def prepare(self) -> None:
        self._choose_language()  # first: even a refusal is shown in the customer's language
        await super().prepare()

    async def authenticate(self) -> None:
        """The session, from its cookie alone, before any of the body is read."""
        if self.public:
            return
        self.session = await self.call(dash_sessions.current, self.session_id())
        if self.session is not None:
            try:
                self.account = await self.call(accounts.show, self.session["account_id"])
            except accounts.UnknownAccount:  # deleted behind the session's back
                self.session = None
        if self.session is None:
            if self.session_id():
                self.end_session()
            target = self.request.uri if self.request.method == "GET" else PREFIX + "/"
            self.redirect(PREFIX + "/login?" + urllib.parse.urlencode({"next": target}), status=303)

    def body_limit(self) -> int:
        return BODY_MAX

    def too_large(self) -> Exception:
        return tornado.web.HTTPError(413)

    def blocked(self) -> bool:
        """A suspended account sees everything and changes nothing."""
        return bool(self.account and self.account.get("suspended"))

    async def post(self, *args) -> None:
        if self._finished or self.body_bytes() is None:
            return  # refused while the body arrived (the answer is on its way)
        self.request.body = self.body_bytes()
        tornado.httputil.parse_body_arguments(self.request.headers.get("Content-Type", ""), self.request.body,
                                              self.request.body_arguments, self.request.files,
                                              self.request.headers)
        for k, v in self.request.body_arguments.items():
            self.request.arguments.setdefault(k, []).extend(v)
        self.check_xsrf_cookie()  # 403 for a forged or stale form
        if self.writes and self.blocked():
            raise Refused(403, self.locale.translate(
                "This account is suspended: you can see everything but change nothing. "
                "Please contact support."))
        await self.submit(*args)

    async def submit(self, *args) -> None:
        raise tornado.web.HTTPError(405)

    def said(self, e: ValueError) -> str:
        """A service refusal in the page's language, from the one catalogue
        (upgate/i18n/refusals.py): never the service's English internals."""
        return refusal_text.say(e, self.lang, self.locale.translate)

    def arg(self, name: str) -> str:
        """A form field, trimmed ("" when absent)."""
        return self.get_body_argument(name, "").strip()


class StaticHandler(BodyGuard, tornado.web.StaticFileHandler):
    """The stylesheet and the copy button's script: no credential, at most 64 KB of a body, dropped."""


def safe_next(target: str | None) -> str:
    """Only a path inside the dashboard, never another host (an open redirect)."""
    if (target and target.startswith(PREFIX + "/") and not target.startswith("//")
            and "\\" not in target and "\r" not in target and "\n" not in target):
        return target
    return PREFIX + "/"
