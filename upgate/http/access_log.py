"""The access log: one JSON object a line on stdout, a line per request.

A request costs one orjson call and a list append. Lines are joined and handed to one
background thread every 0.1 s, so the event loop never waits on a slow reader of stdout, and
the logging module's per-record machinery (a LogRecord, a queue hop and a format per line:
~8% of the gateway's CPU at saturation) is not on the hot path. Lines never hold prompt or
response content or key material: a key is named by its display prefix.
"""
from __future__ import annotations

import asyncio
import sys
from concurrent.futures import ThreadPoolExecutor

import orjson

FLUSH_S = 0.1


class AccessLog:
    def __init__(self, stream=None):
        self._out = stream if stream is not None else sys.stdout.buffer
        self._lines: list[bytes] = []
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="upgate-access-log")
        self._timer: asyncio.TimerHandle | None = None

    def write(self, line: dict) -> None:
        self._lines.append(orjson.dumps(line, option=orjson.OPT_APPEND_NEWLINE))
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(FLUSH_S, self._flush)

    def _flush(self) -> None:
        self._timer = None
        if self._lines:
            batch, self._lines = b"".join(self._lines), []
            self._writer.submit(self._write, batch)

    def _write(self, data: bytes) -> None:
        try:
            self._out.write(data)
            self._out.flush()
        except (OSError, ValueError):  # stdout closed or gone: the log is best effort
            pass

    def close(self) -> None:
        """Write what is pending and stop the writer (node shutdown)."""
        if self._timer is not None:
            self._timer.cancel()
        self._flush()
        self._writer.shutdown(wait=True)
