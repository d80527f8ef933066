"""What a request may cost before it proves who sent it: the one rule every route of every face
obeys (/v1, /admin/v1, the console, the dashboard to come). docs/security.md has the table.

Its credential is checked first, right after the header block; only then is its size limit
chosen, and only then is any of its body read. A request that fails either is answered at once,
without `100 Continue` and without reading its body, and its connection is closed. A request
that proved nothing may send `UNAUTHENTICATED_BODY_MAX` bytes: a sign-in form, a small
refusal; a node never holds more than that for it.

A handler gets the rule by mixing in `BodyGuard` (first among its bases). `upgate.app.make_app`
refuses a route whose handler does not, so a new page or face cannot forget it. Hooks:
`authenticate()` (raise to refuse, or finish the response, e.g. a redirect to sign in),
`body_limit()` (bytes this request may send, once authenticated), `too_large()` and
`bad_length()` (the face's own 413 and 400), `take(chunk)` (keep a piece of the body).
"""
from __future__ import annotations

import tornado.web

UNAUTHENTICATED_BODY_MAX = 64 * 1024


class BodyGuard:
    # tornado.web.stream_request_body for a mixin (the decorator only takes a RequestHandler):
    # without it Tornado buffers the whole body before prepare() runs
    _stream_request_body = True
    keep_body = False  # True: the pieces are kept for body_bytes(); else counted and dropped

    _body: list[bytes] | None = None
    _size = 0
    _limit = UNAUTHENTICATED_BODY_MAX

    async def prepare(self) -> None:
        self._body, self._size = [], 0
        length = self.request.headers.get("Content-Length")
        if length is not None and not (length.isascii() and length.isdigit()):  # "²" is a digit too
            raise self.bad_length()
        await self.authenticate()
        if self._finished:  # answered by authenticate (a redirect to the sign-in page)
            return
        self._limit = self.body_limit()
        if length is not None and (len(length) > 18 or int(length) > self._limit):
            raise self.too_large()
        # No per-request max_body_size: Tornado would refuse the chunk that crosses it with a
        # bare 400 before data_received sees it. The server-wide bound is far above the limit.
        ready = getattr(self.request.connection, "ready_for_body", None)
        if ready is not None:  # upgate/http/connection.py: the body now, not two loop turns later
            ready()

    async def authenticate(self) -> None:
        """Check the request's credential from its headers; the default proves nothing."""

    def body_limit(self) -> int:
        return UNAUTHENTICATED_BODY_MAX

    def bad_length(self) -> Exception:
        return tornado.web.HTTPError(400, "Content-Length is malformed.")

    def too_large(self) -> Exception:
        return tornado.web.HTTPError(413, "The request body is too large.")

    def data_received(self, chunk: bytes) -> None:
        if self._body is None:
            return
        self._size += len(chunk)
        if self._size > self._limit:  # a chunked body, or one longer than it said
            self.refuse(self.too_large())
        elif self.keep_body:
            self.take(chunk)

    def take(self, chunk: bytes) -> None:
        self._body.append(chunk)

    def refuse(self, err: Exception) -> None:
        """Answer `err` from a place where raising would not reach write_error; the rest of the
        body is dropped."""
        self._body = None
        status = getattr(err, "status", None) or getattr(err, "status_code", 500)
        self.send_error(status, exc_info=(type(err), err, None))

    def body_bytes(self) -> bytes | None:
        """The whole body, or None when it was refused (the answer is already on its way)."""
        return None if self._body is None else b"".join(self._body)


def unguarded(routes, default_handler=None) -> list[str]:
    """The handlers among `routes` (Tornado rules) that would read a body before this rule."""
    handlers = [r[1] for r in routes] + ([default_handler] if default_handler else [])
    return sorted({h.__name__ for h in handlers if not (isinstance(h, type) and issubclass(h, BodyGuard))})
