"""UpstreamClient against the mock provider over real HTTP, both on one event loop."""

import asyncio
import socket

import orjson
import pytest

from upgate.mock.upstream import serve
from upgate.upstream.client import (
    UpstreamCancelled, UpstreamClient, UpstreamCut, UpstreamTimeout, UpstreamUnreachable)
from upgate.upstream.sse import SSEParser

pytestmark = pytest.mark.timeout(60)

SILENCE = 0.3


def with_mock(max_clients: int = 20, silence_s: float = SILENCE):
    """Run an async test with a fresh mock server and upstream client on its own loop."""
    def decorate(test):
        def run():
            async def body():
                server = await serve(0)
                client = UpstreamClient(max_clients=max_clients, silence_s=silence_s,
                                        connect_timeout_s=5)
                try:
                    await test(server, client)
                finally:
                    client.close()
                    server.stop()
                    await server.close_all_connections()
            asyncio.run(body())
        run.__name__ = test.__name__
        run.__doc__ = test.__doc__
        return run
    return decorate


def chat(server, client, stream: bool = True, **mock):
    body = {"model": "mock/chat-1", "stream": stream,
            "messages": [{"role": "user", "content": "hello there, mock"}],
            "stream_options": {"include_usage": True}, "mock": mock}
    return client.open(f"http://127.0.0.1:{server.port}/v1/chat/completions",
                       orjson.dumps(body), {"Content-Type": "application/json"})


async def events_until(call, parser: SSEParser, count: int) -> list[bytes]:
    out: list[bytes] = []
    while len(out) < count:
        chunk = await call.read()
        assert chunk is not None
        out.extend(parser.feed(chunk))
    return out


async def until(predicate, limit_s: float = 5.0) -> None:
    """Poll a condition (bounded) — for effects the other side notices asynchronously."""
    for _ in range(int(limit_s / 0.01)):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached")


@with_mock()
async def test_stream_relay_reads_chunk_one_before_chunk_two_is_sent(server, client):
    call = chat(server, client, gate_after=1, chunks=3)
    await call.start()
    assert call.status == 200
    assert call.headers["Content-Type"] == "text/event-stream"
    parser = SSEParser()
    first = await events_until(call, parser, 1)
    # the mock is parked at its gate: chunk 2 has not been written yet
    assert len(first) == 1 and b"tok0 " in first[0]
    assert call.first_byte_at is not None
    server.mock_state.release.set()
    rest = []
    while (chunk := await call.read()) is not None:
        rest.extend(parser.feed(chunk))
    docs = [orjson.loads(e) for e in rest[:-1]]
    assert [d["choices"][0]["delta"].get("content") for d in docs[:2]] == ["tok1 ", "tok2 "]
    assert docs[-1]["usage"]["completion_tokens"] == 3
    assert rest[-1] == b"[DONE]"


@with_mock()
async def test_a_consumer_gets_queued_chunks_first_then_each_chunk_as_it_comes(server, client):
    call = chat(server, client, gate_after=1, chunks=3)
    await call.start()
    await until(lambda: call._chunks)  # chunk 1 is queued before anyone consumes
    got, parser = [], SSEParser()

    def consume(chunk: bytes) -> bool:
        got.extend(parser.feed(chunk))
        return b"[DONE]" in chunk  # wake the task only at the end
    call.relay_to(consume)
    assert len(got) == 1 and b"tok0 " in got[0]  # the queued chunk, at once, in order
    server.mock_state.release.set()
    while not call.over:
        await call.wait()
    assert call.error is None
    assert [orjson.loads(e)["choices"][0]["delta"]["content"] for e in got[:3]] == ["tok0 ", "tok1 ", "tok2 "]
    assert got[-1] == b"[DONE]"
    assert await call.read() is None  # nothing was queued behind the consumer


def _broken(chunk: bytes) -> bool:
    raise TypeError("a bug in the relay")


@with_mock()
async def test_a_consumer_that_raises_in_libcurls_callback_ends_the_transfer_as_a_cut(server, client):
    call = chat(server, client, chunks=50, chunk_delay_ms=20, gate_after=0)
    await call.start()
    call.relay_to(_broken)  # nothing queued yet: the first chunk reaches it inside libcurl
    server.mock_state.release.set()
    await call.wait()
    assert isinstance(call.error, UpstreamCut)
    await until(lambda: server.mock_state.active == 0)  # the provider's transfer was stopped


@with_mock()
async def test_a_consumer_that_raises_on_a_queued_chunk_ends_the_transfer_as_a_cut(server, client):
    call = chat(server, client, chunks=50, chunk_delay_ms=20)
    await call.start()
    await until(lambda: call._chunks)
    call.relay_to(_broken)
    assert isinstance(call.error, UpstreamCut) and call.over
    await until(lambda: server.mock_state.active == 0)


@with_mock()
async def test_chunks_arrive_one_at_a_time_with_a_delay(server, client):
    call = chat(server, client, chunks=2, chunk_delay_ms=200)
    await call.start()
    first = await call.read()
    assert b"tok0 " in first and b"tok1 " not in first
    assert b"tok1 " in await call.body()


@with_mock()
async def test_non_stream_body_and_error_status(server, client):
    call = chat(server, client, stream=False)
    await call.start()
    doc = orjson.loads(await call.body())
    assert doc["choices"][0]["message"]["content"] == "tok0 tok1 tok2 tok3 tok4 "
    assert doc["usage"] == {"prompt_tokens": 4, "completion_tokens": 5, "total_tokens": 9}
    assert await call.read() is None

    call = chat(server, client, stream=False, status=429)
    await call.start()
    assert call.status == 429
    error = orjson.loads(await call.body())["error"]
    assert "sk-mock-SECRET123" in error["message"]


@with_mock()
async def test_silence_before_the_headers_is_a_timeout(server, client):
    call = chat(server, client, latency_ms=3000)
    with pytest.raises(UpstreamTimeout):
        await call.start()


@with_mock()
async def test_silence_after_headers_but_before_a_body_byte_is_a_timeout(server, client):
    call = chat(server, client, silence_after=0)
    await call.start()
    assert call.status == 200
    with pytest.raises(UpstreamTimeout):
        await call.read()
    assert call.first_byte_at is None


@with_mock()
async def test_silence_after_the_first_byte_is_a_cut_and_the_transfer_stops(server, client):
    call = chat(server, client, silence_after=1)
    await call.start()
    await events_until(call, SSEParser(), 1)
    with pytest.raises(UpstreamCut) as caught:
        while await call.read() is not None:
            pass
    assert not isinstance(caught.value, UpstreamTimeout)
    await until(lambda: server.mock_state.disconnects == 1)


@with_mock()
async def test_connect_refused_is_unreachable(server, client):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: connections are refused
        call = client.open(f"http://127.0.0.1:{port}/v1/chat/completions", b"{}", {})
        with pytest.raises(UpstreamUnreachable):
            await call.start()


@with_mock()
async def test_cut_after_n_chunks(server, client):
    call = chat(server, client, cut_after=2)
    await call.start()
    parser = SSEParser()
    events = []
    with pytest.raises(UpstreamCut):
        while (chunk := await call.read()) is not None:
            events.extend(parser.feed(chunk))
    assert len(events) == 2
    assert server.mock_state.disconnects == 0  # the mock closed it, nobody walked away


@with_mock()
async def test_error_after_headers_is_a_cut_with_no_body_byte(server, client):
    call = chat(server, client, error_after_headers=True)
    await call.start()
    assert call.status == 200
    with pytest.raises(UpstreamCut):
        await call.body()
    assert call.first_byte_at is None


@with_mock()
async def test_cancel_stops_a_long_stream_and_the_mock_sees_it(server, client):
    call = chat(server, client, chunks=1000, chunk_delay_ms=50)
    await call.start()
    await call.read()
    call.cancel()
    call.cancel()  # idempotent
    with pytest.raises(UpstreamCancelled):
        await call.read()
    await until(lambda: server.mock_state.disconnects == 1 and server.mock_state.active == 0)


@with_mock()
async def test_cancel_wakes_a_reader_waiting_for_headers(server, client):
    call = chat(server, client, latency_ms=10_000)
    waiting = asyncio.ensure_future(call.start())
    await asyncio.sleep(0.05)
    call.cancel()
    with pytest.raises(UpstreamCancelled):
        await waiting
    await until(lambda: server.mock_state.disconnects == 1)


@with_mock(max_clients=1, silence_s=30)
async def test_cancel_while_queued_never_sends_and_frees_everything(server, client):
    first = chat(server, client, silence_after=0)  # holds the only curl handle
    await first.start()
    second = chat(server, client)
    second.cancel()
    first.cancel()
    with pytest.raises(UpstreamCancelled):
        await second.start()
    await until(lambda: server.mock_state.active == 0)
    assert server.mock_state.requests == 1
    third = chat(server, client, stream=False)  # the handle came back to the pool
    await third.start()
    assert third.status == 200


@with_mock()
async def test_cancel_after_the_end_is_a_no_op(server, client):
    call = chat(server, client, stream=False)
    await call.start()
    await call.body()
    call.cancel()
    assert await call.read() is None


@with_mock()
async def test_sequential_calls_reuse_one_connection(server, client):
    for _ in range(5):
        call = chat(server, client, chunks=2)
        await call.start()
        assert b"[DONE]" in await call.body()
    assert server.mock_state.connections == 1


@with_mock()
async def test_concurrent_streams_all_complete(server, client):
    async def one(i: int) -> int:
        call = chat(server, client, chunks=3, chunk_delay_ms=20)
        await call.start()
        return (await call.body()).count(b"\"content\":\"tok")

    assert await asyncio.gather(*(one(i) for i in range(25))) == [3] * 25


@with_mock()
async def test_mock_stats_see_what_was_sent(server, client):
    call = chat(server, client, stream=False)
    await call.start()
    await call.body()
    stats = server.mock_state.stats()
    assert stats["last_body"]["model"] == "mock/chat-1"
    assert stats["last_headers"]["Content-Type"] == "application/json"
    assert stats["last_headers"]["User-Agent"].startswith("upgate/")


def test_close_without_use_is_fine():
    UpstreamClient().close()


@with_mock()
async def test_close_fails_calls_in_flight(server, client):
    call = chat(server, client, silence_after=1)
    await call.start()
    await call.read()
    reading = asyncio.ensure_future(call.read())
    await asyncio.sleep(0.01)
    client.close()
    with pytest.raises(UpstreamCancelled):
        await reading
    await asyncio.sleep(0.05)  # libcurl's re-armed timer must not fire into a closed pool
    call = chat(server, client, stream=False)  # the client opens a fresh pool on demand
    await call.start()
    assert call.status == 200


@with_mock(max_clients=300, silence_s=30)
async def test_the_handle_pool_grows_past_its_first_handles_and_stops_at_max_clients(server, client):
    """Tornado would create every handle up front; ours start few and grow on demand, so 120
    streams held open at once (gated by the mock) all get their headers, none waits queued."""
    calls = [chat(server, client, gate_after=1, chunks=3) for _ in range(120)]
    await asyncio.wait_for(asyncio.gather(*(c.start() for c in calls)), 20)
    pool = client._http
    assert 120 <= len(pool._curls) < 300  # grown on demand, not all created up front
    for c in calls:
        c.cancel()


@with_mock(max_clients=40, silence_s=30)
async def test_transfers_past_max_clients_wait_for_a_free_handle(server, client):
    calls = [chat(server, client, gate_after=1, chunks=3) for _ in range(50)]
    await until(lambda: server.mock_state.active >= 40)
    await asyncio.sleep(0.2)
    assert server.mock_state.active == 40  # ten are queued in the gateway, not sent
    assert len(client._http._curls) == 40
    for c in calls:
        c.cancel()


@with_mock()
async def test_a_response_past_the_body_limit_is_cut_not_buffered(server, client):
    from upgate.upstream import client as upstream_client

    limit = upstream_client._MAX_BODY
    upstream_client._MAX_BODY = 2000  # the real limit is 100 MB; the check is the same
    try:
        call = chat(server, client, chunks=200)
        await call.start()
        with pytest.raises(UpstreamCut, match="passed 2000 bytes"):
            await call.body()
    finally:
        upstream_client._MAX_BODY = limit
