"""A webhook receiver for tests: a real HTTP server on loopback (its own thread) that records
every POST and answers as told: a status, a number of failures first, or a hang."""
from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import orjson

from tests.procs import free_port


class Receiver:
    def __init__(self):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/hook"
        self.arrived: list[str] = []  # ids of the POSTs that were held (hang): never answered in time
        self.received: list[dict] = []  # every other POST: {"headers", "body", "event", "status", "at"}
        self.lock = threading.Lock()
        self.status = 200
        self.fail_first = 0  # answer 500 to this many POSTs first
        self.hang_s = 0.0  # sleep this long before answering
        self.hang_first = 0  # ... only the first this many POSTs (0: all of them)
        self.down = False  # answer 503 to everything
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with receiver.lock:
                    hang = receiver.hang_s
                    if receiver.hang_first > 0:
                        receiver.hang_first -= 1
                        if receiver.hang_first == 0:
                            receiver.hang_s = 0.0
                    if receiver.down:
                        status = 503
                    elif receiver.fail_first > 0:
                        receiver.fail_first -= 1
                        status = 500
                    else:
                        status = receiver.status
                if hang:
                    with receiver.lock:
                        receiver.arrived.append(orjson.loads(body)["id"])
                    time.sleep(hang)  # the sender has given up or died by now: not counted
                else:
                    with receiver.lock:
                        receiver.received.append({"headers": dict(self.headers), "body": body,
                                                  "event": orjson.loads(body), "status": status,
                                                  "at": time.monotonic()})
                try:
                    self.send_response(status)
                    self.send_header("Content-Length", "2")
                    self.end_headers()
                    self.wfile.write(b"ok")
                except OSError:  # the sender gave up (timeout) before the answer
                    pass

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def accepted(self) -> list[dict]:
        """The events answered with a 2xx, in the order they arrived."""
        with self.lock:
            return [r["event"] for r in self.received if 200 <= r["status"] < 300]

    def attempts(self, event_id: str) -> int:
        with self.lock:
            return sum(1 for r in self.received if r["event"]["id"] == event_id)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
