"""Idle kept-alive connections are closed by the server's sweep (upgate/server.py), not by a
per-request timeout; a request in flight, however long, is never cut by it."""

import asyncio
import socket
import time

import httpx
import pytest

from tests.gateway import seed

pytestmark = pytest.mark.timeout(60)


def sweep(node, idle_s: float) -> int:
    async def run():
        node.server.idle_timeout_s = idle_s
        return node.server.close_idle()
    return node.thread.run(run())


def closed_by_peer(sock: socket.socket) -> bool:
    sock.settimeout(2)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_a_kept_alive_connection_idle_past_the_limit_is_closed(node):
    sock = socket.create_connection(("127.0.0.1", node.port))
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    sock.settimeout(5)
    assert sock.recv(65536).startswith(b"HTTP/1.1 200")
    assert sweep(node, 30) == 0  # idle, but not for long enough
    time.sleep(0.3)
    assert sweep(node, 0.2) == 1
    assert closed_by_peer(sock)


def test_headers_that_never_finish_are_closed_too(node):
    sock = socket.create_connection(("127.0.0.1", node.port))
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # no blank line
    time.sleep(0.3)
    assert sweep(node, 0.2) == 1
    assert closed_by_peer(sock)


def test_a_long_request_in_flight_is_not_idle(node, redis_url):
    key, _, _ = seed(redis_url, balance="1000000")
    body = {"model": "mock/chat-1", "stream": True, "messages": [{"role": "user", "content": "hi"}],
            "mock": {"chunks": 6, "chunk_delay_ms": 150}}

    async def stream() -> bytes:
        async with httpx.AsyncClient(timeout=10) as client:
            async with client.stream("POST", f"{node.base}/chat/completions", json=body,
                                     headers={"Authorization": f"Bearer {key}"}) as resp:
                assert resp.status_code == 200
                return b"".join([chunk async for chunk in resp.aiter_bytes()])

    async def main() -> bytes:
        task = asyncio.ensure_future(stream())
        swept = 0
        for _ in range(6):  # sweeps with a tiny limit while the stream runs ~0.9 s
            await asyncio.sleep(0.15)
            swept += await asyncio.to_thread(sweep, node, 0.05)
        assert swept == 0
        return await task

    assert asyncio.run(main()).rstrip().endswith(b"data: [DONE]")


def test_a_body_that_never_finishes_is_closed_after_the_body_limit(node, redis_url):
    key, _, _ = seed(redis_url)  # (without a valid key the request is answered before its body)
    sock = socket.create_connection(("127.0.0.1", node.port))
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                 b"Content-Length: 100\r\n\r\n{\"mo" % key.encode())
    time.sleep(0.3)

    async def run(idle_s, body_s):
        node.server.idle_timeout_s, node.server.body_timeout_s = idle_s, body_s
        return node.server.close_idle()
    assert node.thread.run(run(0.1, 30)) == 0  # headers are in: the idle limit no longer applies
    assert node.thread.run(run(30, 0.2)) == 1
    assert closed_by_peer(sock)
