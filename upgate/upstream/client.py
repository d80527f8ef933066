"""The upstream HTTP client: libcurl through tornado, persistent connections, HTTP/2 over TLS.

One `UpstreamClient` per process. Every call is a POST whose body arrives chunk by chunk
(`UpstreamCall.read`), so the gateway can relay a stream as it comes and notice silence
at once. Tornado's curl client has no cancel API; a call aborts its own libcurl transfer
through an XFERINFOFUNCTION that returns non-zero once the call is cancelled, and tornado
then frees the handle as for any failed transfer.

Failures map to three exceptions: nothing could be sent (UpstreamUnreachable, 503), no
byte before the silence limit (UpstreamTimeout, 504), and the transfer broke after the
request went out (UpstreamCut, 502 or a mid-stream error). `first_byte_at` tells whether
any body byte arrived.
"""

import asyncio
import time
from collections import deque

import pycurl
from tornado.curl_httpclient import CurlAsyncHTTPClient, CurlError
from tornado.httpclient import HTTPRequest
from tornado.httputil import HTTPHeaders
from tornado.ioloop import IOLoop

from upgate import __version__

# libcurl errors that mean the request never reached the provider
_UNREACHABLE = frozenset((
    pycurl.E_COULDNT_RESOLVE_PROXY, pycurl.E_COULDNT_RESOLVE_HOST, pycurl.E_COULDNT_CONNECT,
    pycurl.E_OPERATION_TIMEDOUT,  # there is no transfer timeout, so this is the connect timeout
    pycurl.E_SSL_CONNECT_ERROR, pycurl.E_PEER_FAILED_VERIFICATION,
))
_HTTP2 = getattr(pycurl, "CURL_HTTP_VERSION_2TLS", None)  # h2 for https, 1.1 for plain http
# libcurl gives every easy handle a 64 KB upload buffer, kept for the handle's life: with a
# thousand streams open that was a third of the process's memory. Request bodies are sent
# once; 16 KB (libcurl's minimum) pieces cost nothing measurable.
_UPLOAD_BUFFER = 16 * 1024
_FIRST_HANDLES = 32
_USER_AGENT = f"upgate/{__version__}"


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


class _Abort(Exception):
    """Raised from prepare_curl_callback for a call cancelled while it was still queued."""


class UpstreamCall:
    """One POST in flight. Single consumer: await `start()`, then `read()` or `body()`."""

    __slots__ = ("status", "headers", "first_byte_at", "_client", "_loop", "_chunks",
                 "_waiter", "_headers_done", "_done", "_error", "_cancelled", "_curl",
                 "_last", "_timer", "_silence_s")

    def __init__(self, client: "UpstreamClient", silence_s: float) -> None:
        self.status = 0
        self.headers = HTTPHeaders()
        self.first_byte_at: float | None = None
        self._client = client
        self._loop = asyncio.get_running_loop()
        self._chunks: deque[bytes] = deque()
        self._waiter: asyncio.Future | None = None
        self._headers_done = False
        self._done = False  # tornado reported the transfer finished (the handle is freed)
        self._error: UpstreamError | None = None
        self._cancelled = False  # read by libcurl's progress callback: non-zero aborts
        self._curl: pycurl.Curl | None = None
        self._silence_s = silence_s
        self._last = self._loop.time()
        # One timer per call, re-armed only when it fires: cheaper than moving it per chunk.
        self._timer: asyncio.TimerHandle | None = self._loop.call_later(silence_s, self._on_silence)

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

    async def body(self) -> bytes:
        """The rest of the body at once (error bodies, non-stream responses)."""
        parts = []
        while (chunk := await self.read()) is not None:
            parts.append(chunk)
        return b"".join(parts)

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

    # -- tornado's and libcurl's side ---------------------------------------------------

    def _prepare_curl(self, curl: pycurl.Curl) -> None:
        if self._cancelled:
            raise _Abort()  # tornado frees the handle and reports this as the result
        self._curl = curl
        # tornado parses every header line into this (synchronously, before our callback for the
        # same line runs), so it is complete when the blank line reaches _on_header
        self.headers = curl.info["headers"]
        # Tornado turns libcurl's trace on when its logger is at DEBUG: that would log every
        # request body (prompts) and header (the provider key). Never, whatever the log level.
        curl.setopt(pycurl.VERBOSE, 0)
        curl.setopt(pycurl.TCP_NODELAY, 1)
        curl.setopt(pycurl.TCP_KEEPALIVE, 1)
        curl.setopt(pycurl.UPLOAD_BUFFERSIZE, _UPLOAD_BUFFER)
        if _HTTP2 is not None:
            try:
                curl.setopt(pycurl.HTTP_VERSION, _HTTP2)
            except pycurl.error:
                pass  # libcurl built without HTTP/2: HTTP/1.1 keep-alive it is
        curl.setopt(pycurl.NOPROGRESS, 0)
        curl.setopt(pycurl.XFERINFOFUNCTION, self._progress)

    def _progress(self, _dltotal: int, _dlnow: int, _ultotal: int, _ulnow: int) -> int:
        return 1 if self._cancelled else 0

    def _on_header(self, line: str) -> None:
        self._last = self._loop.time()
        if self._headers_done:
            return  # trailers
        if line.startswith("HTTP/"):
            # a new status line (after 1xx responses) starts a fresh header block
            parts = line.split(None, 2)
            try:
                self.status = int(parts[1])
            except (IndexError, ValueError):
                self.status = 0
            return
        if self.status >= 200 and not line.rstrip("\r\n"):
            self._headers_done = True
            self._wake()

    def _on_chunk(self, chunk: bytes) -> None:
        if self._cancelled:
            return
        self._last = self._loop.time()
        if self.first_byte_at is None:
            self.first_byte_at = time.monotonic()  # not loop.time(): uvloop's is in whole ms
        self._chunks.append(chunk)
        self._wake()

    def _on_silence(self) -> None:
        self._timer = None
        if self._done or self._error is not None:
            return
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
        curl = self._curl
        if curl is not None and not self._done:
            # libcurl calls the progress function only when it runs the transfer; an idle
            # one must be woken. Resuming is harmless even for a handle tornado has
            # already recycled: its streaming buffer pauses again if it needs to.
            try:
                curl.pause(pycurl.PAUSE_CONT)
            except pycurl.error:
                pass
            self._client._kick()
        self._wake()

    def _on_done(self, future: asyncio.Future) -> None:
        self._client._calls.discard(self)
        self._done = True
        self._curl = None
        self._stop_timer()
        # always fetch the exception, so an aborted transfer logs no "never retrieved"
        exc = future.exception() if not future.cancelled() else asyncio.CancelledError()
        if self._error is None:
            if exc is not None:
                self._error = self._classify(exc)
            elif not self._headers_done:
                response = future.result()  # no header callback came (should not happen)
                self.status = response.code
                self.headers = response.headers
                self._headers_done = True
        self._wake()

    def _abandon(self) -> None:
        """The pool is closing under this call: its transfer will never report back."""
        if self._error is None:
            self._error = UpstreamCancelled("the upstream client was closed")
        self._done = True
        self._curl = None
        self._stop_timer()
        self._wake()

    def _classify(self, exc: BaseException) -> UpstreamError:
        if isinstance(exc, CurlError):
            if exc.errno in _UNREACHABLE and not self._headers_done:
                return UpstreamUnreachable(f"curl error {exc.errno}: {exc.message}")
            return UpstreamCut(f"curl error {exc.errno}: {exc.message}")
        if self._headers_done:
            return UpstreamCut(f"transfer failed: {exc!r}")
        return UpstreamUnreachable(f"request not sent: {exc!r}")

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class _CurlPool(CurlAsyncHTTPClient):
    """Tornado's curl client creates all `max_clients` easy handles up front (~7 KB each idle,
    far more once used) and queues every transfer past them. This one starts with a few and
    adds handles when transfers are waiting, up to `max_clients`, so a node can hold thousands
    of streams without paying for them while idle. (Leans on tornado's `_curls`, `_free_list`,
    `_requests` and `_curl_create`; tests/test_upstream_client.py would catch a change.)"""

    def initialize(self, max_clients: int = 10, **kwargs) -> None:  # type: ignore[override]
        super().initialize(max_clients=min(max_clients, _FIRST_HANDLES), **kwargs)
        self._max_handles = max_clients

    def _process_queue(self) -> None:
        need = min(len(self._requests) - len(self._free_list), self._max_handles - len(self._curls))
        for _ in range(need):
            curl = self._curl_create()
            self._curls.append(curl)
            self._free_list.append(curl)
        super()._process_queue()


class UpstreamClient:
    """The process's connection pool to providers (one libcurl multi handle per IOLoop)."""

    def __init__(self, max_clients: int = 10_000, silence_s: float = 120.0,
                 connect_timeout_s: float = 10.0) -> None:
        self.max_clients = max_clients
        self.silence_s = silence_s
        self.connect_timeout_s = connect_timeout_s
        self._http: CurlAsyncHTTPClient | None = None
        self._io_loop: IOLoop | None = None
        self._calls: set[UpstreamCall] = set()  # in flight, so close() can fail them

    def open(self, url: str, body: bytes, headers: dict[str, str]) -> UpstreamCall:
        """Start a POST now; the returned call yields its status, headers and body chunks."""
        http = self._client()
        call = UpstreamCall(self, self.silence_s)
        request = HTTPRequest(
            url, method="POST", body=body, headers=headers,
            connect_timeout=self.connect_timeout_s,
            request_timeout=0,  # no total limit: liveness is the silence timer's job
            follow_redirects=False, decompress_response=False, user_agent=_USER_AGENT,
            header_callback=call._on_header, streaming_callback=call._on_chunk,
            prepare_curl_callback=call._prepare_curl)
        self._calls.add(call)
        http.fetch(request, raise_error=False).add_done_callback(call._on_done)
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
            # Closing handles still in flight makes libcurl re-arm its timer from inside
            # close(); that callback would then find the multi handle gone.
            timeout = getattr(http, "_timeout", None)
            if timeout is not None:
                http.io_loop.remove_timeout(timeout)

    def _client(self) -> CurlAsyncHTTPClient:
        # A private instance rather than the AsyncHTTPClient() singleton: the singleton is
        # cached per IOLoop whatever `configure` says later, so anything that created the
        # simple client first would silently give us a pool that closes every connection.
        io_loop = IOLoop.current()
        if self._http is None or self._io_loop is not io_loop:
            self.close()  # a pool is bound to its loop: a new loop gets a new pool
            self._http = _CurlPool(force_instance=True, max_clients=self.max_clients)
            self._io_loop = io_loop
        return self._http

    def _kick(self) -> None:
        """Have libcurl run its transfers now, so a cancelled one sees its abort at once."""
        if self._http is not None:
            self._http._set_timeout(0)
