"""Every operator action on every face (OPERATORS.md): the service layer's operations, each with
its CLI command, management API route and console route, or a reason it is deliberately absent
there. The test enumerates the service functions that act on the store (every public function
of upgate/services/*, upgate/webhooks/service.py and upgate/payments' orders, service and audit
whose first parameter is the store client)
and fails when one is neither an action below nor named as plumbing; it resolves every command
and route named here against the real Click tree, the API's handlers and the console's route
table; and it fails when a face offers an action this table does not know."""
from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import click
import tornado.web

import upgate.services
from admin_cli.main import cli
from upgate import console
from upgate.handlers import admin

# action → (the service functions it runs, CLI command, API "VERB /path", console "VERB /path").
# A face given as a string starting with "absent:" says why that face deliberately lacks it.
ACCOUNT, KEY = "/admin/accounts/{id}", "/admin/v1/keys/{key_id}"
NO_TOKENS = ("absent: admin tokens are the credential of the API and the console; they are made, listed "
             "and revoked only with access to the store itself (the CLI), so a leaked token can neither "
             "mint a permanent one nor hide itself")
ACTIONS = {
    "account.create": (("accounts.create", "accounts.create_account"), "account create",
                       "POST /admin/v1/accounts", "POST /admin/accounts"),
    "account.list": (("accounts.objects_page", "accounts.page", "accounts.list_accounts", "account_list.browse"),
                     "account list",
                     "GET /admin/v1/accounts", "GET /admin/accounts"),
    "account.list_csv": (("account_list.export_csv",), "account list", "GET /admin/v1/accounts",
                         "GET /admin/accounts.csv"),
    "account.note": (("notes.add",), "account note", "POST /admin/v1/accounts/{id}/notes", "POST " + ACCOUNT + "/notes"),
    "account.notes": (("notes.list_notes",), "account notes", "GET /admin/v1/accounts/{id}/notes", "GET " + ACCOUNT),
    "account.show": (("accounts.get", "accounts.show"), "account show", "GET /admin/v1/accounts/{id}",
                     "GET " + ACCOUNT),
    "account.suspend": (("accounts.set_status", "accounts.suspend"), "account suspend",
                        "POST /admin/v1/accounts/{id}/suspend", "POST " + ACCOUNT + "/suspend"),
    "account.resume": (("accounts.set_status", "accounts.resume"), "account resume",
                       "POST /admin/v1/accounts/{id}/resume", "POST " + ACCOUNT + "/resume"),
    "account.free_quota": (("accounts.patch", "accounts.update", "accounts.set_free_quota"),
                           "account set-free-quota", "PATCH /admin/v1/accounts/{id}", "POST " + ACCOUNT + "/settings"),
    "account.low_balance": (("accounts.patch", "accounts.update"), "account set-low-balance",
                            "PATCH /admin/v1/accounts/{id}", "POST " + ACCOUNT + "/settings"),
    "account.set_phone": (("phone_change.set_phone", "phone_change.change"), "account set-phone",
                          "PATCH /admin/v1/accounts/{id}", "POST " + ACCOUNT + "/phone"),
    "account.topup": (("transactions.topup", "transactions.credit", "accounts.topup"), "account topup",
                      "POST /admin/v1/accounts/{id}/topups", "POST " + ACCOUNT + "/topups"),
    "account.adjust": (("transactions.adjust",), "account adjust", "POST /admin/v1/accounts/{id}/adjustments",
                       "POST " + ACCOUNT + "/adjustments"),
    "account.transactions": (("transactions.list_transactions",), "account transactions",
                             "GET /admin/v1/accounts/{id}/transactions", "GET " + ACCOUNT),
    "account.statement": (("statements.statement",), "account statement", "GET /admin/v1/accounts/{id}/statement",
                          "GET " + ACCOUNT + "/statement.csv"),
    "account.usage": (("usage.account_report", "usage.fetch"), "usage", "GET /admin/v1/accounts/{id}/usage",
                      "GET " + ACCOUNT),
    "account.requests": (("records.list_requests",), "requests", "GET /admin/v1/accounts/{id}/requests",
                         "GET " + ACCOUNT),
    "request.show": (("records.find",), "request show", "GET /admin/v1/requests/{request_id}",
                     "GET /admin/requests/{request_id}"),
    "request.search": (("request_search.search", "records.count_window", "records.account_window", "records.account_window_raw"), "request search",
                       "GET /admin/v1/requests", "GET /admin/requests"),
    "key.create": (("keys.create", "keys.create_key"), "key create", "POST /admin/v1/accounts/{id}/keys",
                   "POST " + ACCOUNT + "/keys"),
    "key.list": (("keys.objects", "keys.list_keys"), "key list", "GET /admin/v1/accounts/{id}/keys", "GET " + ACCOUNT),
    "key.show": (("keys.get", "keys.find_key"), "key show", "GET " + KEY, "GET " + ACCOUNT),
    "key.find": (("keys.find_by_prefix",), "key find", "GET /admin/v1/keys", "GET /admin/accounts"),
    "key.update": (("keys.update", "keys.update_key"), "key update", "PATCH " + KEY,
                   "POST " + ACCOUNT + "/keys/{key_id}/update"),
    "key.revoke": (("keys.revoke", "keys.revoke_key"), "key revoke", "DELETE " + KEY,
                   "POST " + ACCOUNT + "/keys/{key_id}/revoke"),
    "models.list": ((), "models list", "GET /admin/v1/models", "GET /admin/models"),
    "models.load": ((), "models load", "PUT /admin/v1/models",
                    "absent: a catalog is a file kept under version control and may be megabytes; a console "
                    "form stops at 64 KB (no one without a session may make a node hold more), and "
                    "PUT /admin/v1/models takes the file from a script"),
    "models.routes": (("routes.report",), "models routes", "GET /admin/v1/routes", "GET /admin/models"),
    "models.sync": (("prices.sync",), "models sync", "POST /admin/v1/models/sync", "POST /admin/models/sync"),
    "overview": (("overview.overview", "overview.topups", "usage.overview"), "overview",
                 "GET /admin/v1/overview", "GET /admin/"),
    "audit": (("audit.run",), "audit", "GET /admin/v1/audit", "GET /admin/audit"),
    "admin_log.read": (("admin_log.read", "admin_log.search"), "admin-token log", "GET /admin/v1/audit-log",
                       "GET /admin/audit"),
    "webhook.failed": (("webhooks.service.list_failed",), "webhook failed", "GET /admin/v1/webhooks/failed",
                       "GET /admin/webhooks"),
    "webhook.resend": (("webhooks.service.resend",), "webhook resend", "POST /admin/v1/webhooks/resend",
                       "POST /admin/webhooks/resend"),
    "webhook.test": ((), "webhook test", "POST /admin/v1/webhooks/test", "POST /admin/webhooks/test"),
    "payments.list": (("payments.orders.list_orders",), "payments list", "GET /admin/v1/payments", "GET /admin/payments"),
    "payments.show": (("payments.orders.get",), "payments show", "GET /admin/v1/payments/{id}", "GET /admin/payments"),
    "payments.verify": (("payments.service.verify_id", "payments.service.verify"), "payments verify",
                        "POST /admin/v1/payments/{id}/verify", "POST /admin/payments/{order_id}/verify"),
    "migrate": ((), "migrate", "absent: a data migration is run once per release by whoever deploys it, from "
                "a shell beside the store (like admin tokens); a request's worth of time is not enough for it",
                "absent: a data migration is run once per release by whoever deploys it, from a shell beside the "
                "store; `upgate serve` warns while one is pending"),
    "admin_token.create": (("admin_tokens.create",), "admin-token create", NO_TOKENS, NO_TOKENS),
    "admin_token.list": (("admin_tokens.list_tokens",), "admin-token list", NO_TOKENS, NO_TOKENS),
    "admin_token.revoke": (("admin_tokens.revoke",), "admin-token revoke", NO_TOKENS, NO_TOKENS),
}
# service functions on the store that are not an operator's action, and why
PLUMBING = {
    "keys.catalog_models": "the one allowed-models-against-the-catalog rule the key forms call",
    "keys.check_catalog": "the account holder's key form refusing a model the catalog does not offer",
    "keys.customer_form_settings": "the account holder's key form (the dashboard's keys page)",
    "accounts.is_cluster": "a store helper",
    "accounts.atomic_write": "a store helper every write uses",
    "accounts.require_account": "a check the operations make",
    "keys.key_fields": "how a search over keys reads them (key find, the accounts list)",
    "accounts.key_view": "the key holder's own view (GET /v1/svc/me), not the operator's",
    "admin_log.record": "every write on every face records itself",
    "admin_log.face_record": "every write on every face records itself (unless its service did)",
    "admin_tokens.verify": "how the API and the console authenticate",
    "admin_tokens.live_hashes": "how the API and the console authenticate",
    "transactions.migrate": "the audit runs it on an account from before transactions",
    "usage.afetch": "the async read of GET /v1/svc/usage (the key holder's)",
    "account_list.backfill": "keeps the accounts list's time index whole (run by the listing)",
    "account_list.spent_this_month": "a column of the accounts list",
    "phone_index.claim": "part of creating an account (a phone belongs to one account)",
    "phone_index.owner": "how a phone is looked up (search, sign-in)",
    "phone_index.duplicates": "a part of the audit (audit.run): phones several accounts hold",
    "records.find_own": "the account holder's own request (the dashboard), not the operator's",
    "dash_sessions.open_session": "the account holder's dashboard session",
    "dash_sessions.current": "the account holder's dashboard session",
    "dash_sessions.close": "the account holder's dashboard session",
    "account_requests.search": "the account holder's own requests, filtered (the dashboard); the operator's search is request_search.search",
    "account_requests.choices": "the account holder's requests page's model filter",
    "account_requests.key_figures": "the account holder's keys page (last used, a 30-day sparkline)",
    "phone_verify.issue": "the account holder's own phone change (the dashboard); the operator's is account set-phone",
    "phone_verify.withdraw": "a step of the account holder's own phone change",
    "phone_verify.check": "a step of the account holder's own phone change",
    "phone_verify.change": "the account holder's own phone change, through phone_change.set_phone",
    "dash_sessions.list_sessions": "the account holder's own signed-in devices (the dashboard's sessions page)",
    "dash_sessions.close_all": "the account holder's own \"sign out everywhere\" (the dashboard's sessions page)",
    "signin.issue": "the account holder's sign-in by SMS code (the dashboard)",
    "signin.check": "the account holder's sign-in by SMS code (the dashboard)",
    "signin.account_for": "the account holder's sign-in by SMS code (the dashboard)",
    "signin.withdraw": "the account holder's sign-in by SMS code (the dashboard)",
    "signin.sms_paused_s": "the account holder's sign-in by SMS code (the dashboard)",
    "signin.record_send": "the account holder's sign-in by SMS code (the dashboard)",
    "payments.orders.create": "the account holder's top-up order (the dashboard's payments.service.start)",
    "payments.orders.set_authority": "a step of starting a payment with the bank",
    "payments.orders.by_authority": "how the bank's callback finds its order",
    "payments.orders.end": "a step of verifying a payment",
    "payments.orders.close": "a step of verifying a payment",
    "payments.orders.open_orders": "the reconciler's read of orders still open",
    "payments.orders.open_fairly": "the reconciler's read of orders still open, a few per account",
    "payments.service.start": "the account holder's top-up (the dashboard), not the operator's",
    "payments.service.callback": "the bank's return to the gateway, not the operator's",
    "payments.service.reconcile": "every node's reconciler, in the background",
    "payments.audit.check": "a part of the audit (audit.run)",
}
# routes of a face that are not an operator's action
CONSOLE_PLUMBING = {"GET /admin/login", "POST /admin/login", "POST /admin/logout", "GET /admin/static/x"}
API_PLUMBING = {"GET /admin/v1/openapi.json"}
SAMPLE = {"{id}": "2f0c6a1e-0000-4000-8000-000000000000", "{key_id}": "9f2c4e1a0b3d5c7e", "{order_id}": "ord_0123abcd",
          "{request_id}": "req_0123456789abcdef01234567"}


def service_operations() -> set[str]:
    """`module.function` (upgate.services. and upgate. left out) of every public function on
    the store in the service layer and in the money faces' own services (webhooks, payments)."""
    mods = [f"upgate.services.{m.name}" for m in pkgutil.iter_modules(upgate.services.__path__)]
    out = set()
    for name in [*mods, "upgate.webhooks.service", "upgate.payments.orders", "upgate.payments.service",
                 "upgate.payments.audit"]:
        mod = importlib.import_module(name)
        short = name.removeprefix("upgate.services.").removeprefix("upgate.")
        for fn_name, fn in vars(mod).items():
            if fn_name.startswith("_") or not inspect.isfunction(fn) or fn.__module__ != name:
                continue
            params = list(inspect.signature(fn).parameters)
            if params and params[0] == "client":
                out.add(f"{short}.{fn_name}")
    return out


def cli_commands(group: click.Group = cli, prefix: str = "") -> set[str]:
    out = set()
    for name, cmd in group.commands.items():
        path = f"{prefix}{name}"
        out |= cli_commands(cmd, path + " ") if isinstance(cmd, click.Group) else {path}
    return out


def api_routes() -> set[str]:
    return {f"{verb.upper()} {h.PATH}" for h in admin.HANDLERS for verb in h.OPS}


def _own(handler, verb: str) -> bool:
    return getattr(handler, verb) is not getattr(tornado.web.RequestHandler, verb)


def console_handler(route: str):
    """The console handler that answers `VERB /path` (the path with sample ids), or None."""
    verb, path = route.split(" ", 1)
    for key, value in SAMPLE.items():
        path = path.replace(key, value)
    for pattern, handler, *_ in console.routes(None):
        if re.fullmatch(pattern, path):
            return handler if verb in handler.SUPPORTED_METHODS and _own(handler, verb.lower()) else None
    return None


def _faces():
    for action, (_services, *faces) in ACTIONS.items():
        for face, where in zip(("CLI", "API", "console"), faces):
            yield action, face, where


def test_every_service_operation_is_an_action_or_plumbing():
    claimed = {f for services, *_ in ACTIONS.values() for f in services} | set(PLUMBING)
    ops = service_operations()
    assert not ops - claimed, f"service operations no face offers (add them to ACTIONS or PLUMBING): {sorted(ops - claimed)}"
    assert not claimed - ops, f"listed here but not service operations: {sorted(claimed - ops)}"
    assert all(why.strip() for why in PLUMBING.values())


def test_every_action_is_on_every_face_or_deliberately_absent():
    commands, routes = cli_commands(), api_routes()
    missing = []
    for action, face, where in _faces():
        if where.startswith("absent:"):
            assert len(where) > 30, f"{action} on the {face}: say why it is absent"
        elif face == "CLI" and where not in commands:
            missing.append(f"{action}: no CLI command `upgate-admin {where}`")
        elif face == "API" and where not in routes:
            missing.append(f"{action}: no API route {where}")
        elif face == "console" and console_handler(where) is None:
            missing.append(f"{action}: no console route {where}")
    assert not missing, "\n".join(missing)


def test_no_face_offers_an_action_this_table_does_not_know():
    named = {face: {where for _a, f, where in _faces() if f == face} for face in ("CLI", "API", "console")}
    assert not cli_commands() - named["CLI"], sorted(cli_commands() - named["CLI"])
    assert not api_routes() - named["API"] - API_PLUMBING, sorted(api_routes() - named["API"] - API_PLUMBING)
    unknown = []
    for pattern, handler, *_ in console.routes(None):
        for verb in ("GET", "POST"):
            if verb not in handler.SUPPORTED_METHODS or not _own(handler, verb.lower()):
                continue
            known = [w for w in named["console"] | CONSOLE_PLUMBING if not w.startswith("absent:")
                     and w.split(" ", 1)[0] == verb and console_handler(w) is handler]
            if not known:
                unknown.append(f"{verb} {pattern} ({handler.__name__})")
    assert not unknown, unknown
