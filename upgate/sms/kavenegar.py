"""Kavenegar's verify/lookup API: the code goes into a template the operator registered in
Kavenegar's panel (%token%), which Kavenegar sends without a sender line.

    GET {base}/v1/{API_KEY}/verify/lookup.json?receptor=09121234567&token=123456&template=NAME

Answer: {"return": {"status": 200, "message": "…"}, "entries": [{"messageid", "status", …}]};
any other return.status (and HTTP status) is a refusal (401 bad key, 418 no credit, 424 no
such template, …). Kavenegar's Python library is a blocking `requests` wrapper, so these few
lines call it with Tornado's client instead, off the event loop's critical path.
"""
from __future__ import annotations

import urllib.parse

import tornado.httpclient

from upgate.sms.base import Sender, SmsFailed, fetch_json, national


class Kavenegar(Sender):
    name = "kavenegar"
    BASE_URL = "https://api.kavenegar.com"

    def __init__(self, api_key: str, template: str, base_url: str, timeout_s: float):
        if not api_key or not template:
            raise ValueError("UPGATE_SMS=kavenegar needs UPGATE_SMS_API_KEY and UPGATE_SMS_TEMPLATE")
        self.api_key, self.template, self.base, self.timeout_s = api_key, template, base_url.rstrip("/"), timeout_s

    async def send_code(self, phone: str, code: str, text: str) -> None:
        query = urllib.parse.urlencode({"receptor": national(phone), "token": code, "template": self.template})
        url = f"{self.base}/v1/{urllib.parse.quote(self.api_key, safe='')}/verify/lookup.json?{query}"
        status, body = await fetch_json(self.name, tornado.httpclient.HTTPRequest(
            url, method="GET", connect_timeout=min(5.0, self.timeout_s), request_timeout=self.timeout_s))
        ret = body.get("return") if isinstance(body.get("return"), dict) else {}
        if status != 200 or ret.get("status") != 200:
            raise SmsFailed(f"kavenegar: HTTP {status}, return.status {ret.get('status')!r}")
