"""The console's pages: one small handler per page and per form. Each parses the form, calls
the service layer in the executor, and renders; a refusal from the service layer is shown as
its one-line message with the form as it was typed (nothing was written).

Writes redirect (303) to the account page with a one-line result, except creating a key,
which renders the page at once: the new key is in that response and nowhere else.
"""
from __future__ import annotations

import re
import secrets
import urllib.parse

import tornado.web

from upgate.billing import money
from upgate.errors import CODES
from upgate.i18n import N_
from upgate.services import account_list, accounts, admin_log, keys, phones, refusals, transactions
from upgate.console import charts, data, session
from upgate.console.base import PREFIX, ConsoleHandler, log

# an adjustment of at least this many toman (either sign) asks to be confirmed first
LARGE_ADJUSTMENT_TOMAN = 1_000_000


def fresh_op() -> str:
    """A new money operation: the `op` an account page's address carries (see money_ref)."""
    return secrets.token_hex(8)


def money_ref(op: str, form: str) -> str:
    """The idempotency ref a money form offers: a function of its page's address (`?op=`), not
    of the rendering. Whatever brings that page back (Back, a reload, a restored tab, the same
    address in two tabs) brings the same ref, so a second submission is a replay."""
    return f"console-{op}-{form}"


def page_url(account_id: str, op: str, month: str | None = None) -> str:
    query = {"month": month, "op": op} if month else {"op": op}
    return f"{PREFIX}/accounts/{urllib.parse.quote(account_id)}?{urllib.parse.urlencode(query)}"


_OP = re.compile(r"[0-9a-f]{16}")
_NEXT = re.compile(r"/admin/[!-\[\]-~]*")  # printable ASCII, no space, no backslash


def _safe_next(target: str | None) -> str:
    """Only a path inside the console: never another host (an open redirect), never a control
    character (a CR or LF would split the Location header), never a step out of /admin/."""
    if not target or not _NEXT.fullmatch(target):
        return PREFIX + "/"
    path = urllib.parse.urlsplit(target).path
    if any(urllib.parse.unquote(seg) in (".", "..") for seg in path.split("/")):
        return PREFIX + "/"
    return target


def refusal_status(e: ValueError) -> int:
    """The status a refusal answers with: its code's, as on the management API."""
    return CODES[refusals.refusal(e).code].status


async def log_console_write(handler: ConsoleHandler, action: str, target: str | None, detail: dict) -> None:
    """The admin log, as the management API writes it: actor = the admin token's name, action =
    the console's route, detail under the API's field names. A failure is logged, the write stands."""
    try:
        await handler.call(admin_log.face_record, handler.who.name, action, target, detail)
    except Exception as e:  # the store went away between the write and its entry
        log.warning("console write by %s not recorded in the admin log: %s (%s)", handler.who.name,
                    action, type(e).__name__)


class LoginHandler(ConsoleHandler):
    public = True

    def get(self) -> None:
        self.render("login.html", next=_safe_next(self.get_query_argument("next", None)), error=None)

    async def post(self) -> None:
        target = _safe_next(self.get_body_argument("next", None))
        node = self.ctx.admin  # the management API's throttle on failed sign-ins, per address
        address = node.address(self.request)
        token = self.get_body_argument("token", "").strip()
        wait = await node.wait_before(address, token)  # never for a live token
        if wait:
            self.set_status(429)
            self.set_header("Retry-After", str(wait))
            self.render("login.html", next=target,
                        error=self.locale.translate("Too many failed sign-ins: try again in %(s)s s.") % {"s": wait})
            return
        sid, who = await self.call(session.sign_in, self.pepper, token)
        if sid is None:
            node.failed(address)
            self.set_status(401)
            self.render("login.html", next=target,
                        error=self.locale.translate("That admin token was not accepted: unknown, revoked or mistyped."))
            return
        self.set_signed_cookie(session.COOKIE, sid, expires_days=session.LIFETIME_S / 86400)
        self.redirect(target, status=303)


class LogoutHandler(ConsoleHandler):
    SUPPORTED_METHODS = ("POST",)
    public = True  # signing out must work with an already dead session too

    async def post(self) -> None:
        await self.call(session.sign_out, self.session_id())
        self.clear_cookie(session.COOKIE, path=PREFIX)
        self.flash(self.locale.translate("Signed out."))
        self.redirect(PREFIX + "/login", status=303)


class OverviewHandler(ConsoleHandler):
    async def get(self) -> None:
        # the management API's overview, with its cache: a dashboard and a console refreshing
        # together read the store once per 30 s
        numbers = await self.ctx.admin.overview(data.overview_days())
        health = await self.call(lambda _client: data.node_health(self.ctx))  # O(catalog): off the loop
        await self.render_page("overview.html", nav="overview", charts=charts, **numbers, **health)


class AccountsHandler(ConsoleHandler):
    """The change list: newest first (or by balance, or this month's spend), paged by cursor,
    one search box (services/account_list.py does the finding and the bounds); a request id
    opens its record, a key prefix of one account opens the account. POST: create an account
    (phone only: its money comes through the top-up form, whose ref makes a second submission
    a replay; an opening balance here would have none)."""

    @property
    def writes(self) -> bool:
        return self.request.method == "POST"

    async def get(self) -> None:
        q = self.get_query_argument("q", "").strip()
        if data.is_request_id(q):
            self.redirect(f"{PREFIX}/requests/{urllib.parse.quote(q, safe='')}", status=303)
            return
        sort = self.get_query_argument("sort", "newest")
        cursor = self.get_query_argument("cursor", None)
        page, message = None, None
        try:
            page = await self.call(account_list.browse, q=q, sort=sort, cursor=cursor, limit=PAGE_SIZE)
        except ValueError as e:  # a cursor or sort not from this page
            message = str(e)
        if keys.looks_like_prefix(q) and page is not None and len(page["data"]) == 1 and not cursor:
            self.redirect(page_url(page["data"][0]["account_id"], fresh_op()), status=303)  # opens its account
            return
        if q and page is not None and not page["data"] and not cursor:
            message = self.locale.translate("No account matches %(q)s.") % {"q": repr(q)}

        def list_url(**change) -> str:
            query = {"q": q, "sort": sort, **change}
            return PREFIX + "/accounts?" + urllib.parse.urlencode({k: v for k, v in query.items() if v})

        self.render("accounts.html", nav="accounts", q=q, sort=sort, sorts=account_list.SORTS,
                    page=page, first=not cursor, message=message, list_url=list_url, created=None,
                    account_url=lambda account_id: page_url(account_id, fresh_op()))

    async def post(self) -> None:
        phone = self.get_body_argument("phone", "").strip()
        try:
            made = await self.call(accounts.create, phone, 0, self.ctx.settings.free_quota_default,
                                   actor=self.who.name)
        except ValueError as e:
            self.set_status(refusal_status(e))
            self.render("accounts.html", nav="accounts", q="", sort="newest", sorts=account_list.SORTS,
                        page=None, first=True, message=None, list_url=lambda **change: PREFIX + "/accounts",
                        created={"phone": phone, "message": self.said(e)},
                        account_url=lambda account_id: page_url(account_id, fresh_op()))
            return
        await log_console_write(self, "POST /admin/accounts", made["id"], {"phone": phone})
        self.flash(self.locale.translate("Account %(id)s created; top it up below.") % {"id": made["id"]})
        self.redirect(page_url(made["id"], fresh_op()) + "#topup", status=303)


PAGE_SIZE = 25


class AccountHandler(ConsoleHandler):
    """GET: the account page. Its forms post to the handlers below, which render it again
    (with the refusal and the typed values) when the service layer refuses.

    The page's address carries its money operation (`?op=`); every form on it carries the
    same `op` in a hidden field, so a page rendered as a POST's answer keeps it too."""

    target = None

    def op(self) -> str | None:
        op = self.get_argument("op", "")
        return op if _OP.fullmatch(op) else None

    async def get(self, account_id: str) -> None:
        if self.op() is None:  # an address of its own first: what Back and a reload come back to
            self.redirect(page_url(account_id, fresh_op(), self.get_query_argument("month", None)), status=303)
            return
        await self.show(account_id)

    async def show(self, account_id: str, *, message: str | None = None, form: str | None = None,
                   new_key: dict | None = None, status: int = 200, another: str | None = None) -> None:
        month = self.get_query_argument("month", None) or None
        try:
            page = await self.call(data.account_page, account_id, month, self.ctx.settings.free_quota_default)
        except accounts.UnknownAccount as e:
            raise tornado.web.HTTPError(404, str(e)) from None
        except ValueError as e:  # a malformed ?month=
            page = await self.call(data.account_page, account_id, None, self.ctx.settings.free_quota_default)
            message, form = str(e), "month"
        self.set_status(status)
        typed = {k: self.get_body_argument(k, "") for k in self.request.body_arguments} if form else {}
        op = self.op() or fresh_op()
        await self.render_page("account.html", nav="accounts", charts=charts, message=message, form=form,
                               typed=typed, target=self.target, new_key=new_key, op=op,
                               ref=lambda which: money_ref(op, which), another=another,
                               fresh_url=lambda: page_url(account_id, fresh_op()), **page)


class WriteHandler(AccountHandler):
    SUPPORTED_METHODS = ("POST",)  # a GET is 405, never the page's handler with a form's arguments
    writes = True
    form = ""  # which form a refusal is shown at (with its typed values)

    logged = ("amount_toman", "ref", "note", "name", "rate_limit_rpm", "monthly_limit_toman",
              "allowed_models", "expires_at", "free_quota_per_day", "low_balance_toman")  # never a key or a token

    # Not named `record`: on a handler that is the billable request's record, which the access
    # log and metrics read (metrics.observe).
    async def log_write(self, account_id: str) -> None:
        """The admin log, as the management API writes it: actor = the admin token's name,
        action = the console's route, target = the account."""
        action = "POST " + self.request.path.replace(account_id, "{id}", 1)
        detail = {k: self.arg(k) for k in self.logged if self.arg(k)}
        if self.anchor == "keys" and self.target:
            action = action.replace(self.target, "{key_id}", 1)
            detail["key_id"] = self.target
        await log_console_write(self, action, account_id, detail)

    @property
    def anchor(self) -> str:
        return "keys" if self.form.startswith("key") else self.form

    def arg(self, name: str) -> str:
        return self.get_body_argument(name, "").strip()

    def confirm(self, client, account_id: str, *rest) -> list[tuple[str, str]] | None:
        """What to show on a confirmation page before this write ((label, value) rows), or None
        when it needs none. Only writes that cannot be undone ask."""
        return None

    async def post(self, account_id: str, *rest) -> None:
        self.target = rest[0] if rest else None  # the key a key form acted on
        if self.arg("confirmed") != "1":
            try:
                rows = await self.call(self.confirm, account_id, *rest)
            except accounts.UnknownAccount as e:
                raise tornado.web.HTTPError(404, str(e)) from None
            except ValueError:
                rows = None  # the write itself refuses it, with its own message
            if rows is not None:
                await self.ask(account_id, rows)
                return
        try:
            done = await self.call(self.act, account_id, *rest)
        except accounts.UnknownAccount as e:
            raise tornado.web.HTTPError(404, str(e)) from None
        except ValueError as e:
            conflict = isinstance(e, transactions.IdempotencyConflict)
            await self.show(account_id, message=self.said(e), form=self.form,
                            status=refusal_status(e), another=self.form if conflict else None)
            return
        await self.log_write(account_id)
        await self.answer(account_id, done)

    question = ""  # the confirmation page's heading
    button = ""

    async def ask(self, account_id: str, rows: list[tuple[str, str]]) -> None:
        """The confirmation page: the same form (every field, its XSRF and op) posted again with
        confirmed=1, or back to the account page. Plain HTML: no script needed."""
        _ = self.locale.translate
        fields = [(k, self.get_body_argument(k, "")) for k in self.request.body_arguments if k not in ("_xsrf", "confirmed")]
        self.render("confirm.html", nav="accounts", question=_(self.question), button=_(self.button), rows=rows,
                    action=self.request.path, fields=fields, back=page_url(account_id, self.op() or fresh_op()))

    async def answer(self, account_id: str, done) -> None:
        """After an accepted write: its one line on the account page, on the same operation."""
        if isinstance(done, dict) and "new_key" in done:
            await self.show(account_id, new_key=done["new_key"], status=201)
            return
        self.flash(done)
        self.redirect(page_url(account_id, self.op() or fresh_op()) + "#" + self.anchor, status=303)


class MoneyHandler(WriteHandler):
    """A top-up or an adjustment: `act` answers the money layer's {"transaction", "replayed"}."""

    what = ""

    async def answer(self, account_id: str, res: dict) -> None:
        _, fmt = self.locale.translate, self.fmt
        tx, balance = res["transaction"], fmt.toman(res["balance_toman"])
        args = {"id": tx["id"], "when": fmt.when(tx["time"]), "amount": fmt.toman(tx["amount_toman"]),
                "balance": balance}
        if res["replayed"]:  # the same page again: its form still holds the used ref
            self.flash(_(self.replayed) % args, kind="replayed", form=self.form)
            op = self.op() or fresh_op()
        else:  # a new operation: the next one from this page is another
            self.flash(_(self.recorded) % args)
            op = fresh_op()
        self.redirect(page_url(account_id, op) + "#" + self.form, status=303)


class TopupHandler(MoneyHandler):
    form, what = "topup", "top-up"
    replayed = N_("This top-up was already recorded (transaction %(id)s, %(when)s, %(amount)s toman): nothing changed; balance %(balance)s toman.")
    recorded = N_("Top-up of %(amount)s toman recorded (transaction %(id)s); balance %(balance)s toman.")

    def act(self, client, account_id: str) -> dict:
        return transactions.topup(client, account_id, self.arg("amount_toman"), ref=self.arg("ref") or None,
                                  note=self.arg("note") or None, actor=self.who.name)


class AdjustmentHandler(MoneyHandler):
    form, what = "adjust", "adjustment"
    replayed = N_("This adjustment was already recorded (transaction %(id)s, %(when)s, %(amount)s toman): nothing changed; balance %(balance)s toman.")
    recorded = N_("Adjustment of %(amount)s toman recorded (transaction %(id)s); balance %(balance)s toman.")
    question, button = N_("Record this large adjustment?"), N_("Yes, record the adjustment")

    def confirm(self, client, account_id: str) -> list[tuple[str, str]] | None:
        amount = accounts.parse_amount(self.arg("amount_toman"), allow_negative=True, what="amount_toman")
        if abs(amount) < money.parse_toman(str(LARGE_ADJUSTMENT_TOMAN)):
            return None
        view, fmt = accounts.show(client, account_id), self.fmt
        return [(N_("Account"), view["phone"]), (N_("Amount (toman)"), fmt.exact_micro(amount)),
                (N_("Balance now"), fmt.exact_micro(view["balance_micro"])),
                (N_("Balance after"), fmt.exact_micro(view["balance_micro"] + amount)),
                (N_("Note"), self.arg("note") or "—"), (N_("Reference (ref)"), self.arg("ref") or "—")]

    def act(self, client, account_id: str) -> dict:
        return transactions.adjust(client, account_id, self.arg("amount_toman"), note=self.arg("note"),
                                   ref=self.arg("ref") or None, actor=self.who.name)


def _key_settings(arg, *, clearing: bool) -> dict:
    return keys.form_settings(arg, clearing=clearing)  # the dashboard's key forms use it too


class KeyCreateHandler(WriteHandler):
    form = "key-create"

    def act(self, client, account_id: str) -> dict:
        full, key_id, prefix = keys.create_key(client, self.pepper, account_id,
                                               **_key_settings(self.arg, clearing=False))
        return {"new_key": {"key": full, "key_id": key_id, "prefix": prefix}}


class KeyUpdateHandler(WriteHandler):
    form = "keys"

    def act(self, client, account_id: str, key_id: str) -> str:
        keys.update_key(client, key_id, account_id=account_id, **_key_settings(self.arg, clearing=True))
        return self.locale.translate("Key %(id)s updated.") % {"id": key_id}


class KeyRevokeHandler(WriteHandler):
    form = "keys"
    question = N_("Revoke this key? It stops working at once and cannot be restored.")
    button = N_("Yes, revoke the key")

    def confirm(self, client, account_id: str, key_id: str) -> list[tuple[str, str]] | None:
        k = next((k for k in keys.list_keys(client, account_id) if k["key_id"] == key_id), None)
        if k is None or k["state"] == "revoked":
            return None  # the write answers it (unknown, or already revoked)
        return [(N_("Key"), k["display"]), (N_("Key id"), key_id), (N_("Name"), k["name"] or "—"),
                (N_("Spent this month"), self.fmt.exact_micro(k["spent_this_month_micro"]))]

    def act(self, client, account_id: str, key_id: str) -> str:
        changed = keys.revoke_key(client, key_id, account_id=account_id)
        _ = self.locale.translate
        return (_("Key %(id)s revoked.") if changed else _("Key %(id)s already was revoked.")) % {"id": key_id}


class SuspendHandler(WriteHandler):
    """Suspend or resume with the operator's reason (in the audit and the webhook). The service
    records the admin log's entry itself (admin_log.SELF_AUDITED)."""

    form = "wallet"
    question = N_("Suspend this account? Its keys are refused from the next request until it is resumed.")
    button = N_("Yes, suspend the account")

    def confirm(self, client, account_id: str, verb: str) -> list[tuple[str, str]] | None:
        view = accounts.show(client, account_id)
        if verb != "suspend" or view["suspended"]:
            return None
        live = sum(1 for k in keys.list_keys(client, view["account_id"]) if k["state"] == "active")
        return [(N_("Account"), view["account_id"]), (N_("Phone"), view["phone"]),
                (N_("Balance"), self.fmt.exact_micro(view["balance_micro"])), (N_("Active keys"), self.fmt.count(live)),
                (N_("Reason"), self.arg("reason") or "—")]

    def act(self, client, account_id: str, verb: str) -> str:
        _ = self.locale.translate
        reason = self.arg("reason") or None
        if verb == "suspend":
            done = accounts.suspend(client, account_id, reason, actor=self.who.name)
            return _("Account suspended.") if done else _("Already suspended.")
        done = accounts.resume(client, account_id, reason, actor=self.who.name)
        return _("Account resumed.") if done else _("It was not suspended.")


class SettingsHandler(WriteHandler):
    """The account's settings as PATCH /admin/v1/accounts/{id} changes them: the daily free
    quota (blank or `default`: the deployment's) and the low-balance alert (blank or `off`: none)."""

    form = "settings"

    def act(self, client, account_id: str) -> str:
        digits = lambda f: phones.ascii_digits(self.arg(f))  # noqa: E731  (Persian digits are digits)
        quota = accounts.parse_free_quota(digits("free_quota_per_day") or "default")
        low = accounts.parse_low_balance(digits("low_balance_toman"))
        obj = accounts.patch(client, account_id, self.ctx.settings.free_quota_default, free_quota=quota,
                             low_balance_micro=low)
        _, fmt = self.locale.translate, self.fmt
        if obj["low_balance_toman"] is None:
            return _("Settings saved: %(n)s free requests a day; no low-balance alert.") % {
                "n": fmt.count(obj["free_quota_per_day"])}
        return _("Settings saved: %(n)s free requests a day; low-balance alert below %(amount)s toman.") % {
            "n": fmt.count(obj["free_quota_per_day"]), "amount": fmt.toman(obj["low_balance_toman"])}


class StatementCsvHandler(ConsoleHandler):
    async def get(self, account_id: str) -> None:
        try:
            month, text = await self.call(data.statement_csv, account_id,
                                                 self.get_query_argument("month", None) or None)
        except ValueError as e:
            raise tornado.web.HTTPError(404 if isinstance(e, accounts.UnknownAccount) else 400, str(e)) from None
        self.set_header("Content-Type", "text/csv; charset=UTF-8")
        self.set_header("Content-Disposition", f'attachment; filename="statement-{account_id}-{month}.csv"')
        self.finish(text)


class ModelsHandler(ConsoleHandler):
    async def get(self) -> None:
        page = await self.call(data.models_page)
        got = self.ctx.catalog.get
        cold = {m["id"]: data.model_cold(self.ctx, got(m["id"])) if got(m["id"]) else None for m in page["models"]}
        sync = {"typed": {"markup": "1", "max_change": "30%", "dry_run": True}, "outcome": None, "message": None,
                "providers": sorted(self.ctx.providers)}
        await self.render_page("models.html", nav="models", cold={k: v for k, v in cold.items() if v}, sync=sync,
                               **page)


class NotFoundPage(ConsoleHandler):
    """Every /admin/ address no route knows (never /admin/v1/..., which keeps the API's JSON
    404): the console's own page, in the operator's language, with or without a session,
    answered from the header block (no body is read)."""

    public = True
    keep_body = False
    SUPPORTED_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")

    async def authenticate(self) -> None:
        raise tornado.web.HTTPError(404, self.locale.translate("There is no console page at this address."))
