"""/admin/v1/accounts: create, list (cursor pages, ?phone=), get, patch, suspend, resume."""
from __future__ import annotations

from upgate.services import account_list, accounts, notes, phone_change, transactions
from upgate.errors import GatewayError
from upgate.handlers.admin.base import AdminHandler, field
from upgate.handlers.admin.spec import AMOUNT_IN, Op, nullable, obj, ref


class _Base(AdminHandler):
    @property
    def quota(self) -> int:
        return self.ctx.settings.free_quota_default


class AccountsHandler(_Base):
    PATH = "/admin/v1/accounts"
    OPS = {
        "post": Op("Create an account (its wallet opens with balance_toman, default 0).",
                   ref("Account"), status=201,
                   body=obj({"phone": {"type": "string"}, "balance_toman": AMOUNT_IN}, required=["phone"])),
        "get": Op("List accounts by id, a page at a time.",
                  obj({"data": {"type": "array", "items": ref("Account")},
                       "next_cursor": nullable({"type": "string"})}),
                  query={"phone": {"type": "string"}, "cursor": {"type": "string"},
                         "limit": {"type": "integer", "minimum": 1, "maximum": accounts.PAGE_MAX},
                         "format": {"enum": ["json", "csv"]}},
                  produces=("application/json", "text/csv")),
    }

    async def post(self) -> None:
        body = self.json_body(("phone", "balance_toman"), required=("phone",))
        with field("phone", parsing=True):
            phone = accounts.check_phone(body["phone"])
        balance = self.amount(body, "balance_toman") or 0
        try:
            made = await self.call(accounts.create, phone, balance, self.quota, actor=self.actor)
        except transactions.NotDurable as e:  # created, but no replica confirmed it: 503 naming it
            raise GatewayError("service_unavailable", str(e)) from None
        self.log_target = made["id"]
        self.write_json(made, 201)

    async def get(self) -> None:
        fmt = self.get_query_argument("format", "json")
        if fmt not in ("json", "csv"):
            raise GatewayError("invalid_request", "format must be json or csv.", param="format")
        if fmt == "csv":  # every account of the filter (at most account_list.SCAN_MAX), not one page
            phone = self.get_query_argument("phone", None)
            if phone is not None:
                with field("phone", parsing=True):
                    phone = accounts.check_phone(phone)
            text = await self.call(account_list.export_csv, self.quota, q=phone or "")
            self.set_header("Content-Type", "text/csv; charset=utf-8")
            self.finish(text.encode())
            return
        limit = self.int_query("limit", 50, 1, accounts.PAGE_MAX)
        self.write_json(await self.call(accounts.objects_page, self.quota, phone=self.get_query_argument("phone", None),
                                        cursor=self.get_query_argument("cursor", None), limit=limit))


class AccountHandler(_Base):
    PATH = "/admin/v1/accounts/{id}"
    OPS = {
        "get": Op("One account: wallet (balance, held, available), status, quota, low-balance alert.",
                  ref("Account")),
        "patch": Op("Change the daily free quota (null = the default), the low-balance alert (null = none) "
                    "and/or the phone (canonical and unique: 409 phone_in_use; written to the audit log "
                    "with the old one).",
                    ref("Account"),
                    body=obj({"free_quota_per_day": nullable({"type": "integer", "minimum": 0}),
                              "low_balance_toman": nullable(AMOUNT_IN), "phone": {"type": "string"}},
                             required=[])),
    }

    async def get(self, account_id: str) -> None:
        self.write_json(await self.call(accounts.get, account_id, self.quota))

    async def patch(self, account_id: str) -> None:
        body = self.json_body(("free_quota_per_day", "low_balance_toman", "phone"))
        phone = body.get("phone")
        if phone is not None and not isinstance(phone, str):
            raise GatewayError("invalid_request", "phone must be text.", param="phone")
        changes = {}
        if "free_quota_per_day" in body:
            changes["free_quota"] = body["free_quota_per_day"]
        if "low_balance_toman" in body:
            changes["low_balance_micro"] = self.amount(body, "low_balance_toman")
        if not changes and phone is None:
            raise GatewayError("invalid_request",
                               "Nothing to change: give free_quota_per_day, low_balance_toman or phone.")
        if changes:  # checked first: a refused setting changes nothing, the phone included
            accounts.check_update(**changes)
        if phone is not None:  # the phone change records itself in the audit log, with the old phone
            self.log_detail.pop("phone", None)
            await self.call(phone_change.set_phone, account_id, phone, actor=self.actor)
            self.unlogged = not changes
        if changes:
            self.write_json(await self.call(accounts.patch, account_id, self.quota, **changes))
        else:
            self.write_json(await self.call(accounts.get, account_id, self.quota))


_REASON = obj({"reason": {"type": "string", "maxLength": accounts.MAX_REASON}}, required=[])


class SuspendHandler(_Base):
    PATH = "/admin/v1/accounts/{id}/suspend"
    OPS = {"post": Op("Suspend: every key of the account gets 403 account_suspended from the next request. "
                      "The optional reason goes into the audit log and the account.suspended webhook.",
                      ref("Account"), body=_REASON)}
    SUSPEND = True

    async def post(self, account_id: str) -> None:
        body = self.json_body(("reason",))
        reason = self.text(body, "reason", accounts.MAX_REASON)
        obj_, _changed = await self.call(accounts.set_status, account_id, self.SUSPEND, self.quota,
                                         reason=reason, actor=self.actor)
        self.write_json(obj_)


class ResumeHandler(SuspendHandler):
    PATH = "/admin/v1/accounts/{id}/resume"
    OPS = {"post": Op("Lift a suspension (the optional reason: in the audit log and the account.resumed "
                      "webhook).", ref("Account"), body=_REASON)}
    SUSPEND = False


class NotesHandler(_Base):
    PATH = "/admin/v1/accounts/{id}/notes"
    _NOTE = obj({"id": {"type": "string"}, "ts": {"type": "string"}, "actor": {"type": "string"},
                 "text": {"type": "string"}})
    OPS = {
        "post": Op("Add a note to the account (who and when are recorded; never shown to the account holder).",
                   _NOTE, status=201, body=obj({"text": {"type": "string", "maxLength": notes.MAX_TEXT}},
                                               required=["text"])),
        "get": Op("The account's notes, newest first.", obj({"data": {"type": "array", "items": _NOTE}})),
    }

    async def post(self, account_id: str) -> None:
        body = self.json_body(("text",), required=("text",))
        self.write_json(await self.call(notes.add, account_id, self.text(body, "text", notes.MAX_TEXT),
                                        actor=self.actor), 201)

    async def get(self, account_id: str) -> None:
        self.write_json({"data": await self.call(notes.list_notes, account_id)})


HANDLERS = [AccountsHandler, AccountHandler, SuspendHandler, ResumeHandler, NotesHandler]
