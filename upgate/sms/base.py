"""The driver interface and its one error."""
from __future__ import annotations

import logging

import orjson
import tornado.httpclient

log = logging.getLogger("upgate.sms")


class SmsFailed(Exception):
    """The code was not handed to the provider (refused, timed out, unreadable answer). The
    message names the provider and its status, never the phone or the code."""


class Sender:
    name = "?"

    async def send_code(self, phone: str, code: str, text: str) -> None:
        """Deliver `code` to `phone` (E.164). `text` is the whole message for drivers that send
        free text; template drivers send only the code into the operator's template."""
        raise NotImplementedError


def national(phone: str) -> str:
    """+989121234567 → 09121234567: the form Iranian providers document for a receptor."""
    return "0" + phone[3:] if phone.startswith("+98") else phone.lstrip("+")


async def fetch_json(provider: str, request: tornado.httpclient.HTTPRequest) -> tuple[int, dict]:
    """(HTTP status, decoded JSON object) of one provider call; SmsFailed when the provider
    cannot be reached, times out or does not answer JSON."""
    client = tornado.httpclient.AsyncHTTPClient()
    try:
        resp = await client.fetch(request, raise_error=False)
    except Exception as e:  # DNS, refused connection, TLS: all "not sent"
        raise SmsFailed(f"{provider}: unreachable ({type(e).__name__})") from None
    if resp.code == 599:
        raise SmsFailed(f"{provider}: no answer ({type(resp.error).__name__})")
    try:
        body = orjson.loads(resp.body or b"")
    except orjson.JSONDecodeError:
        raise SmsFailed(f"{provider}: HTTP {resp.code}, not JSON") from None
    if not isinstance(body, dict):
        raise SmsFailed(f"{provider}: HTTP {resp.code}, unexpected answer")
    return resp.code, body
