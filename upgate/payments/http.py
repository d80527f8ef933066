"""The few HTTP calls to a payment gateway: JSON POSTs with a timeout, blocking (the service
layer runs in a thread pool, off the event loop). No automatic retry: a request retried could
open a second payment, and a verify is asked again by reconciliation, never doubled by us.
Every failure to get the gateway's JSON is `GatewayUnavailable`; the gateway's URL and body
are never put into a message a customer could see."""
from __future__ import annotations

import socket
import urllib.error
import urllib.request

import orjson

from upgate.payments.errors import GatewayUnavailable

USER_AGENT = "upgate-payments"


def post_json(url: str, body: dict, timeout_s: float) -> tuple[int, dict]:
    """POST `body` as JSON; (status, the JSON object answered). Gateways answer errors with a
    4xx and a JSON body, which is returned like a 200; a 5xx or no JSON is GatewayUnavailable."""
    request = urllib.request.Request(url, data=orjson.dumps(body), method="POST", headers={
        "Content-Type": "application/json", "Accept": "application/json", "User-Agent": USER_AGENT})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as resp:
            status, raw = resp.status, resp.read(1 << 20)
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read(1 << 20) if e.fp is not None else b""
    except (urllib.error.URLError, socket.timeout, TimeoutError, ConnectionError, OSError) as e:
        raise GatewayUnavailable(f"no answer ({type(e).__name__})") from None
    if status >= 500:
        raise GatewayUnavailable(f"HTTP {status}")
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise GatewayUnavailable(f"HTTP {status} without JSON") from None
    if not isinstance(doc, dict):
        raise GatewayUnavailable(f"HTTP {status}: not a JSON object")
    return status, doc
