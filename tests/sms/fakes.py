"""Loopback stand-ins for the SMS providers, answering as their documentation says:

- Kavenegar verify/lookup: GET /v1/{API_KEY}/verify/lookup.json?receptor&token&template →
  {"return": {"status": 200, "message": "تایید شد"}, "entries": [{"messageid", "status", …}]};
  a bad key is HTTP 401 with return.status 401, no credit 418, an unknown template 424.
- SMS.ir verify: POST /v1/send/verify with X-API-KEY and JSON {mobile, templateId, parameters:
  [{name, value}]} → {"status": 1, "message": "موفق", "data": {"messageId", "cost"}}; a bad key
  is HTTP 401 with status 0.

Each records what it was asked; `answer` switches what it says next ("ok", a refusal, "slow").
"""
from __future__ import annotations

import json
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class _Fake:
    API_KEY = "test-sms-key"

    def __init__(self):
        self.requests: list[dict] = []
        self.answer = "ok"
        self.slow_s = 3.0
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _reply(self, status: int, body: dict) -> None:
                data = json.dumps(body, ensure_ascii=False).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                fake.handle(self, None)

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                fake.handle(self, body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def handle(self, h, body) -> None:
        if self.answer == "slow":
            time.sleep(self.slow_s)
        self.reply(h, body)


class FakeKavenegar(_Fake):
    def reply(self, h, body) -> None:
        url = urllib.parse.urlsplit(h.path)
        parts = url.path.split("/")  # ['', 'v1', key, 'verify', 'lookup.json']
        query = dict(urllib.parse.parse_qsl(url.query))
        self.requests.append({"method": h.command, "path": url.path, "query": query})
        if h.command != "GET" or parts[3:] != ["verify", "lookup.json"]:
            return h._reply(404, {"return": {"status": 404, "message": "not found"}, "entries": None})
        if parts[2] != self.API_KEY:
            return h._reply(401, {"return": {"status": 401, "message": "کلید معتبر نیست"}, "entries": None})
        if self.answer == "no-credit":
            return h._reply(418, {"return": {"status": 418, "message": "اعتبار کافی نیست"}, "entries": None})
        h._reply(200, {"return": {"status": 200, "message": "تایید شد"},
                       "entries": [{"messageid": 8792343, "message": query.get("token"), "status": 5,
                                    "statustext": "ارسال به مخابرات", "sender": "10004346",
                                    "receptor": query.get("receptor"), "date": 1356619709, "cost": 120}]})


class FakeSmsIr(_Fake):
    def reply(self, h, body) -> None:
        try:
            payload = json.loads(body or b"null")
        except ValueError:
            payload = None
        self.requests.append({"method": h.command, "path": h.path, "headers": {k.lower(): v for k, v in h.headers.items()}, "json": payload})
        if h.command != "POST" or h.path != "/v1/send/verify":
            return h._reply(404, {"status": 0, "message": "not found", "data": None})
        if h.headers.get("X-API-KEY") != self.API_KEY:
            return h._reply(401, {"status": 0, "message": "کلید وب سرویس نامعتبر است", "data": None})
        if self.answer == "no-credit":
            return h._reply(400, {"status": 12, "message": "اعتبار کافی نیست", "data": None})
        h._reply(200, {"status": 1, "message": "موفق", "data": {"messageId": 89545112, "cost": 1.0}})
