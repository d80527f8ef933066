"""A small HTTP/1.1 keep-alive load generator on asyncio protocols (run it under uvloop).

Requests are pre-serialized bytes; responses are parsed just enough to know where they end
(status line, Content-Length or chunked framing) and, for SSE, when each `data:` event
arrived. Every time is `time.perf_counter_ns()`. No HTTP library is involved, so the
client costs a few tens of microseconds per request and is not what the benchmark measures.

Every phase is bounded twice: by a request count or a duration, and by a hard deadline
after which whatever is still open is abandoned and reported as a timeout.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

now_ns = time.perf_counter_ns
CONNECT_BATCH = 100  # connections opened at once (the gateway's listen backlog is 128)


def build_request(path: str, body: bytes, key: str | None = None, host: str = "127.0.0.1") -> bytes:
    """One POST, ready to write: keep-alive, Content-Length, optional bearer key."""
    head = [f"POST {path} HTTP/1.1", f"Host: {host}", "Content-Type: application/json",
            f"Content-Length: {len(body)}"]
    if key:
        head.append(f"Authorization: Bearer {key}")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


class ProtocolError(Exception):
    """The server's answer could not be framed."""


@dataclass
class Reply:
    """One finished exchange; times are perf_counter_ns."""

    status: int
    sent: int
    head: int  # status line and headers complete
    end: int
    events: list[int] | None = None  # arrival time of each SSE `data:` event
    body: bytes = b""  # kept only for non-200 answers (diagnostics)


class Conn(asyncio.Protocol):
    """One keep-alive connection, one exchange at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.waiter: asyncio.Future | None = None
        self.lost = False
        self._reset()

    def _reset(self) -> None:
        self.state = 0  # 0 head, 1 content-length body, 2 chunked body
        self.status = 0
        self.remaining = 0
        self.chunk_left = -1  # bytes of the current chunk still due (+2 for its CRLF)
        self.sent = self.head = 0
        self.events: list[int] | None = None
        self.sse = False
        self.on_first = None  # called once, at the first SSE event
        self.keep = bytearray()

    # -- asyncio.Protocol
    def connection_made(self, transport) -> None:
        self.transport = transport

    def connection_lost(self, exc) -> None:
        self.lost = True
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(ConnectionError("connection closed mid-response"))

    def data_received(self, data: bytes) -> None:
        t = now_ns()
        try:
            self.buf += data
            self._parse(t)
        except Exception as e:  # framing error: fail this exchange, drop the connection
            if self.waiter is not None and not self.waiter.done():
                self.waiter.set_exception(ProtocolError(str(e)))
            self.transport.close()

    # -- one exchange
    def request(self, payload: bytes, sse: bool = False, on_first=None) -> asyncio.Future:
        self._reset()
        self.sse = sse
        self.on_first = on_first
        self.events = [] if sse else None
        self.waiter = asyncio.get_running_loop().create_future()
        self.sent = now_ns()
        self.transport.write(payload)
        return self.waiter

    def _parse(self, t: int) -> None:
        buf = self.buf
        if self.state == 0:
            i = buf.find(b"\r\n\r\n")
            if i < 0:
                return
            head = bytes(buf[:i]).lower()
            del buf[: i + 4]
            self.status = int(head[9:12])
            self.head = t
            if b"\r\ntransfer-encoding: chunked" in head:
                self.state = 2
            else:
                j = head.find(b"\r\ncontent-length:")
                if j < 0:
                    raise ProtocolError("neither Content-Length nor chunked")
                k = head.find(b"\r\n", j + 2)
                self.remaining = int(head[j + 17: k if k > 0 else len(head)])
                self.state = 1
        if self.state == 1:
            if len(buf) < self.remaining:
                return
            body = bytes(buf[: self.remaining])
            del buf[: self.remaining]
            if self.sse:
                self._events(body, t)
            if self.status != 200:
                self.keep += body
            return self._done(t)
        while True:  # chunked
            if self.chunk_left < 0:
                i = buf.find(b"\r\n")
                if i < 0:
                    return
                size = int(bytes(buf[:i]).split(b";")[0], 16)
                del buf[: i + 2]
                if size == 0:
                    self.chunk_left = -2  # the final CRLF (no trailers expected)
                else:
                    self.chunk_left = size + 2
            if self.chunk_left == -2:
                if len(buf) < 2:
                    return
                del buf[:2]
                return self._done(t)
            if len(buf) < self.chunk_left:
                return
            payload = bytes(buf[: self.chunk_left - 2])
            del buf[: self.chunk_left]
            self.chunk_left = -1
            if self.sse:
                self._events(payload, t)
            if self.status != 200 and len(self.keep) < 2000:
                self.keep += payload

    def _events(self, payload: bytes, t: int) -> None:
        n = payload.count(b"data:")
        if n:
            if not self.events and self.on_first is not None:
                self.on_first()
            self.events.extend([t] * n)

    def _done(self, t: int) -> None:
        reply = Reply(self.status, self.sent, self.head, t, self.events, bytes(self.keep))
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(reply)


async def connect(host: str, port: int) -> Conn:
    _, conn = await asyncio.get_running_loop().create_connection(Conn, host, port)
    return conn


async def connect_many(host: str, port: int, n: int) -> list[Conn]:
    """n connections, opened in batches so no SYN is dropped by a short listen backlog."""
    conns: list[Conn] = []
    while len(conns) < n:
        batch = min(CONNECT_BATCH, n - len(conns))
        conns += await asyncio.gather(*(connect(host, port) for _ in range(batch)))
    return conns


def close_all(conns) -> None:
    for c in conns:
        if c.transport is not None:
            c.transport.close()


@dataclass
class Tally:
    """What a phase observed: latencies of the 200s, counts of everything else."""

    latencies_ns: list[int] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    sample_error: str = ""
    elapsed_s: float = 0.0

    def add(self, reply: Reply, start: int | None = None) -> None:
        self.statuses[reply.status] = self.statuses.get(reply.status, 0) + 1
        if reply.status == 200:
            self.latencies_ns.append(reply.end - (start if start is not None else reply.sent))
        elif not self.sample_error:
            self.sample_error = f"{reply.status}: {reply.body[:300].decode(errors='replace')}"

    def fail(self, exc: BaseException) -> None:
        name = type(exc).__name__
        self.errors[name] = self.errors.get(name, 0) + 1
        if not self.sample_error:
            self.sample_error = f"{name}: {exc}"

    @property
    def ok(self) -> int:
        return self.statuses.get(200, 0)


async def _exchange(conn: Conn, payload: bytes, timeout_s: float, sse: bool = False) -> Reply:
    return await asyncio.wait_for(conn.request(payload, sse), timeout_s)


async def sequential(host: str, port: int, payloads: list[bytes], count: int,
                     timeout_s: float = 10.0) -> Tally:
    """Concurrency 1: `count` requests one after another on one connection."""
    tally = Tally()
    conn = await connect(host, port)
    t0 = now_ns()
    try:
        for i in range(count):
            if conn.lost:
                conn = await connect(host, port)
            try:
                tally.add(await _exchange(conn, payloads[i % len(payloads)], timeout_s))
            except (asyncio.TimeoutError, ConnectionError, ProtocolError) as e:
                tally.fail(e)
                conn.transport.close()
                conn = await connect(host, port)
    finally:
        conn.transport.close()
    tally.elapsed_s = (now_ns() - t0) / 1e9
    return tally


async def closed_loop(host: str, port: int, payloads: list[bytes], concurrency: int,
                      duration_s: float, timeout_s: float = 10.0) -> Tally:
    """`concurrency` connections, each sending its next request as soon as the last ends."""
    tally = Tally()
    conns = await connect_many(host, port, concurrency)
    t0 = now_ns()
    stop_at = t0 + int(duration_s * 1e9)

    async def worker(w: int) -> None:
        conn = conns[w]
        i = w
        while now_ns() < stop_at:
            try:
                tally.add(await _exchange(conn, payloads[i % len(payloads)], timeout_s))
            except (asyncio.TimeoutError, ConnectionError, ProtocolError) as e:
                tally.fail(e)
                conn.transport.close()
                conn = conns[w] = await connect(host, port)
            i += concurrency

    try:
        await asyncio.wait_for(asyncio.gather(*(worker(w) for w in range(concurrency))),
                               duration_s + timeout_s + 5)
    finally:
        close_all(conns)
    tally.elapsed_s = (now_ns() - t0) / 1e9
    return tally


async def open_loop(host: str, port: int, payloads: list[bytes], rate: float, duration_s: float,
                    max_conns: int = 256, timeout_s: float = 10.0) -> tuple[Tally, list[int]]:
    """Requests started at a fixed rate whatever the answers do (an idle keep-alive connection
    is reused, else a new one is opened, up to max_conns). Latency runs from the actual send;
    the second result is how late each send was against its schedule (ns)."""
    tally = Tally()
    lags: list[int] = []
    idle: list[Conn] = await connect_many(host, port, min(16, max_conns))
    opened = len(idle)
    tasks = set()
    n = int(rate * duration_s)
    t0 = now_ns()
    interval = 1e9 / rate

    async def one(i: int) -> None:
        nonlocal opened
        conn = idle.pop() if idle else None
        if conn is None:
            if opened >= max_conns:
                tally.fail(OverflowError("no free connection"))
                return
            opened += 1
            conn = await connect(host, port)
        try:
            tally.add(await _exchange(conn, payloads[i % len(payloads)], timeout_s))
            idle.append(conn)
        except (asyncio.TimeoutError, ConnectionError, ProtocolError) as e:
            tally.fail(e)
            conn.transport.close()
            opened -= 1

    try:
        for i in range(n):
            due = t0 + int(i * interval)
            delay = (due - now_ns()) / 1e9
            if delay > 0:
                await asyncio.sleep(delay)
            lags.append(max(0, now_ns() - due))
            task = asyncio.ensure_future(one(i))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        if tasks:
            await asyncio.wait(tasks, timeout=timeout_s + 5)
    finally:
        for task in tasks:
            task.cancel()
        close_all(idle)
    tally.elapsed_s = (now_ns() - t0) / 1e9
    return tally, lags


@dataclass
class StreamTally:
    """A batch of concurrent SSE streams."""

    n: int
    ok: int = 0
    statuses: dict[int, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    sample_error: str = ""
    ttfb_ns: list[int] = field(default_factory=list)  # send → first `data:` event
    gaps_ns: list[int] = field(default_factory=list)  # between consecutive events of a stream
    gaps_steady_ns: list[int] = field(default_factory=list)  # from each stream's third event on
    ttfb_fresh_ns: list[int] = field(default_factory=list)  # first stream of a connection
    ttfb_reused_ns: list[int] = field(default_factory=list)  # later streams on a kept-alive one
    gaps_reused_ns: list[int] = field(default_factory=list)
    max_gap_ns: list[int] = field(default_factory=list)  # per stream
    events: list[int] = field(default_factory=list)  # per stream
    spans: list[tuple[int, int]] = field(default_factory=list)  # (sent, end) per stream
    flowing: list[tuple[int, int]] = field(default_factory=list)  # (first event, end) per stream
    peak_open: int = 0  # requests in flight at once (sent, not yet ended)
    peak_flowing: int = 0  # streams receiving events at once (first event seen, not yet ended)
    elapsed_s: float = 0.0


async def streams(host: str, port: int, payloads: list[bytes], n: int, start_over_s: float,
                  timeout_s: float, while_open=None, per_conn: int = 1) -> StreamTally:
    """Open n connections, then start SSE requests on them, spread evenly over start_over_s:
    `per_conn` streams one after another on each keep-alive connection (what an SDK client
    with a connection pool does). Wait at most timeout_s for all of them. `while_open`, an
    async callable, runs once every connection has received its first event (memory sampling)."""
    tally = StreamTally(n=n * per_conn)
    conns = await connect_many(host, port, n)
    first_seen = 0
    all_open = asyncio.Event()
    loop = asyncio.get_running_loop()

    def seen() -> None:
        nonlocal first_seen
        first_seen += 1
        if first_seen == n:
            all_open.set()

    async def one(i: int) -> None:
        await asyncio.sleep(start_over_s * i / n)
        for k in range(per_conn):
            if not await _stream(conns[i], payloads[(i + k * n) % len(payloads)], reused=k > 0,
                                 on_first=seen if k == 0 else None):
                return

    async def _stream(conn: Conn, payload: bytes, reused: bool, on_first) -> bool:
        fut = conn.request(payload, sse=True, on_first=on_first)
        try:
            reply = await fut
        except (ConnectionError, ProtocolError) as e:
            name = type(e).__name__
            tally.errors[name] = tally.errors.get(name, 0) + 1
            tally.sample_error = tally.sample_error or f"{name}: {e}"
            if on_first is not None and not conn.events:
                seen()
            return False
        tally.statuses[reply.status] = tally.statuses.get(reply.status, 0) + 1
        if on_first is not None and not reply.events:
            seen()  # an error answer: it will never send an event
        if reply.status != 200 or not reply.events:
            tally.sample_error = tally.sample_error or \
                f"{reply.status}: {reply.body[:300].decode(errors='replace')}"
            return True
        tally.ok += 1
        ev = reply.events
        gaps = [b - a for a, b in zip(ev, ev[1:])]
        tally.ttfb_ns.append(ev[0] - reply.sent)
        tally.gaps_ns.extend(gaps)
        tally.gaps_steady_ns.extend(gaps[2:])
        if reused:
            tally.ttfb_reused_ns.append(ev[0] - reply.sent)
            tally.gaps_reused_ns.extend(gaps)
        else:
            tally.ttfb_fresh_ns.append(ev[0] - reply.sent)
        tally.max_gap_ns.append(max(gaps) if gaps else 0)
        tally.events.append(len(ev))
        tally.spans.append((reply.sent, reply.end))
        tally.flowing.append((ev[0], reply.end))
        return True

    async def sample() -> None:
        await all_open.wait()
        if while_open is not None:
            await while_open()

    t0 = now_ns()
    tasks = [loop.create_task(one(i)) for i in range(n)]
    sampler = loop.create_task(sample())
    try:
        done, pending = await asyncio.wait(tasks, timeout=timeout_s)
        for task in pending:
            task.cancel()
            tally.errors["Timeout"] = tally.errors.get("Timeout", 0) + 1
    finally:
        if not sampler.done():
            sampler.cancel()
        close_all(conns)
    tally.elapsed_s = (now_ns() - t0) / 1e9
    tally.peak_open = peak_concurrency(tally.spans)
    tally.peak_flowing = peak_concurrency(tally.flowing)
    return tally


def peak_concurrency(spans: list[tuple[int, int]]) -> int:
    marks = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    peak = cur = 0
    for _, d in marks:
        cur += d
        peak = max(peak, cur)
    return peak
