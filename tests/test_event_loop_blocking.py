"""Nothing on the hot path blocks the gateway's event loop.

Two checks while a node serves every kind of request (JSON, streams, errors, the svc and
model routes, health and metrics): no call that blocks a thread (file open, DNS lookup,
subprocess) is made on the loop's thread, seen through Python's audit hooks; and
asyncio's debug mode reports no callback that held the loop for long (its slow-callback log).
"""
from __future__ import annotations

import asyncio
import logging
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest

from tests.gateway import seed

pytestmark = pytest.mark.timeout(120)

HELLO = [{"role": "user", "content": "Hello there, gateway!"}]
# audit events of calls that block the calling thread
BLOCKING = ("open", "socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyaddr",
            "subprocess.Popen", "os.system", "os.fork", "os.exec")
SLOW_CALLBACK_S = 0.25  # far above any callback of the gateway's (a GC pause included)


class _Watch:
    """One process-wide audit hook (hooks cannot be removed): records blocking calls made on
    `thread` while `on` is set."""

    thread: int | None = None
    on = False
    seen: list = []
    installed = False

    @classmethod
    def hook(cls, event, args) -> None:
        if cls.on and event in BLOCKING and threading.get_ident() == cls.thread:
            cls.seen.append((event, repr(args)[:120]))


def traffic(node, key) -> None:
    c = openai.OpenAI(base_url=node.base, api_key=key, max_retries=0)
    for _ in range(20):
        assert c.chat.completions.create(model="mock/chat-1", messages=HELLO).choices
    for _ in range(5):
        assert "".join(ch.choices[0].delta.content or "" for ch in
                       c.chat.completions.create(model="mock/chat-1", messages=HELLO, stream=True)
                       if ch.choices)
    assert c.embeddings.create(model="mock/embed-1", input="x").data
    assert c.models.list().data
    h = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=node.url, timeout=30) as x:
        assert x.get("/v1/svc/me", headers=h).status_code == 200
        assert x.get("/v1/svc/usage", headers=h).status_code == 200
        assert x.post("/v1/chat/completions", content=b"{oops", headers=h).status_code == 400
        assert x.post("/v1/chat/completions", json={}, headers={"Authorization": "Bearer sk-up-nope"}).status_code == 401
        assert x.get("/v1/nothing").status_code == 404
        assert x.get("/healthz").status_code == 200
        assert x.get("/metrics").status_code == 200


def burst(node, key, n: int = 24) -> None:
    """Concurrent reads of the store: its connection pool grows while the watch is on."""
    h = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=node.url, timeout=30, limits=httpx.Limits(max_connections=n)) as x:
        with ThreadPoolExecutor(n) as pool:
            for _ in range(3):
                codes = list(pool.map(lambda _: x.get("/v1/svc/me", headers=h).status_code, range(n)))
                assert codes == [200] * n


def _watch_on(node) -> None:
    if not _Watch.installed:
        sys.addaudithook(_Watch.hook)
        _Watch.installed = True
    _Watch.thread = node.thread.run(_ident())
    _Watch.seen, _Watch.on = [], True


async def _ident() -> int:
    return threading.get_ident()


def test_no_call_on_the_event_loop_thread_blocks_it(node, redis_url):
    key, _, _ = seed(redis_url, balance="1000000")
    traffic(node, key)  # warm: first-use imports and caches are not the hot path
    _watch_on(node)
    try:
        traffic(node, key)
        burst(node, key)
    finally:
        _Watch.on = False
    assert _Watch.seen == []


def test_no_callback_holds_the_event_loop_long(node, redis_url, caplog):
    """asyncio's debug mode logs every callback that ran longer than slow_callback_duration."""
    key, _, _ = seed(redis_url, balance="1000000")
    traffic(node, key)

    async def debug(on: bool) -> None:
        loop = asyncio.get_running_loop()
        loop.slow_callback_duration = SLOW_CALLBACK_S
        loop.set_debug(on)
    caplog.set_level(logging.WARNING, logger="asyncio")
    node.thread.run(debug(True))
    try:
        traffic(node, key)
    finally:
        node.thread.run(debug(False))
    slow = [r.getMessage() for r in caplog.records if r.name == "asyncio" and "took" in r.getMessage()]
    assert slow == []


def test_the_watch_sees_a_blocking_call(node):
    """The audit check is not vacuous: a file opened on the loop's thread is caught."""
    async def block():
        with open(__file__, "rb"):
            pass
    _watch_on(node)
    try:
        node.thread.run(block())
    finally:
        _Watch.on = False
    assert [e for e, _ in _Watch.seen] == ["open"]
