"""Money of record over HTTP: top-ups and adjustments (idempotent by ref), transactions,
the monthly statement (JSON or CSV), request records. The rules are the money services'
(upgate/services/transactions.py, statements.py, records.py); this file parses and renders."""
from __future__ import annotations

from upgate.services import records, request_search, statements, transactions
from upgate.errors import GatewayError
from upgate.handlers.admin.base import AdminHandler, field
from upgate.handlers.admin.spec import AMOUNT_IN, JDAY, JMONTH, Op, data_of, nullable, obj, ref

_RESULT = ref("TransactionResult")
_REF = {"type": "string", "maxLength": 128}


def _credit(client, kind: str, account_id: str, amount: str, **kw) -> dict:
    return (transactions.topup if kind == "topup" else transactions.adjust)(client, account_id, amount, **kw)


def _transactions(client, account_id: str, month: str | None) -> dict:
    return {"data": transactions.list_transactions(client, account_id, month=month)}


def _statement(client, account_id: str, month: str | None, csv: bool):
    st = statements.statement(client, account_id, month=month)
    return statements.to_csv(st) if csv else st


def _requests(client, account_id: str, limit: int) -> dict:
    return {"data": records.list_requests(client, account_id, limit=limit)}


def _request(client, request_id: str):
    return records.find(client, request_id)


class _Credit(AdminHandler):
    KIND = "topup"
    FIELDS = ("amount_toman", "ref", "note")
    REQUIRED = ("amount_toman",)

    async def post(self, account_id: str) -> None:
        body = self.json_body(self.FIELDS, required=self.REQUIRED)
        amount = body["amount_toman"]
        if not isinstance(amount, str):
            raise GatewayError("invalid_request", "amount_toman must be a decimal string like \"1500.00\", "
                               "never a JSON number.", param="amount_toman")
        ref_ = self.text(body, "ref", 128)
        header = _header_text(self.request.headers.get("Idempotency-Key"))
        if header is not None:
            if ref_ is not None and transactions.normalize_ref(ref_) != transactions.normalize_ref(header):
                raise GatewayError("invalid_request", "Idempotency-Key and ref differ: give one, or the same.",
                                   param="ref")
            ref_ = header
            self.log_detail = dict(self.log_detail or {}, ref=header)
        try:
            with field("amount_toman"):  # what the service blames on no field of its own is the amount
                result = await self.call(_credit, self.KIND, account_id, amount, ref=ref_,
                                         note=self.text(body, "note"), actor=self.actor)
        except transactions.NotDurable as e:  # applied, but no replica confirmed it: say so, 503
            raise GatewayError("service_unavailable", str(e)) from None
        self.write_json(result, 200 if result.get("replayed") else 201)


def _header_text(value: str | None) -> str | None:
    """A header as the client sent it: HTTP hands over bytes (tornado reads them as latin-1), a
    ref is text, so UTF-8 bytes are read as UTF-8 and the ref is the one the body would carry."""
    if value is None:
        return None
    try:
        return value.encode("latin-1").decode("utf-8")
    except UnicodeError:
        return value


_HEADERS = {"Idempotency-Key": {"type": "string", "maxLength": 128}}


class TopupsHandler(_Credit):
    PATH = "/admin/v1/accounts/{id}/topups"
    OPS = {"post": Op("Record money the customer paid. A `ref` (or Idempotency-Key) makes it idempotent: "
                      "the first call 201, every replay 200 with replayed true, another amount 409.",
                      _RESULT, status=201, also={200: "a replay of the same ref: nothing changed"},
                      body=obj({"amount_toman": AMOUNT_IN, "ref": _REF, "note": {"type": "string"}},
                               required=["amount_toman"]), headers=_HEADERS)}


class AdjustmentsHandler(_Credit):
    KIND = "adjustment"
    REQUIRED = ("amount_toman", "note")
    PATH = "/admin/v1/accounts/{id}/adjustments"
    OPS = {"post": Op("A credit or debit that is not a payment (a note says why); idempotent by ref "
                      "as top-ups are.", _RESULT, status=201, also={200: "a replay of the same ref"},
                      body=obj({"amount_toman": AMOUNT_IN, "note": {"type": "string"}, "ref": _REF},
                               required=["amount_toman", "note"]), headers=_HEADERS)}


class TransactionsHandler(AdminHandler):
    PATH = "/admin/v1/accounts/{id}/transactions"
    OPS = {"get": Op("The account's transactions, newest first (one Jalali month with ?month=).",
                     data_of("Transaction"), query={"month": JMONTH})}

    async def get(self, account_id: str) -> None:
        self.write_json(await self.call(_transactions, account_id, self.get_query_argument("month", None)))


class StatementHandler(AdminHandler):
    PATH = "/admin/v1/accounts/{id}/statement"
    OPS = {"get": Op("The monthly statement: opening, top-ups, adjustments, charges, closing, per day. "
                     "CSV with ?format=csv.", ref("Statement"),
                     query={"month": JMONTH, "format": {"enum": ["json", "csv"]}},
                     produces=("application/json", "text/csv"))}

    async def get(self, account_id: str) -> None:
        fmt = self.get_query_argument("format", "json")
        if fmt not in ("json", "csv"):
            raise GatewayError("invalid_request", "format must be json or csv.", param="format")
        out = await self.call(_statement, account_id, self.get_query_argument("month", None), fmt == "csv")
        if fmt == "csv":
            self.set_header("Content-Type", "text/csv; charset=utf-8")
            self.finish(out.encode())
        else:
            self.write_json(out)


class AccountRequestsHandler(AdminHandler):
    PATH = "/admin/v1/accounts/{id}/requests"
    OPS = {"get": Op("The account's request records, newest first (no content is ever kept).",
                     data_of("RequestRecord"),
                     query={"limit": {"type": "integer", "minimum": 1, "maximum": 1000}})}

    async def get(self, account_id: str) -> None:
        self.write_json(await self.call(_requests, account_id, self.int_query("limit", 50, 1, 1000)))


class RequestHandler(AdminHandler):
    PATH = "/admin/v1/requests/{request_id}"
    OPS = {"get": Op("One request record, by the id a client quotes from X-Svc-Request-Id.",
                     ref("RequestRecord"))}

    async def get(self, request_id: str) -> None:
        record = await self.call(_request, request_id)
        if record is None:
            raise GatewayError("not_found", f"no record of request {request_id[:80]}")
        self.write_json(record)


class RequestSearchHandler(AdminHandler):
    PATH = "/admin/v1/requests"
    OPS = {"get": Op("Requests across every account, settled and refused, newest first: by Jalali period "
                     "(from/to, default today, at most 31 days), model, key (a key id), status (HTTP) and "
                     "code (\"ok\" = none). Bounded: `capped` says the period held more than one search reads. "
                     "CSV with ?format=csv.",
                     obj({"data": {"type": "array", "items": ref("RequestRecord")},
                          "next_cursor": nullable({"type": "string"}), "searched": {"type": "integer"},
                          "capped": {"type": "boolean"}, "from": JDAY, "to": JDAY}),
                     query={"from": JDAY, "to": JDAY, "model": {"type": "string"}, "key": {"type": "string"},
                            "status": {"type": "integer"}, "code": {"type": "string"},
                            "limit": {"type": "integer", "minimum": 1, "maximum": request_search.PAGE_MAX},
                            "cursor": {"type": "string"}, "format": {"enum": ["json", "csv"]}},
                     produces=("application/json", "text/csv"))}

    async def get(self) -> None:
        fmt = self.get_query_argument("format", "json")
        if fmt not in ("json", "csv"):
            raise GatewayError("invalid_request", "format must be json or csv.", param="format")
        arg = self.get_query_argument
        found = await self.call(request_search.search, start=arg("from", None), end=arg("to", None),
                                model=arg("model", None), key=arg("key", None), status=arg("status", None),
                                code=arg("code", None), limit=self.int_query("limit", 50, 1, request_search.PAGE_MAX),
                                cursor=arg("cursor", None))
        if fmt == "csv":
            self.set_header("Content-Type", "text/csv; charset=utf-8")
            self.finish(request_search.to_csv(found).encode())
            return
        self.write_json(found)


HANDLERS = [TopupsHandler, AdjustmentsHandler, TransactionsHandler, StatementHandler,
            AccountRequestsHandler, RequestHandler, RequestSearchHandler]
