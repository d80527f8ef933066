"""The `log` driver: the message goes to the server's log as one JSON line, nothing is sent.

For the demo and for development only: `upgate serve` warns at start-up that codes are being
logged, since anyone who reads the log can sign in as anyone."""
from __future__ import annotations

import orjson

from upgate.sms.base import Sender, log


class LogSender(Sender):
    name = "log"

    async def send_code(self, phone: str, code: str, text: str) -> None:
        log.info("%s", orjson.dumps({"event": "sms", "to": phone, "text": text}).decode())
