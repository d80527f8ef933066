"""libcurl transfers on tornado's IOLoop, set up once per handle instead of once per request.

Tornado's CurlAsyncHTTPClient serves any request: per fetch it wraps the request in two
objects and a future, sets ~40 options on a handle it `reset()` after the previous
transfer, defers every header line and every body chunk through its own loop callback,
and builds an HTTPResponse with eight timing lookups. The profile put that at ~20% of
the gateway's CPU per request. The gateway sends one kind of request (a POST of bytes,
answer relayed as it arrives), so this pool keeps tornado's socket and timer wiring
(`_handle_socket`, `_handle_events`, `_handle_timeout`) and replaces the rest: handles
keep their fixed options for life, a transfer sets five (URL, headers, body, and its
call's header and write callbacks), libcurl calls those directly, and a cancel removes
the handle from the multi handle at once (tornado has no cancel; a progress callback on
every socket event polled for one).

Handles are created as transfers need them, up to `max_clients` (tornado makes all of
them up front), and a finished handle is closed rather than kept when more are idle than
busy, so a burst of thousands of streams does not hold its handles' buffers forever.
Connections live in the multi handle's cache, not in the easy handles, so closing a
handle keeps its kept-alive connection for the next transfer.
"""

from collections import deque

import pycurl
from tornado.curl_httpclient import CurlAsyncHTTPClient
from tornado.ioloop import IOLoop

_HTTP2 = getattr(pycurl, "CURL_HTTP_VERSION_2TLS", None)  # h2 for https, 1.1 for plain http
# libcurl gives every easy handle a 64 KB upload buffer, kept for the handle's life: with a
# thousand streams open that was a third of the process's memory. Request bodies are sent
# once; 16 KB (libcurl's minimum) pieces cost nothing measurable.
_UPLOAD_BUFFER = 16 * 1024
_FIRST_HANDLES = 32
# libcurl adds "Expect: 100-continue" to large POSTs (a round trip of delay, or a stall with
# servers that ignore it) and used to add "Pragma: no-cache": an empty value turns each off.
_FIXED_HEADERS = (b"Expect:", b"Pragma:")


_READ, _WRITE = IOLoop.READ, IOLoop.WRITE
_IN, _OUT = pycurl.CSELECT_IN, pycurl.CSELECT_OUT
_WANT = {pycurl.POLL_NONE: 0, pycurl.POLL_IN: _READ, pycurl.POLL_OUT: _WRITE,
         pycurl.POLL_INOUT: _READ | _WRITE, pycurl.POLL_REMOVE: 0}


class CurlPool(CurlAsyncHTTPClient):
    """Runs `call`s: objects with `_on_header(bytes)`, `_on_chunk(bytes)`, `_cancelled`, a
    `_curl` slot, and `_finished(errno, message)` (errno 0 for a complete transfer)."""

    def initialize(self, max_clients: int = 10, connect_timeout_s: float = 10.0,  # type: ignore[override]
                   user_agent: str = "") -> None:
        self._max_handles = max_clients
        self._connect_timeout_ms = int(connect_timeout_s * 1000)
        self._user_agent = user_agent
        self._queue: deque = deque()  # (call, url, body, header lines) waiting for a handle
        self._lines: dict[tuple, list[bytes]] = {}  # encoded header lines by headers
        super().initialize(max_clients=min(max_clients, _FIRST_HANDLES))
        self._curls = set(self._curls)  # handles come and go; tornado only iterates them

    def start(self, call, url: str, body: bytes, headers: dict[str, str]) -> None:
        key = tuple(headers.items())  # a provider sends the same few headers every time
        lines = self._lines.get(key)
        if lines is None:
            lines = [b"%s: %s" % (k.encode("ascii"), v.encode("latin-1")) for k, v in key]
            lines.extend(_FIXED_HEADERS)
            for line in lines:
                if b"\r" in line or b"\n" in line:
                    raise ValueError("a header holds a line break")
            if len(self._lines) >= 64:
                self._lines.clear()
            self._lines[key] = lines
        self._queue.append((call, url, body, lines))
        if self._process_queue() and len(self._curls) - len(self._free_list) == 1:
            # libcurl asks for a 0 ms timer to send a newly added transfer. When it is the only
            # one, send it now rather than a loop turn later; under load the timer sends all
            # the transfers added in one loop turn with one call.
            self._handle_timeout()

    def _curl_create(self) -> pycurl.Curl:
        curl = pycurl.Curl()
        curl.call = None
        # Tornado turns libcurl's trace on when its logger is at DEBUG: that would log every
        # request body (prompts) and header (the provider key). This pool never does.
        curl.setopt(pycurl.VERBOSE, 0)
        curl.setopt(pycurl.NOSIGNAL, 1)  # the process has threads (access log)
        curl.setopt(pycurl.PROTOCOLS, pycurl.PROTO_HTTP | pycurl.PROTO_HTTPS)
        curl.setopt(pycurl.FOLLOWLOCATION, 0)
        curl.setopt(pycurl.POST, 1)
        curl.setopt(pycurl.CONNECTTIMEOUT_MS, self._connect_timeout_ms)
        curl.setopt(pycurl.TIMEOUT_MS, 0)  # no total limit: liveness is the call's silence timer
        curl.setopt(pycurl.USERAGENT, self._user_agent)
        curl.setopt(pycurl.TCP_NODELAY, 1)
        curl.setopt(pycurl.TCP_KEEPALIVE, 1)
        curl.setopt(pycurl.UPLOAD_BUFFERSIZE, _UPLOAD_BUFFER)
        if _HTTP2 is not None:
            try:
                curl.setopt(pycurl.HTTP_VERSION, _HTTP2)
            except pycurl.error:
                pass  # libcurl built without HTTP/2: HTTP/1.1 keep-alive it is
        return curl

    def _process_queue(self) -> bool:
        """Hand queued calls to free handles; True if any transfer was added."""
        queue, free, added = self._queue, self._free_list, False
        while queue:
            call, url, body, lines = queue.popleft()
            if call._cancelled:
                call._finished(0, "")  # never sent; the call already holds its error
                continue
            if not free:
                if len(self._curls) >= self._max_handles:
                    queue.appendleft((call, url, body, lines))
                    return added
                curl = self._curl_create()
                self._curls.add(curl)
            else:
                curl = free.pop()
            curl.call = call
            curl.setopt(pycurl.URL, url)
            curl.setopt(pycurl.HTTPHEADER, lines)
            curl.setopt(pycurl.POSTFIELDS, body)  # pycurl sets its size and keeps a reference
            curl.setopt(pycurl.HEADERFUNCTION, call._on_header)
            curl.setopt(pycurl.WRITEFUNCTION, call._on_chunk)
            call._curl = curl
            self._multi.add_handle(curl)
            added = True
        return added

    def abort(self, curl: pycurl.Curl) -> None:
        """End a transfer now (never from inside one of its own callbacks)."""
        if curl.call is not None:
            self._finish(curl, pycurl.E_ABORTED_BY_CALLBACK, "cancelled by the gateway")
            self._process_queue()

    def _finish(self, curl: pycurl.Curl, curl_error: int | None = None,  # type: ignore[override]
                curl_message: str | None = None) -> None:
        self._multi.remove_handle(curl)
        call, curl.call = curl.call, None
        curl.setopt(pycurl.POSTFIELDS, b"")  # drop the body now, not at the handle's next use
        busy = len(self._curls) - len(self._free_list) - 1
        if len(self._free_list) >= max(_FIRST_HANDLES, busy):
            self._curls.discard(curl)
            curl.close()
        else:
            self._free_list.append(curl)
        call._finished(curl_error or 0, curl_message or "")

    def _handle_socket(self, event: int, fd: int, multi, data) -> None:
        """libcurl says which events of `fd` it wants now. Tornado removes and re-adds the fd
        at every change (a workaround for libcurl of 2011 reusing an fd without a REMOVE);
        this touches only the reader or writer that changed, on the asyncio loop itself."""
        loop = self.io_loop.asyncio_loop
        want = _WANT[event]
        have = self._fds.get(fd, 0)
        if want == have:
            return
        if (want ^ have) & _READ:
            if want & _READ:
                loop.add_reader(fd, self._handle_events, fd, _READ)
            else:
                loop.remove_reader(fd)
        if (want ^ have) & _WRITE:
            if want & _WRITE:
                loop.add_writer(fd, self._handle_events, fd, _WRITE)
            else:
                loop.remove_writer(fd)
        if want:
            self._fds[fd] = want
        else:
            self._fds.pop(fd, None)

    def _handle_events(self, fd: int, events: int) -> None:
        self._act(fd, (_IN if events & _READ else 0) | (_OUT if events & _WRITE else 0))

    def _handle_timeout(self) -> None:
        self._cancel_timer()  # called early: the pending timer would only repeat it
        self._act(pycurl.SOCKET_TIMEOUT, 0)
        # libcurl re-arms its timer through _set_timeout; tornado also re-reads it here, for
        # clocks that disagree, and so does this
        if self._timeout is None and (msecs := self._multi.timeout()) >= 0:
            self._set_timeout(msecs)

    def _act(self, fd: int, action: int) -> None:
        """Tornado's socket_action step, but it asks libcurl for finished transfers only when
        there are some: libcurl's count of running transfers falls below the count of handles
        added exactly when one has ended. Tornado asks after every socket event, and the lists
        each answer builds were 3% of a relayed stream's CPU. (socket_action has not asked to
        be called again, CURLM_CALL_MULTI_PERFORM, since libcurl 7.20.)"""
        try:
            running = self._multi.socket_action(fd, action)[1]
        except pycurl.error:
            running = -1  # whatever happened, look
        if running < len(self._curls) - len(self._free_list):
            self._finish_pending_requests()

    def _set_timeout(self, msecs: int) -> None:
        # libcurl passes -1 to delete its timer; tornado's version schedules a call at once.
        self._cancel_timer()
        if msecs >= 0:
            self._timeout = self.io_loop.asyncio_loop.call_later(msecs / 1000, self._handle_timeout)

    def close(self) -> None:
        loop = self.io_loop.asyncio_loop
        for fd, have in self._fds.items():
            if have & _READ:
                loop.remove_reader(fd)
            if have & _WRITE:
                loop.remove_writer(fd)
        self._fds.clear()
        for call, *_ in self._queue:
            call._finished(pycurl.E_ABORTED_BY_CALLBACK, "the upstream client was closed")
        self._queue.clear()
        super().close()
        # Closing handles still in flight makes libcurl re-arm its timer from inside close();
        # that callback would then find the multi handle gone.
        self._cancel_timer()

    def _cancel_timer(self) -> None:
        if self._timeout is not None:
            self._timeout.cancel()
            self._timeout = None
