"""How an admin route declares itself, and the OpenAPI 3.1 document built from those
declarations (so the document and the route table cannot drift: both come from here).

Each handler class carries ``PATH`` (an OpenAPI path template, ``{id}`` segments) and ``OPS``
(verb → `Op`). `routes()` turns them into Tornado rules and `document()` into the spec; a
test fails when a handler defines a verb without an `Op`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

MONEY = {"type": "string", "pattern": r"^-?[0-9]+\.[0-9]{6}$", "examples": ["1500.000000"]}
AMOUNT_IN = {"type": "string", "pattern": r"^[+-]?[0-9]+(\.[0-9]+)?$", "examples": ["1500", "99.5"],
             "description": "Toman as a plain decimal string (never a JSON number), at most six fractional digits."}
TIME = {"type": "string", "examples": ["2026-11-23T19:04:05Z"]}
JDAY = {"type": "string", "pattern": r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$", "examples": ["1405-09-02"]}
JMONTH = {"type": "string", "pattern": r"^[0-9]{4}-[0-9]{2}$", "examples": ["1405-09"]}


def nullable(schema: dict) -> dict:
    return {"anyOf": [schema, {"type": "null"}]}


def obj(props: dict, required: list[str] | None = None, extra: bool = True) -> dict:
    out = {"type": "object", "properties": props, "required": list(props) if required is None else required}
    if not extra:
        out["additionalProperties"] = False
    return out


def ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


def data_of(name: str) -> dict:
    return obj({"data": {"type": "array", "items": ref(name)}})


COMPONENTS = {
    "Error": obj({"error": obj({"message": {"type": "string"}, "type": {"type": "string"},
                                "code": {"type": "string"}, "param": nullable({"type": "string"})})}),
    "Account": obj({
        "id": {"type": "string", "format": "uuid"}, "phone": {"type": "string"},
        "status": {"enum": ["active", "suspended"]}, "balance_toman": MONEY, "held_toman": MONEY,
        "available_toman": MONEY, "free_quota_per_day": {"type": "integer"},
        "low_balance_toman": nullable(MONEY), "created_at": nullable(TIME)}),
    "Key": obj({
        "key_id": {"type": "string"}, "account_id": {"type": "string"}, "name": nullable({"type": "string"}),
        "prefix": {"type": "string"}, "last4": {"type": "string"}, "rate_limit_rpm": {"type": "integer"},
        "rpm": {"type": "integer", "description": "= rate_limit_rpm (kept for old scripts)"},
        "monthly_limit_toman": nullable(MONEY), "spent_this_month_toman": MONEY, "held_toman": MONEY,
        "allowed_models": nullable({"type": "array", "items": {"type": "string"}}),
        "expires_at": nullable(TIME), "state": {"enum": ["active", "expired", "revoked"]},
        "status": {"enum": ["active", "expired", "revoked"]}, "created_at": nullable(TIME)}),
    "Transaction": obj({
        "id": {"type": "string"}, "account_id": {"type": "string"}, "time": TIME,
        "kind": {"enum": ["opening", "topup", "adjustment"]}, "amount_toman": MONEY,
        "balance_after_toman": MONEY, "ref": nullable({"type": "string"}),
        "note": nullable({"type": "string"}), "actor": {"type": "string"}}),
    "TransactionResult": obj({"transaction": ref("Transaction"), "balance_toman": MONEY,
                              "replayed": {"type": "boolean"}}),
    "RequestRecord": obj({
        "request_id": {"type": "string"}, "time": TIME, "account_id": {"type": "string"},
        "key_id": {"type": "string"}, "key_prefix": {"type": "string"}, "model": {"type": "string"},
        "answered_model": nullable({"type": "string"}), "provider": nullable({"type": "string"}),
        "stream": {"type": "boolean"}, "status": {"type": "integer"}, "code": nullable({"type": "string"}),
        "prompt_tokens": {"type": "integer"}, "completion_tokens": {"type": "integer"},
        "cached_tokens": {"type": "integer"}, "hold_toman": MONEY, "cost_toman": MONEY,
        "ttfb_ms": nullable({"type": "integer"}), "duration_ms": {"type": "integer"}}),
    "Statement": obj({
        "account_id": {"type": "string"}, "month": JMONTH, "opening_balance_toman": MONEY,
        "topups_toman": MONEY, "adjustments_toman": MONEY, "charges_toman": MONEY,
        "closing_balance_toman": MONEY, "requests": {"type": "integer"},
        "transactions": {"type": "array", "items": ref("Transaction")},
        "days": {"type": "array", "items": obj({"day": JDAY, "requests": {"type": "integer"},
                                                "charges_toman": MONEY})}}),
    "Order": obj({
        "id": {"type": "string", "examples": ["ord_5f2c9a0e4b1d7c3a9e8f6b2d"]}, "account_id": {"type": "string"},
        "amount_toman": MONEY, "gateway": {"enum": ["zarinpal", "zibal", "fake"]},
        "status": {"enum": ["pending", "paid", "failed", "expired"]},
        "authority": nullable({"type": "string"}), "ref_id": nullable({"type": "string"}),
        "card_pan": nullable({"type": "string", "examples": ["502229******5995"]}),
        "created_at": TIME, "paid_at": nullable(TIME), "transaction_id": nullable({"type": "string"})}),
    "Model": {"type": "object", "required": ["id"], "properties": {"id": {"type": "string"}}},
    "Route": obj({"model": {"type": "string"}, "provider": {"type": "string"},
                  "upstream_model": {"type": "string"}, "priority": {"type": "integer"},
                  "weight": {"type": "integer"}, "state": {"enum": ["healthy", "cold"]},
                  "cold_until": nullable(TIME), "failures": {"type": "integer"}}),
    "AuditEntry": obj({"id": {"type": "string"}, "ts": TIME, "actor": {"type": "string"},
                       "action": {"type": "string"},
                       "object": obj({"type": {"type": "string"}, "id": nullable({"type": "string"})}),
                       "account": nullable({"type": "string"}), "before": nullable({"type": "object"}),
                       "after": nullable({"type": "object"}), "replay": {"type": "boolean"},
                       "note": nullable({"type": "string"}), "detail": {"type": "object"},
                       "time": TIME, "target": nullable({"type": "string"})}),
}

READ_VERBS = ("get", "head")


@dataclass(frozen=True)
class Op:
    summary: str
    response: dict  # JSON schema of the success body
    status: int = 200
    body: dict | None = None  # JSON schema of the request body (None = no body)
    body_type: str = "application/json"
    query: dict = field(default_factory=dict)  # name → schema (all optional)
    headers: dict = field(default_factory=dict)  # name → schema (all optional)
    also: dict = field(default_factory=dict)  # other success statuses → description
    produces: tuple = ("application/json",)
    auth: bool = True
    errors: dict = field(default_factory=dict)  # error statuses of this route alone → code


def tornado_pattern(path: str) -> str:
    """`/admin/v1/keys/{key_id}` → `/admin/v1/keys/([^/]+)$` (literal parts escaped)."""
    return "".join("([^/]+)" if part.startswith("{") else re.escape(part)
                   for part in re.split(r"(\{[a-z_]+\})", path)) + "$"


_ERRORS = {400: "invalid_request (param names the field)", 401: "invalid_admin_token",
           403: "read_only_token", 404: "not_found", 409: "idempotency_conflict or phone_in_use",
           429: "admin_auth_throttled"}


def _operation(path: str, verb: str, op: Op) -> dict:
    params = [{"name": n, "in": "path", "required": True, "schema": {"type": "string"}}
              for n in re.findall(r"\{([a-z_]+)\}", path)]
    params += [{"name": n, "in": "query", "required": False, "schema": s} for n, s in op.query.items()]
    params += [{"name": n, "in": "header", "required": False, "schema": s} for n, s in op.headers.items()]
    content = {t: {"schema": op.response if t == "application/json" else {"type": "string"}}
               for t in op.produces}
    responses = {str(op.status): {"description": op.summary, "content": content}}
    for status, what in op.also.items():
        responses[str(status)] = {"description": what, "content": content}
    if op.auth:
        error = {"content": {"application/json": {"schema": ref("Error")}}}
        for status, code in {**_ERRORS, **op.errors}.items():
            if status == 403 and verb in READ_VERBS:
                continue
            responses[str(status)] = {"description": code, **error}
    out = {"summary": op.summary, "operationId": f"{verb}_{_slug(path)}", "responses": responses}
    if params:
        out["parameters"] = params
    if op.body is not None:
        out["requestBody"] = {"required": True, "content": {op.body_type: {"schema": op.body}}}
    if not op.auth:
        out["security"] = []
    return out


def _slug(path: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", path.removeprefix("/admin/v1/").replace("{", "by_")).strip("_")


def document(handlers) -> dict:
    paths: dict = {}
    for h in handlers:
        paths[h.PATH] = {verb: _operation(h.PATH, verb, op) for verb, op in h.OPS.items()}
    return {
        "openapi": "3.1.0",
        "info": {"title": "upgate management API", "version": "1",
                 "description": "Accounts, wallets, keys, models and reports of an upgate deployment. "
                                "Amounts are decimal strings with six fractional digits; see docs/admin-api.md."},
        "servers": [{"url": "/"}],
        "security": [{"adminToken": []}],
        "paths": paths,
        "components": {"schemas": COMPONENTS,
                       "securitySchemes": {"adminToken": {"type": "http", "scheme": "bearer",
                                                          "description": "upa_… admin token"}}},
    }
