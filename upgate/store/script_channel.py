"""Every script call of a process, pipelined on one Redis connection.

redis-py's asyncio client gives each command a pooled connection of its own: take it from
the pool (a lock and a condition), write, await the reply under a per-command timeout,
give it back. At saturation that was ~15% of the gateway's CPU for two EVALSHAs per
request (bench/PROFILE.md). Redis answers the commands of one connection in order, so
the gateway's script calls can share one: a call packs its command (hiredis), queues a
future, and the commands queued in one loop turn go out in one write (a call on an
idle connection goes out at once); the transport
hands what it reads straight to a hiredis parser (this module's protocol replaces
redis-py's stream reader once connected), which resolves the futures in order. A connection then carries
many calls per system call each way, and a call costs one future.

Semantics stay those of a single command: an error reply raises the exception redis-py
would (ResponseError, NoScriptError, ...); a lost connection fails every call in flight
with ConnectionError and the next call reconnects (there are no retries: a script call
must never run twice); a reply later than `timeout_s` fails every call in flight with
TimeoutError and drops the connection, whose order can no longer be trusted. A caller
cancelled while waiting leaves its reply to be read and dropped, where redis-py has to
throw the whole connection away. The connection is opened by redis-py itself, so AUTH,
TLS, SELECT and the client's other options are the pool's.

While a reply is due, the loop polls rather than sleeps, until the oldest call in flight is
SPIN_S old. A reply takes ~100 µs; an idle CPU that goes to sleep and is woken for it costs
~40 µs more on a VM whose idle vCPUs halt without polling (this machine's guest_halt_poll_ns
is 0), twice per request. The spin ends when the last reply is in, so it costs at most the round
trip's own time. It is skipped while replies take longer than SPIN_S on average (a store
across a network, a loaded one): there it would burn the whole window and still sleep.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque

import hiredis
import redis.asyncio as aioredis
from redis._parsers.base import BaseParser
from redis.exceptions import ConnectionError, InvalidResponse, TimeoutError

SPIN_S = 0.0005
_clock = time.perf_counter


class _Link(asyncio.Protocol):
    """One connection's callbacks. A link the channel has dropped is ignored: its transport's
    last callbacks may arrive after a new connection took its place."""

    def __init__(self, channel: "ScriptChannel", conn) -> None:
        self.channel = channel
        self.conn = conn  # held while the transport is used: redis-py's Connection and asyncio's
        # StreamWriter each close the transport when they are collected
        self.transport: asyncio.Transport = conn._writer.transport
        self.parser = hiredis.Reader(protocolError=InvalidResponse, replyError=BaseParser.parse_error)

    def data_received(self, data: bytes) -> None:
        channel = self.channel
        if channel._link is not self:
            return
        parser, pending = self.parser, channel._pending
        now = _clock()
        try:
            parser.feed(data)
            while (reply := parser.gets()) is not False:
                future, sent = pending.popleft()
                channel.rtt += (now - sent - channel.rtt) / 8  # a moving average of round trips
                if future.done():
                    continue  # its caller was cancelled
                if isinstance(reply, Exception):
                    future.set_exception(reply)
                else:
                    future.set_result(reply)
        except Exception as e:  # a protocol error, or a reply nobody asked for
            channel._drop(ConnectionError(f"reading from the store: {e!r}"))

    def eof_received(self) -> bool:
        if self.channel._link is self:
            self.channel._drop(ConnectionError("Connection closed by server."))
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if self.channel._link is self:
            self.channel._drop(ConnectionError(f"Connection to the store lost: {exc or 'closed'}"))

    def close(self) -> None:
        self.transport.close()
        self.conn._writer = self.conn._reader = None  # closed: nothing left for their __del__


class ScriptChannel:
    def __init__(self, pool: aioredis.ConnectionPool, timeout_s: float) -> None:
        self._pool = pool  # only its connection class and options (auth, TLS, db)
        self._timeout_s = timeout_s
        self._link: _Link | None = None
        self._lock = asyncio.Lock()
        self._pending: deque[tuple[asyncio.Future, float]] = deque()  # in the order sent
        self._out: list[bytes] = []  # packed commands of this loop turn, not yet written
        self._flush_due = False
        self._watchdog: asyncio.TimerHandle | None = None
        self._spinning: asyncio.AbstractEventLoop | None = None  # the loop kept polling, if any
        self.rtt = 0.0  # seconds

    async def execute(self, *args):
        if self._link is None:
            await self._connect()
            if self._link is None:
                raise ConnectionError("the connection to the store was lost while opening")
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        packed = hiredis.pack_command(args)
        if self._pending or self._flush_due:
            # calls are in flight: more will come this loop turn, so write them all at its end
            self._out.append(packed)
            if not self._flush_due:
                self._flush_due = True
                loop.call_soon(self._flush)
        else:
            self._link.transport.write(packed)  # an idle connection: nothing to wait for
        now = _clock()
        self._pending.append((future, now))
        if self._watchdog is None:
            self._watchdog = loop.call_later(self._timeout_s, self._check)
        if self.rtt < SPIN_S and self._spinning is None:
            self._spinning = loop
            loop.call_soon(self._spin)
        return await future

    async def close(self) -> None:
        self._drop(ConnectionError("the store client was closed"))

    async def _connect(self) -> None:
        async with self._lock:
            if self._link is not None:
                return
            conn = self._pool.make_connection()
            await conn.connect()  # redis-py's handshake; raises its ConnectionError/TimeoutError
            link = self._link = _Link(self, conn)
            link.transport.set_protocol(link)  # from here on its bytes come to the link

    def _flush(self) -> None:
        self._flush_due = False
        out, self._out = self._out, []
        if out and self._link is not None:
            self._link.transport.write(b"".join(out))

    def _spin(self) -> None:
        """A callback that is always due keeps the loop polling its sockets without sleeping.
        (The loop is kept, not looked up: on Python 3.11 each lookup is a getpid() syscall.)"""
        pending = self._pending
        if pending and _clock() - pending[0][1] < SPIN_S:  # (a late reply: sleep till it comes)
            self._spinning.call_soon(self._spin)
        else:
            self._spinning = None

    def _check(self) -> None:
        self._watchdog = None
        if not self._pending:
            return
        late = _clock() - self._pending[0][1]
        if late >= self._timeout_s:
            self._drop(TimeoutError("Timeout reading from the store"))
        else:
            self._watchdog = asyncio.get_running_loop().call_later(self._timeout_s - late, self._check)

    def _drop(self, error: Exception) -> None:
        """Fail everything in flight and forget the connection; the next call opens a new one."""
        link, self._link = self._link, None
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        self._out.clear()
        pending, self._pending = self._pending, deque()
        for future, _sent in pending:
            if not future.done():
                future.set_exception(error)
        if link is not None:
            link.close()
