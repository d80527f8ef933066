"""Map an upstream HTTP error to the gateway's (status, code, message).

Rules (DESIGN.md, "Upstream"): 400/413/422 → 400 invalid_request; 401/403 → 502
upstream_error (our provider key is bad: the operator is told, the client gets a generic
line); 404 → model_not_found; 429 → upstream_rate_limited, or free_capacity_exhausted for
`:free` models; 5xx → 502 upstream_error; any other 4xx keeps its status and the
provider's own code. Upstream 402 is treated like 401/403: it means the operator's
account at the provider is out of credit, and passing it on would read as the client's
own insufficient_balance.

The provider's `error.message` passes verbatim, scrubbed of what identifies the upstream,
through scrub.client_text (the one exit for provider text), whatever status it came with.
"""

import logging
import re

import orjson

from upgate.upstream.scrub import client_text

log = logging.getLogger("upgate.upstream")

_CODE_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_.\-]{0,63}$")

GENERIC = {
    "invalid_request": "The upstream provider rejected the request.",
    "upstream_error": "The upstream provider failed to answer.",
    "model_not_found": "The model is not available at the upstream provider.",
    "upstream_rate_limited": "The upstream provider is rate limiting this model; retry later.",
    "free_capacity_exhausted":
        "The shared free capacity for this model is exhausted; retry later or use a paid model.",
}
_CREDENTIALS = "The upstream provider refused the gateway's credentials; the operator has been notified."


def map_error(status: int, body: bytes, provider, free: bool, model=None) -> tuple[int, str, str]:
    """(status, code, message) for the client, from an upstream error response. `model`: the
    catalog entry asked for (its upstream id is named as the client's in the message)."""
    message, provider_code = _parse(body)
    if status in (400, 413, 422):
        out_status, code = 400, "invalid_request"
    elif status in (401, 402, 403):
        log.warning("provider %s refused our request with HTTP %d: check its API key and credit",
                    getattr(provider, "name", "?"), status)
        return 502, "upstream_error", _CREDENTIALS
    elif status == 404:
        out_status, code = 404, "model_not_found"
    elif status == 429:
        out_status, code = 429, "free_capacity_exhausted" if free else "upstream_rate_limited"
    elif 400 <= status < 500:
        out_status = status
        code = provider_code if provider_code and _CODE_RE.match(provider_code) else "upstream_error"
        if code != "upstream_error" and client_text(code, provider, model) != code:
            code = "upstream_error"  # a code that names the upstream (a host, a key, an org)
    else:  # 5xx, and anything else that is not a success
        out_status, code = 502, "upstream_error"
    if message is None:
        message = GENERIC.get(code, GENERIC["upstream_error"])
    else:
        message = client_text(message, provider, model)
    return out_status, code, message


def body_error_message(error: dict, provider, model=None) -> str:
    """The message of an `error` object a provider sent in a 200 body or a stream event."""
    message = error.get("message")
    if not isinstance(message, str) or not message:
        return "The provider returned an error."
    return client_text(message, provider, model)


def _parse(body: bytes) -> tuple[str | None, str | None]:
    """The provider's message and string code, from the common error shapes."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None, None
    if not isinstance(doc, dict):
        return None, None
    error = doc.get("error")
    if isinstance(error, str):  # {"error": "message"}
        return error or None, None
    if isinstance(error, dict):
        message = error.get("message")
        code = error.get("code")
        return (message if isinstance(message, str) and message else None,
                code if isinstance(code, str) else None)
    message = doc.get("message") or doc.get("detail")  # {"message": …} / {"detail": …}
    return (message if isinstance(message, str) else None), None
