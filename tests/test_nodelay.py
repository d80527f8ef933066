"""TCP_NODELAY must survive Tornado's per-response toggle (else ~40 ms on kept-alive streams)."""
import asyncio
import socket

import pytest
from tornado.iostream import IOStream

from upgate.nodelay import keep_nodelay


@pytest.fixture
def tcp_pair():
    listener = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(listener.getsockname())
    server, _ = listener.accept()
    listener.close()
    yield server
    client.close()
    server.close()


def on_loop(sock) -> IOStream:
    async def make():
        return IOStream(sock)

    return asyncio.run(make())


def nodelay(sock) -> int:
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)


def test_tornado_toggle_after_a_response_is_ignored(tcp_pair):
    stream = on_loop(tcp_pair)
    keep_nodelay(stream)
    assert nodelay(tcp_pair) == 1
    stream.set_nodelay(False)  # what HTTP1Connection._finish_request does after every response
    assert nodelay(tcp_pair) == 1


def test_without_it_tornado_turns_nagle_back_on(tcp_pair):
    # the defect this module exists for, so the test above cannot pass by accident
    stream = on_loop(tcp_pair)
    stream.set_nodelay(True)
    stream.set_nodelay(False)
    assert nodelay(tcp_pair) == 0
