"""The one error catalogue: every code the gateway returns, with its status and retry hints.

A handler raises ``GatewayError(code, message?, **svc)``; the base handler's ``write_error``
renders it as ``{"error": {message, type, code, param, svc?}}`` with the headers below.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Code:
    status: int
    message: str
    retry_after: int | None = None  # seconds; None = no Retry-After (or a computed one)
    final: bool = False  # waiting cannot fix it: send `x-should-retry: false`


CODES: dict[str, Code] = {
    "invalid_request": Code(400, "The request is malformed.", final=True),
    "invalid_api_key": Code(401, "The API key is invalid, revoked or expired.", final=True),
    "insufficient_balance": Code(402, "The wallet's available balance does not cover this request.", final=True),
    "account_suspended": Code(403, "This account is suspended.", final=True),
    "model_not_allowed": Code(403, "This key is not allowed to use that model.", final=True),
    "model_not_found": Code(404, "The model does not exist.", final=True),
    "not_found": Code(404, "This route does not exist.", final=True),
    "request_too_large": Code(413, "The request body is larger than 20 MB.", final=True),
    "request_header_too_large": Code(431, "The request's header block is larger than 64 KB or 100 lines.", final=True),
    "rate_limit_exceeded": Code(429, "Too many requests per minute for this key."),
    # Retry-After computed by the ledger: seconds until the next Jalali month (Tehran time)
    "key_monthly_limit_reached": Code(429, "This key's monthly spending limit is used up.", final=True),
    "too_many_concurrent_streams": Code(429, "Too many open streams for this account.", retry_after=5),
    "free_quota_exceeded": Code(429, "The account's daily free-model quota is spent.", retry_after=3600, final=True),
    "free_capacity_exhausted": Code(429, "The provider's shared free capacity for this model is exhausted.", retry_after=60),
    "upstream_rate_limited": Code(429, "The provider is throttling this model right now.", retry_after=10),
    "upstream_error": Code(502, "The provider failed to answer."),
    "upstream_unavailable": Code(503, "The provider could not be reached.", retry_after=30),
    "pricing_unavailable": Code(503, "Pricing is not configured yet.", retry_after=30),
    "service_unavailable": Code(503, "The gateway's store is unavailable; nothing was charged.", retry_after=5),
    "upstream_timeout": Code(504, "The provider sent nothing for too long. Use stream: true for slow models."),
    "internal_error": Code(500, "Internal error."),
    # the management API (/admin/v1): see docs/admin-api.md
    "invalid_admin_token": Code(401, "The admin token is missing, invalid or revoked.", final=True),
    "read_only_token": Code(403, "This admin token is read-only.", final=True),
    "idempotency_conflict": Code(409, "This ref was already used with another amount or kind.", final=True),
    "price_change_too_large": Code(422, "A price would move further than max_change allows; nothing was written.",
                                   final=True),
    "phone_in_use": Code(409, "Another account already has this phone.", final=True),
    # computed Retry-After: seconds until the address's failure allowance refills
    "admin_auth_throttled": Code(429, "Too many failed admin authentications from this address."),
}


class GatewayError(Exception):
    """An error the client sees, in the spec's shape. `svc` holds the actionable extras."""

    def __init__(self, code: str, message: str | None = None, *, status: int | None = None,
                 retry_after: int | None = None, svc: dict | None = None, param: str | None = None):
        spec = CODES.get(code)
        self.code = code
        self.status = status or (spec.status if spec else 502)
        self.message = message or (spec.message if spec else "The provider returned an error.")
        self.retry_after = retry_after if retry_after is not None else (spec.retry_after if spec else None)
        self.final = spec.final if spec else self.status < 500 and self.status != 429
        self.svc = svc
        self.param = param  # the request field at fault (management API), else None
        super().__init__(f"{code}: {self.message}")

    def body(self, name_param: bool = False) -> dict:
        """The spec's error object. `param` stays null on the client API (the spec shows it null
        in every shape); the management API (`name_param`) names the field at fault."""
        param = self.param if name_param else None
        err = {"message": self.message, "type": self.code, "code": self.code, "param": param}
        if self.svc:
            err["svc"] = self.svc
        return {"error": err}

    def headers(self) -> dict[str, str]:
        h = {}
        if self.retry_after is not None:
            h["Retry-After"] = str(int(self.retry_after))
        if self.final:
            h["x-should-retry"] = "false"
        return h


class Reasoned(ValueError):
    """A refusal a person may read. `reason` names its sentence in the one catalogue
    (upgate/i18n/refusals.py) and `params` fill it, so every face says it in its reader's language
    (amounts in toman, Jalali dates, Persian digits on Persian pages); str() stays the one line of
    English the CLI and the JSON APIs give as `message`. Subclasses set a class-level `reason` or
    pass one: ``raise InvalidKeySetting("rate_limit_rpm must …", reason="rpm_range", low=1, high=600)``."""

    reason = "invalid"
    field: str | None = None

    def __init__(self, *args, reason: str | None = None, **params):
        super().__init__(*args)
        if reason is not None:
            self.reason = reason
        self.params = params
