"""The listener's sans-I/O parts: frame headers found in a client's byte stream however
it is cut, the ping bucket, and the connection caps. The socket-level behaviour is in
test_gateway_limits.py."""

import pytest
from websockets.frames import Frame, Opcode

from gateway.edge.guard import ConnectionCounts, FrameWalker, TokenBucket


def frame(opcode: Opcode, size: int, mask: bool = True) -> bytes:
    return Frame(opcode, b"x" * size).serialize(mask=mask)


STREAM = [(Opcode.TEXT, 5, True), (Opcode.BINARY, 126, True), (Opcode.PING, 0, True),
          (Opcode.BINARY, 70_000, False), (Opcode.TEXT, 125, True), (Opcode.CLOSE, 2, False)]


@pytest.mark.parametrize("piece", [1, 3, 7, 1000, 1 << 20])
def test_frames_are_found_however_the_stream_is_cut(piece):
    data = b"".join(frame(op, size, mask) for op, size, mask in STREAM)
    walker = FrameWalker()
    found = [f for i in range(0, len(data), piece) for f in walker.feed(data[i:i + piece])]
    assert [(f.opcode, f.masked) for f in found] == [(op, mask) for op, _, mask in STREAM]


def test_a_frame_is_reported_once_its_header_is_complete():
    walker = FrameWalker()
    data = frame(Opcode.BINARY, 300)  # 2 + 2 (length) + 4 (mask) header bytes
    assert walker.feed(data[:7]) == []
    assert [f.opcode for f in walker.feed(data[7:8])] == [Opcode.BINARY]
    assert walker.feed(data[8:]) == []


def test_the_bucket_allows_its_burst_then_its_rate():
    now = [0.0]
    bucket = TokenBucket(rate=2.0, burst=3, clock=lambda: now[0])
    assert [bucket.take() for _ in range(4)] == [True, True, True, False]
    now[0] += 0.5  # one token back
    assert [bucket.take() for _ in range(2)] == [True, False]
    now[0] += 100  # never more than the burst
    assert sum(bucket.take() for _ in range(10)) == 3


def test_connections_are_capped_in_all_and_per_address():
    counts = ConnectionCounts(cap=3, per_client_cap=2)
    assert counts.admit("a") is None and counts.admit("a") is None
    assert counts.admit("a").status == 429
    assert counts.admit("b") is None
    refused = counts.admit("c")
    assert refused.status == 503 and refused.headers["Retry-After"] == "1"
    counts.closed("a")
    assert counts.admit("c") is None
    assert counts.open == {"a": 1, "b": 1, "c": 1}


def test_no_caps_when_zero():
    counts = ConnectionCounts(cap=0, per_client_cap=0)
    assert all(counts.admit("a") is None for _ in range(1000))


def test_a_refusal_before_any_request_is_a_whole_http_response():
    refusal = ConnectionCounts(cap=1, per_client_cap=0)
    refusal.admit("a")
    raw = refusal.admit("b").as_http()
    head, body = raw.split(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    assert lines[0] == "HTTP/1.1 503 Service Unavailable"
    assert "Connection: close" in lines and f"Content-Length: {len(body)}" in lines and "Retry-After: 1" in lines
