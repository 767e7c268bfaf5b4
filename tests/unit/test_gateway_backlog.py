"""gateway/protocols/backlog.py: the audio a connection has sent that its client has not
taken, from the bytes still unsent on the server's side."""

import socket
import time

import pytest

from gateway.protocols.backlog import Backlog, frame_bytes, kernel_unsent


def test_audio_is_unread_until_every_byte_of_its_message_is_taken():
    backlog = Backlog()
    backlog.sent(100, 0.02)
    backlog.sent(50, 0.0)  # a text message: bytes, no audio
    backlog.sent(100, 0.02)
    assert backlog.unread_s(250, now=0) == pytest.approx(0.04)
    assert backlog.unread_s(200, now=1) == pytest.approx(0.04)  # the first message's last byte not yet
    assert backlog.unread_s(150, now=2) == pytest.approx(0.02)
    assert backlog.unread_s(0, now=3) == 0


def test_a_client_taking_nothing_is_stalled_from_its_last_take():
    backlog = Backlog(now=0)
    backlog.sent(100, 0.02)
    backlog.sent(100, 0.02)
    backlog.unread_s(150, now=1)  # it took 50 bytes at 1 s
    assert backlog.stalled_s(now=5) == 4
    backlog.unread_s(150, now=6)  # nothing more
    assert backlog.stalled_s(now=7) == 6
    backlog.unread_s(0, now=8)
    assert backlog.stalled_s(now=9) == 0  # nothing waits


@pytest.mark.parametrize("payload, header", [(0, 2), (125, 2), (126, 4), (65535, 4), (65536, 10)])
def test_a_frame_counts_its_header(payload, header):
    assert frame_bytes(payload) == payload + header


def test_the_kernel_holds_what_a_peer_that_does_not_read_has_not_acknowledged():
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.socket()
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        client.connect(server.getsockname())
        peer, _ = server.accept()
        with client, peer:
            peer.setblocking(False)
            sent = 0
            try:
                while sent < 1 << 20:
                    sent += peer.send(b"x" * 65536)
            except BlockingIOError:  # the client's window and the server's send buffer are full
                pass
            time.sleep(0.05)
            unsent = kernel_unsent(peer)
            assert 0 < unsent <= sent
            assert kernel_unsent(client) == 0
