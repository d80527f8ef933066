"""Helpers for the dashboard's tests: the SMS `log` driver's lines caught as the server writes
them (the code a customer would read on their phone), and an HTTP session that signs in the
way a browser does (GET the form for its XSRF cookie, POST the phone, POST the code)."""
from __future__ import annotations

import logging
import re
import threading
import time

import httpx
import orjson

XSRF_FIELD = re.compile(r'name="_xsrf" value="([^"]+)"')


def xsrf(html: str) -> str:
    return XSRF_FIELD.search(html).group(1)


class SmsLog(logging.Handler):
    """Every `{"event": "sms"}` line the log driver writes (logger upgate.sms)."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.lines: list[dict] = []
        self._cv = threading.Condition()
        self.logger = logging.getLogger("upgate.sms")

    def __enter__(self):
        self.logger.addHandler(self)
        self._level = self.logger.level
        self.logger.setLevel(logging.INFO)
        return self

    def __exit__(self, *exc):
        self.logger.removeHandler(self)
        self.logger.setLevel(self._level)

    def emit(self, record) -> None:
        line = orjson.loads(record.getMessage())
        with self._cv:
            self.lines.append(line)
            self._cv.notify_all()

    def code_for(self, phone: str, after: int = 0, timeout: float = 10) -> str:
        """The six digits of the newest message to `phone` among lines[after:]."""
        deadline = time.monotonic() + timeout
        with self._cv:
            while True:
                for line in reversed(self.lines[after:]):
                    if line["to"] == phone:
                        return re.search(r"[0-9]{6}", line["text"]).group(0)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no SMS to {phone}")
                self._cv.wait(left)


def ask_code(c: httpx.Client, phone: str, **headers) -> httpx.Response:
    form = c.get("/dashboard/login")
    return c.post("/dashboard/login", data={"phone": phone, "_xsrf": xsrf(form.text), "next": "/dashboard/"},
                  headers=headers)


def send_code(c: httpx.Client, phone: str, code: str, page: httpx.Response) -> httpx.Response:
    return c.post("/dashboard/login/verify", data={"phone": phone, "code": code, "_xsrf": xsrf(page.text),
                                                   "next": "/dashboard/"})


def signed_in(node, sms: SmsLog, phone: str, canonical: str | None = None, headers: dict | None = None) -> httpx.Client:
    c = httpx.Client(base_url=node.url, follow_redirects=False, timeout=30, headers=headers)
    seen = len(sms.lines)
    page = ask_code(c, phone)
    assert page.status_code == 200, page.text
    code = sms.code_for(canonical or phone, after=seen)
    r = send_code(c, canonical or phone, code, page)
    assert r.status_code == 303 and r.headers["location"] == "/dashboard/", r.text
    return c
