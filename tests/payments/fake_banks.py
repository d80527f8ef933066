"""Loopback fakes of Zarinpal's v4 and Zibal's REST APIs, following their documented contracts
(request → authority/trackId, StartPay/start, verify with 100 then 101/201, unVerified,
inquiry, their error codes), so tests exercise the real drivers over real HTTP.

`pay(authority, amount=None)` is what the customer does on the bank page (optionally paying
another amount than asked: a tampered payment); `cancel` the Cancel button. Switches:
`delay_s` (every answer waits: a gateway timing out), `down` (every answer is a 503)."""
from __future__ import annotations

import json
import secrets
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.procs import free_port


class _Bank:
    merchant = ""

    def __init__(self):
        self.payments: dict[str, dict] = {}  # authority → {amount, state, order_id, ref_id}
        self.lock = threading.Lock()
        self.delay_s = 0.0
        self.down = False
        self.calls: list[tuple[str, dict]] = []
        self.port = free_port()
        bank = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                body = json.loads(raw or b"{}")
                bank.calls.append((self.path, body))
                if bank.delay_s:
                    time.sleep(bank.delay_s)
                if bank.down:
                    return self._send(503, {"message": "maintenance"})
                status, doc = bank.answer(self.path, body)
                self._send(status, doc)

            def _send(self, status, doc):
                data = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request, client_address):  # a client that gave up (timeout tests)
                pass

        self.server = Server(("127.0.0.1", self.port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.port}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    def pay(self, authority: str, amount: int | None = None) -> None:
        with self.lock:
            p = self.payments[authority]
            p["state"], p["ref_id"] = "paid", secrets.randbelow(10**9) + 1
            if amount is not None:
                p["paid_amount"] = amount

    def cancel(self, authority: str) -> None:
        with self.lock:
            self.payments[authority]["state"] = "cancelled"

    def verify_calls(self) -> int:
        return sum(1 for path, _ in self.calls if "verify" in path)


class FakeZarinpal(_Bank):
    merchant = "a1b2c3d4-0000-4000-8000-123456789abc"

    def answer(self, path: str, body: dict):
        if body.get("merchant_id") != self.merchant:
            return 401, {"data": [], "errors": {"code": -10, "message": "Terminal is not valid.", "validations": []}}
        if path == "/pg/v4/payment/request.json":
            if not isinstance(body.get("amount"), int) or body["amount"] < 1000 or not body.get("callback_url"):
                return 422, {"data": [], "errors": {"code": -9, "message": "The input params invalid, validation error.",
                                                    "validations": [{"amount": "invalid"}]}}
            authority = "A" + "0" * 10 + secrets.token_hex(13)
            with self.lock:
                self.payments[authority] = {"amount": body["amount"], "state": "pending",
                                            "order_id": (body.get("metadata") or {}).get("order_id")}
            return 200, {"data": {"code": 100, "message": "Success", "authority": authority,
                                  "fee_type": "Merchant", "fee": 100}, "errors": []}
        if path == "/pg/v4/payment/verify.json":
            with self.lock:
                p = self.payments.get(body.get("authority"))
                if p is None:
                    return 404, {"data": [], "errors": {"code": -54, "message": "Invalid authority.", "validations": []}}
                if p["state"] not in ("paid", "verified"):
                    return 400, {"data": [], "errors": {"code": -51, "message": "Session is not valid, session is not "
                                                        "active paid try.", "validations": []}}
                if body.get("amount") != p.get("paid_amount", p["amount"]) or body.get("amount") != p["amount"]:
                    return 400, {"data": [], "errors": {"code": -50, "message": "Session is not valid, amounts values "
                                                        "is not the same.", "validations": []}}
                code = 100 if p["state"] == "paid" else 101
                p["state"] = "verified"
            return 200, {"data": {"code": code, "message": "Verified" if code == 100 else "Verified before",
                                  "card_hash": "1EBE3EBEBE35C7EC0F8D6EE4F2F859107A87822CA179BC9528767EA7B5489B69",
                                  "card_pan": "502229******5995", "ref_id": p["ref_id"], "fee_type": "Merchant",
                                  "fee": 0}, "errors": []}
        if path == "/pg/v4/payment/unVerified.json":
            with self.lock:
                listed = [{"authority": a, "amount": p["amount"], "callback_url": "", "referer": "",
                           "date": "2026-11-25 20:00:00"} for a, p in self.payments.items() if p["state"] == "paid"]
            return 200, {"data": {"code": 100, "message": "Success", "authorities": listed}, "errors": []}
        return 404, {"data": [], "errors": {"code": -9, "message": "not found", "validations": []}}


class FakeZibal(_Bank):
    merchant = "zibal-test-merchant"

    def answer(self, path: str, body: dict):
        if body.get("merchant") != self.merchant:
            return 200, {"result": 102, "message": "merchant یافت نشد."}
        if path == "/v1/request":
            if not isinstance(body.get("amount"), int) or body["amount"] < 1000:
                return 200, {"result": 105, "message": "amount بایستی بزرگتر از 1,000 ریال باشد."}
            track = secrets.randbelow(10**12) + 10**12
            with self.lock:
                self.payments[str(track)] = {"amount": body["amount"], "state": "pending",
                                             "order_id": body.get("orderId")}
            return 200, {"trackId": track, "result": 100, "message": "success"}
        with self.lock:
            p = self.payments.get(str(body.get("trackId")))
            if p is None:
                return 200, {"result": 203, "message": "trackId نامعتبر می‌باشد."}
            paid = p.get("paid_amount", p["amount"])
            info = {"paidAt": "2026-11-25T20:00:00.000000", "cardNumber": "62741****44", "amount": paid,
                    "refNumber": p.get("ref_id"), "description": "", "orderId": p["order_id"]}
            if path == "/v1/verify":
                if p["state"] == "verified":
                    return 200, {"result": 201, "message": "قبلا تایید شده."}
                if p["state"] != "paid":
                    return 200, {"result": 202, "message": "سفارش پرداخت نشده یا ناموفق بوده است."}
                p["state"] = "verified"
                return 200, {**info, "status": 1, "result": 100, "message": "success"}
            if path == "/v1/inquiry":
                status = {"verified": 1, "paid": 2, "pending": -1, "cancelled": 3}[p["state"]]
                return 200, {**info, "status": status, "result": 100, "message": "success"}
        return 200, {"result": 404, "message": "not found"}
