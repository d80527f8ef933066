"""Every script call of a process, pipelined on one Redis connection.

redis-py's asyncio client gives each command a pooled connection of its own: take it from
the pool (a lock and a condition), write, await the reply under a per-command timeout,
give it back. At saturation that was ~15% of the gateway's CPU for two EVALSHAs per
request (bench/PROFILE.md). Redis answers the commands of one connection in order, so
the gateway's script calls can share one: a call packs its command (hiredis), queues a
future, and the commands queued in one loop turn go out in one write; one reader task
parses replies (hiredis) and resolves the futures in order. A connection then carries
many calls per system call each way, and a call costs one future.

Semantics stay those of a single command: an error reply raises the exception redis-py
would (NoScriptError, ResponseError, ...); a lost connection fails every call in flight
with ConnectionError and the next call reconnects (there are no retries: a script call
must never run twice); a reply later than `timeout_s` fails every call in flight with
TimeoutError and drops the connection, whose order can no longer be trusted. A caller
cancelled while waiting leaves its reply to be read and dropped, where redis-py has to
throw the whole connection away. The connection is opened by redis-py itself, so AUTH,
TLS, SELECT and the client's other options are the pool's.
"""

from __future__ import annotations

import asyncio
from collections import deque

import hiredis
import redis.asyncio as aioredis
from redis._parsers.base import BaseParser
from redis.exceptions import ConnectionError, InvalidResponse, TimeoutError


class ScriptChannel:
    def __init__(self, pool: aioredis.ConnectionPool, timeout_s: float) -> None:
        self._pool = pool  # only its connection class and options (auth, TLS, db)
        self._timeout_s = timeout_s
        self._conn = None  # a connected redis-py Connection
        self._reader_task: asyncio.Task | None = None
        self._lock = asyncio.Lock()
        self._pending: deque[tuple[asyncio.Future, float]] = deque()  # in the order sent
        self._out: list[bytes] = []  # packed commands of this loop turn, not yet written
        self._flush_due = False
        self._watchdog: asyncio.TimerHandle | None = None

    async def execute(self, *args):
        if self._conn is None:
            await self._connect()
            if self._conn is None:
                raise ConnectionError("the connection to the store was lost while opening")
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._pending.append((future, loop.time()))
        self._out.append(hiredis.pack_command(args))
        if not self._flush_due:
            self._flush_due = True
            loop.call_soon(self._flush)
        if self._watchdog is None:
            self._watchdog = loop.call_later(self._timeout_s, self._check)
        return await future

    async def close(self) -> None:
        self._drop(ConnectionError("the store client was closed"))

    async def _connect(self) -> None:
        async with self._lock:
            if self._conn is not None:
                return
            conn = self._pool.make_connection()
            await conn.connect()  # redis-py's handshake; raises its ConnectionError/TimeoutError
            self._conn = conn
            self._reader_task = asyncio.create_task(self._read(conn), name="upgate-script-channel")

    def _flush(self) -> None:
        self._flush_due = False
        out, self._out = self._out, []
        if out and self._conn is not None:
            self._conn._writer.write(b"".join(out))

    async def _read(self, conn) -> None:
        parser = hiredis.Reader(protocolError=InvalidResponse, replyError=BaseParser.parse_error)
        stream = conn._reader
        pending = self._pending
        try:
            while True:
                data = await stream.read(65536)
                if not data:
                    raise ConnectionError("Connection closed by server.")
                parser.feed(data)
                while (reply := parser.gets()) is not False:
                    future, _sent = pending.popleft()
                    if future.done():
                        continue  # its caller was cancelled
                    if isinstance(reply, Exception):
                        future.set_exception(reply)
                    else:
                        future.set_result(reply)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            if self._conn is conn:
                self._drop(e if isinstance(e, ConnectionError) else ConnectionError(f"reading from the store: {e!r}"))

    def _check(self) -> None:
        self._watchdog = None
        if not self._pending:
            return
        late = asyncio.get_running_loop().time() - self._pending[0][1]
        if late >= self._timeout_s:
            self._drop(TimeoutError("Timeout reading from the store"))
        else:
            self._watchdog = asyncio.get_running_loop().call_later(self._timeout_s - late, self._check)

    def _drop(self, error: Exception) -> None:
        """Fail everything in flight and forget the connection; the next call opens a new one."""
        conn, self._conn = self._conn, None
        task, self._reader_task = self._reader_task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        self._out.clear()
        pending, self._pending = self._pending, deque()
        for future, _sent in pending:
            if not future.done():
                future.set_exception(error)
        if conn is not None and conn._writer is not None:
            conn._writer.close()  # not redis-py's disconnect(): that awaits, and this may not
