"""Errors in the Messages API's shape, with the spec's code kept (DESIGN.md, "Agent clients"):
`{"type": "error", "error": {"type": <Anthropic's type>, "message", "code", "svc"?}}`, same
status as on every /v1 route."""
from __future__ import annotations

from upgate.errors import GatewayError

# by status: what an Anthropic SDK maps to its exception classes
_TYPES = {400: "invalid_request_error", 401: "authentication_error", 402: "billing_error",
          403: "permission_error", 404: "not_found_error", 413: "request_too_large",
          429: "rate_limit_error", 503: "overloaded_error", 529: "overloaded_error"}


def error_type(status: int) -> str:
    if status in _TYPES:
        return _TYPES[status]
    return "invalid_request_error" if 400 <= status < 500 else "api_error"


def body(err: GatewayError) -> dict:
    inner = {"type": error_type(err.status), "message": err.message, "code": err.code}
    if err.svc:
        inner["svc"] = err.svc
    return {"type": "error", "error": inner}
