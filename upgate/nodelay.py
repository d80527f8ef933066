"""TCP_NODELAY for the whole life of an accepted connection.

Tornado turns Nagle's algorithm back on after every response (``HTTP1Connection._finish_request``
→ ``set_nodelay(False)``) and off again only when the next response finishes. On a kept-alive
connection (the openai client's pool) a stream's first event then waits behind the unacknowledged
header segment for the client's delayed ACK: ~40 ms added to the first byte. Small SSE writes
must leave at once, every time, so the option is set once and Tornado's toggles are ignored
(which also saves two setsockopt calls per request).
"""
from __future__ import annotations


def _ignore(_value: bool) -> None:
    pass


def keep_nodelay(stream) -> None:
    stream.set_nodelay(True)
    stream.set_nodelay = _ignore
