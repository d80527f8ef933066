"""The upstream HTTP client: libcurl on tornado's IOLoop, persistent connections, HTTP/2 over TLS.

One `UpstreamClient` per process. Every call is a POST whose body arrives chunk by chunk
(`UpstreamCall.read`), so the gateway can relay a stream as it comes and notice silence
at once. The transfers run in a `CurlPool` (curl_pool.py), which calls the call's header
and write callbacks straight from libcurl and aborts a cancelled call's transfer at once.

Failures map to three exceptions: nothing could be sent (UpstreamUnreachable, 503), no
byte before the silence limit (UpstreamTimeout, 504), and the transfer broke after the
request went out (UpstreamCut, 502 or a mid-stream error). `first_byte_at` tells whether
any body byte arrived.
"""

import asyncio
import logging
import time
from collections import deque

import pycurl
from tornado.httputil import HTTPHeaders
from tornado.ioloop import IOLoop

from upgate import __version__
from upgate.upstream.curl_pool import CurlPool

# libcurl errors that mean the request never reached the provider
_UNREACHABLE = frozenset((
    pycurl.E_COULDNT_RESOLVE_PROXY, pycurl.E_COULDNT_RESOLVE_HOST, pycurl.E_COULDNT_CONNECT,
    pycurl.E_OPERATION_TIMEDOUT,  # there is no transfer timeout, so this is the connect timeout
    pycurl.E_SSL_CONNECT_ERROR, pycurl.E_PEER_FAILED_VERIFICATION,
))
# A response body past this is refused (a broken or hostile provider must not fill memory).
_MAX_BODY = 100 * 1024 * 1024
_USER_AGENT = f"upgate/{__version__}"

log = logging.getLogger("upgate")


class UpstreamError(Exception):
    """Base of every failure of an upstream call (HTTP error statuses are not failures)."""


class UpstreamUnreachable(UpstreamError):
    """DNS, connect or TLS handshake failed: the request never reached the provider."""


class UpstreamTimeout(UpstreamError):
    """The provider sent no body byte within the silence limit (504 upstream_timeout)."""


class UpstreamCut(UpstreamError):
    """The transfer broke after the request was sent: closed, reset, or silent after the
    first body byte. `first_byte_at is None` on the call means nothing of the body came."""


class UpstreamCancelled(UpstreamCut):
    """The gateway cancelled the call itself (its client went away)."""


class UpstreamCall:
    """One POST in flight. Single consumer: await `start()`, then `read()` or `body()`."""

    __slots__ = ("status", "first_byte_at", "_client", "_loop", "_chunks", "_header_lines",
                 "_headers", "_received", "_waiter", "_headers_done", "_done", "_error",
                 "_cancelled", "_curl", "_last", "_timer", "_silence_s", "_consumer", "_held", "_paused")

    def __init__(self, client: "UpstreamClient", silence_s: float) -> None:
        self.status = 0
        self.first_byte_at: float | None = None
        self._client = client
        self._loop = asyncio.get_running_loop()
        self._chunks: deque[bytes] = deque()
        self._header_lines: list[bytes] = []  # parsed only if someone asks for `headers`
        self._headers: HTTPHeaders | None = None
        self._received = 0
        self._waiter: asyncio.Future | None = None
        self._headers_done = False
        self._done = False  # the pool is done with the transfer (its handle is free)
        self._error: UpstreamError | None = None
        self._cancelled = False
        self._curl: pycurl.Curl | None = None
        self._silence_s = silence_s
        self._consumer = None  # relay_to()
        self._held = False  # hold(): the next chunk pauses the transfer
        self._paused = False  # libcurl keeps that chunk until release()
        self._last = self._loop.time()
        # One timer per call, re-armed only when it fires: cheaper than moving it per chunk.
        self._timer: asyncio.TimerHandle | None = self._loop.call_later(silence_s, self._on_silence)

    @property
    def headers(self) -> HTTPHeaders:
        """The response's headers (the final block, after any 1xx)."""
        if self._headers is None:
            self._headers = HTTPHeaders()
            for line in self._header_lines:
                self._headers.parse_line(line.decode("latin-1").rstrip("\r\n"))
        return self._headers

    # -- the consumer's side ------------------------------------------------------------

    async def start(self) -> None:
        """Return once the status line and headers are in; raise on failure before that."""
        while not self._headers_done:
            if self._error is not None:
                raise self._error
            if self._done:
                raise UpstreamCut("the response ended before its headers")
            await self._wait()

    async def read(self) -> bytes | None:
        """The next raw body chunk as it arrived; None at a clean end."""
        while True:
            if self._chunks:
                return self._chunks.popleft()
            if self._error is not None:
                raise self._error
            if self._done:
                return None
            await self._wait()

    def relay_to(self, consumer) -> None:
        """Hand every body chunk to `consumer(chunk)` as libcurl delivers it, inside its write
        callback, instead of queueing it for read(); chunks already queued go first. The
        consumer returns True to wake the task in wait(). A stream relayed this way costs no
        task wake per event (the relay's consumer writes plain events to its client itself)."""
        self._consumer = consumer
        while self._chunks:
            if self._relay(self._chunks.popleft()) is None:
                self._chunks.clear()
                self._fail(UpstreamCut("the relay failed"))
                return

    async def wait(self) -> None:
        """With a consumer: return when it asks for the task, or the transfer is over (see
        `over`); never raises."""
        if not self.over:
            await self._wait()

    @property
    def over(self) -> bool:
        return self._done or self._error is not None

    @property
    def error(self) -> "UpstreamError | None":
        return self._error

    async def body(self) -> bytes:
        """The rest of the body at once (error bodies, non-stream responses)."""
        parts = []
        while (chunk := await self.read()) is not None:
            parts.append(chunk)
        return b"".join(parts)

    def hold(self) -> None:
        """Backpressure: the consumer has enough for now. The next chunk pauses the transfer
        (libcurl keeps it, and stops reading the provider's socket) until `release()`, so a
        client that reads slowly leaves the provider's output in the provider's buffers, not
        in this process. Silence is not counted while held."""
        self._held = True

    def release(self) -> None:
        """The consumer has room again: resume a transfer `hold()` paused (its kept chunk may
        be delivered at once, inside this call)."""
        self._held = False
        if not self._paused:
            return
        self._paused = False
        self._last = self._loop.time()
        if self._curl is not None and not self._done and not self._cancelled:
            try:
                self._curl.pause(pycurl.PAUSE_CONT)
            except pycurl.error as e:
                self._fail(UpstreamCut(f"the transfer could not resume: {e}"))

    def nudge(self) -> None:
        """Wake the consumer's task in wait() without ending the transfer."""
        self._wake()

    def cancel(self) -> None:
        """Stop the transfer now; idempotent, and a no-op once the transfer is over."""
        if self._done or self._cancelled:
            return
        self._chunks.clear()
        self._fail(UpstreamCancelled("cancelled by the gateway"))

    async def _wait(self) -> None:
        self._waiter = self._loop.create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # -- the pool's side (libcurl's callbacks run inside its socket_action) ----------------

    def _on_header(self, line: bytes) -> None:
        self._last = self._loop.time()
        if self._headers_done:
            return  # trailers
        if line.startswith(b"HTTP/"):
            # a new status line (after 1xx responses) starts a fresh header block
            self._header_lines.clear()
            parts = line.split(None, 2)
            try:
                self.status = int(parts[1])
            except (IndexError, ValueError):
                self.status = 0
            return
        if line in (b"\r\n", b"\n"):
            if self.status >= 200:
                self._headers_done = True
                self._wake()
            return
        self._header_lines.append(line)

    def _on_chunk(self, chunk: bytes) -> int | None:
        if self._cancelled:
            return 0  # libcurl ends the transfer (the pool removes it first where it can)
        if self._held:
            self._paused = True
            return pycurl.WRITEFUNC_PAUSE  # not taken: libcurl delivers it again on release()
        self._received += len(chunk)
        if self._received > _MAX_BODY:
            self._error = UpstreamCut(f"the response passed {_MAX_BODY} bytes")
            return 0
        self._last = self._loop.time()
        if self.first_byte_at is None:
            self.first_byte_at = time.monotonic()  # not loop.time(): uvloop's is in whole ms
        if self._consumer is None:
            self._chunks.append(chunk)
            self._wake()
        else:
            wake = self._relay(chunk)
            if wake is None:
                return 0  # libcurl ends the transfer
            if wake:
                self._wake()
        return None

    def _relay(self, chunk: bytes) -> bool | None:
        """The consumer's answer for `chunk`; None when it raised (a bug of the relay's: the
        transfer ends as a cut rather than the error going unseen)."""
        try:
            return bool(self._consumer(chunk))
        except Exception:
            log.exception("relaying an upstream chunk failed")
            if self._error is None:
                self._error = UpstreamCut("the relay failed")
            return None

    def _on_silence(self) -> None:
        self._timer = None
        if self._done or self._error is not None:
            return
        if self._held or self._paused:  # the silence is ours (backpressure), not the provider's
            self._last = self._loop.time()
        idle = self._loop.time() - self._last
        if idle < self._silence_s:
            self._timer = self._loop.call_later(self._silence_s - idle, self._on_silence)
            return
        if self.first_byte_at is None:
            self._fail(UpstreamTimeout(f"no byte from upstream in {self._silence_s:g} s"))
        else:
            self._fail(UpstreamCut(f"upstream went silent for {self._silence_s:g} s mid-body"))

    def _fail(self, error: UpstreamError) -> None:
        """Abort the transfer; `error` is what the consumer sees after any queued chunks."""
        if self._error is None:
            self._error = error
        self._stop_timer()
        self._cancelled = True
        if self._curl is not None and not self._done:
            self._client._abort(self._curl)
        self._wake()

    def _finished(self, errno: int, message: str) -> None:
        if self._done:
            return
        self._client._calls.discard(self)
        self._done = True
        self._curl = None
        self._stop_timer()
        if self._error is None:
            if errno:
                self._error = self._classify(errno, message)
            elif not self._headers_done:
                self._headers_done = True  # a complete transfer without a blank line: odd
        self._wake()

    def _abandon(self) -> None:
        """The pool is closing under this call: its transfer will never report back."""
        if self._error is None:
            self._error = UpstreamCancelled("the upstream client was closed")
        self._finished(0, "")

    def _classify(self, errno: int, message: str) -> UpstreamError:
        if errno in _UNREACHABLE and not self._headers_done:
            return UpstreamUnreachable(f"curl error {errno}: {message}")
        return UpstreamCut(f"curl error {errno}: {message}")

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class UpstreamClient:
    """The process's connection pool to providers (one libcurl multi handle per IOLoop)."""

    def __init__(self, max_clients: int = 10_000, silence_s: float = 120.0,
                 connect_timeout_s: float = 10.0) -> None:
        self.max_clients = max_clients
        self.silence_s = silence_s
        self.connect_timeout_s = connect_timeout_s
        self._http: CurlPool | None = None
        self._io_loop: IOLoop | None = None
        self._calls: set[UpstreamCall] = set()  # in flight, so close() can fail them

    def open(self, url: str, body: bytes, headers: dict[str, str]) -> UpstreamCall:
        """Start a POST now; the returned call yields its status, headers and body chunks."""
        call = UpstreamCall(self, self.silence_s)
        self._client().start(call, url, body, headers)
        self._calls.add(call)
        return call

    def close(self) -> None:
        """Close every pooled connection (shutdown, tests); calls in flight fail at once."""
        for call in list(self._calls):
            call._abandon()
        self._calls.clear()
        http = self._http
        if http is not None:
            self._http = None
            self._io_loop = None
            http.close()

    def _client(self) -> CurlPool:
        # A private instance rather than the AsyncHTTPClient() singleton: the singleton is
        # cached per IOLoop whatever `configure` says later, so anything that created the
        # simple client first would silently give us a pool that closes every connection.
        io_loop = IOLoop.current()
        if self._http is None or self._io_loop is not io_loop:
            self.close()  # a pool is bound to its loop: a new loop gets a new pool
            self._http = CurlPool(force_instance=True, max_clients=self.max_clients,
                                  connect_timeout_s=self.connect_timeout_s,
                                  user_agent=_USER_AGENT)
            self._io_loop = io_loop
        return self._http

    def _abort(self, curl: pycurl.Curl) -> None:
        if self._http is not None:
            self._http.abort(curl)
