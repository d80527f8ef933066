"""SMS.ir's send/verify API: the code goes into a template (by id) registered in SMS.ir's panel,
as its parameter named CODE.

    POST {base}/v1/send/verify   X-API-KEY: …   Content-Type: application/json
    {"mobile": "09121234567", "templateId": 123456, "parameters": [{"name": "CODE", "value": "123456"}]}

Answer: {"status": 1, "message": "…", "data": {"messageId", "cost"}}; status 1 is success,
anything else (and any HTTP status but 200) a refusal.
"""
from __future__ import annotations

import orjson
import tornado.httpclient

from upgate.sms.base import Sender, SmsFailed, fetch_json, national

PARAMETER = "CODE"


class SmsIr(Sender):
    name = "smsir"
    BASE_URL = "https://api.sms.ir"

    def __init__(self, api_key: str, template: str, base_url: str, timeout_s: float, parameter: str = PARAMETER):
        if not api_key or not template:
            raise ValueError("UPGATE_SMS=smsir needs UPGATE_SMS_API_KEY and UPGATE_SMS_TEMPLATE (template id)")
        if not template.isdigit():
            raise ValueError(f"UPGATE_SMS_TEMPLATE must be SMS.ir's numeric template id, got {template!r}")
        self.api_key, self.template, self.base, self.timeout_s = api_key, int(template), base_url.rstrip("/"), timeout_s
        self.parameter = parameter  # the template's one parameter: CODE (sign-in), AMOUNT (alert)

    async def send_code(self, phone: str, code: str, text: str) -> None:
        body = orjson.dumps({"mobile": national(phone), "templateId": self.template,
                             "parameters": [{"name": self.parameter, "value": code}]})
        status, answer = await fetch_json(self.name, tornado.httpclient.HTTPRequest(
            self.base + "/v1/send/verify", method="POST", body=body,
            headers={"X-API-KEY": self.api_key, "Content-Type": "application/json", "Accept": "application/json"},
            connect_timeout=min(5.0, self.timeout_s), request_timeout=self.timeout_s))
        if status != 200 or answer.get("status") != 1:
            raise SmsFailed(f"smsir: HTTP {status}, status {answer.get('status')!r}")
