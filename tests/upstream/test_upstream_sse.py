"""The incremental SSE parser: split anywhere, every line ending, fields we ignore."""

import time

from hypothesis import given, settings, strategies as st

from upgate.upstream.sse import DONE, KEEPALIVE, SSEParser, event


def parse_all(chunks: list[bytes]) -> list[bytes]:
    parser = SSEParser()
    out: list[bytes] = []
    for chunk in chunks:
        out.extend(parser.feed(chunk))
    return out


def test_event_helpers() -> None:
    assert event(b'{"a":1}') == b'data: {"a":1}\n\n'
    assert DONE == b"data: [DONE]\n\n"
    assert KEEPALIVE == b": keep-alive\n\n"
    assert parse_all([event(b"x"), KEEPALIVE, DONE]) == [b"x", b"[DONE]"]


def test_line_endings_comments_and_ignored_fields() -> None:
    stream = (b": hello\r\n\r\n"
              b"event: message\r\nid: 7\r\nretry: 1000\r\ndata: one\r\n\r\n"
              b"data:two\n\n"
              b"data: three\rdata: 3b\r\r"
              b"data\n\n"
              b"data: {\"x\": 1}\n"
              b"data: [DONE]\n\n")
    assert parse_all([stream]) == [b"one", b"two", b"three\n3b", b"", b'{"x": 1}\n[DONE]']


def test_only_one_leading_space_is_removed() -> None:
    assert parse_all([b"data:  two spaces\n\n"]) == [b" two spaces"]


def test_event_without_data_is_not_dispatched() -> None:
    assert parse_all([b"event: ping\n\n: c\n\nid: 1\n\n"]) == []


def test_byte_order_mark_split_across_chunks() -> None:
    assert parse_all([b"\xef", b"\xbb", b"\xbfdata: a\n\n"]) == [b"a"]


def test_flush_dispatches_an_unterminated_event() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: a\n\ndata: [DONE]") == [b"a"]
    assert parser.flush() == [b"[DONE]"]
    assert parser.flush() == []


def test_cr_lf_split_between_chunks_is_one_line_ending() -> None:
    # "\r" ends a chunk and "\n" starts the next: one line ending, not an empty line
    assert parse_all([b"data: a\r", b"\ndata: b\r", b"\n\r", b"\n"]) == [b"a\nb"]


_payloads = st.lists(
    st.binary(max_size=40).map(lambda b: b.replace(b"\r", b"").replace(b"\n", b"")),
    min_size=1, max_size=8)


@settings(max_examples=300, deadline=None)
@given(_payloads, st.sampled_from([b"\n", b"\r\n", b"\r"]), st.data())
def test_split_anywhere_gives_the_same_events(payloads, eol, data) -> None:
    stream = b"".join(b":c" + eol + b"data: " + p + eol + eol for p in payloads)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=12)))
    pieces = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)])]
    assert parse_all(pieces) == payloads
    assert parse_all([bytes([b]) for b in stream]) == payloads


def _parse_time(size: int, piece: int = 16384) -> float:
    payload = b"data: " + b"x" * size + b"\n\n"
    best = float("inf")
    for _ in range(3):
        parser = SSEParser()
        start = time.perf_counter()
        for i in range(0, len(payload), piece):
            parser.feed(payload[i:i + piece])
        best = min(best, time.perf_counter() - start)
    return best


def test_a_large_event_parses_in_time_linear_in_its_size():
    """A provider's 10 MB event arriving in 16 KB pieces: joining the line on every piece was
    quadratic (~180 ms of loop for 10 MB). Ten times the size must cost about ten times the time."""
    small, large = _parse_time(1 << 20), _parse_time(10 << 20)
    assert large / small < 25, f"1 MB: {small * 1000:.1f} ms, 10 MB: {large * 1000:.1f} ms"
