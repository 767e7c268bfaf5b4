"""The WebSocket shell's sends. A job's frames that wait on a slow client must not follow
its context's `cancelled`; and only a send that can wait on the client is timed. The
exact interleavings (a send blocked while the cancel is handled; a write buffer at a
given fill) cannot be produced on demand over a real socket, so these tests stand a
minimal WebSocket and transport in for aiohttp's and asyncio's: sends that block until
released, a record of what went out in which order, and a buffer filled as told.
Everything else (Session, Connection) is the real code."""

import asyncio
import json

import numpy as np
import pytest

from contract.voices import EMBEDDED
from gateway.conversation.actions import Synthesize
from gateway.edge.service import Gateway
from gateway.protocols.websocket import Connection, ConnectionClosed, JobUnwanted
from gateway.settings import Settings
from speechstream import protocol as v1


class SlowSocket:
    """Sends wait for `release`; `sent` keeps what went out, in order."""

    closed = False

    def __init__(self):
        self.sent, self.release = [], asyncio.Event()

    async def send_str(self, data):
        self.sent.append(json.loads(data)["type"])

    async def send_bytes(self, data):
        self.sent.append(("frame", v1.parse_audio_frame(data).seq))
        await self.release.wait()  # written, then waiting for the client to drain


class Transport:
    """A write buffer holding `buffered` bytes, with asyncio's default marks."""

    LOW, HIGH = 16 * 1024, 64 * 1024

    def __init__(self, buffered: int):
        self.buffered, self.aborted = buffered, False

    def get_write_buffer_limits(self):
        return self.LOW, self.HIGH

    def get_write_buffer_size(self):
        return self.buffered

    def get_extra_info(self, name, default=None):
        return default  # no socket: the kernel's queue is not read

    def abort(self):
        self.aborted = True


def test_frames_waiting_on_a_slow_client_stop_at_the_cancel():
    async def main():
        ws = SlowSocket()
        full = Transport(Transport.HIGH + 1)  # the slow client's
        connection = Connection(ws, Gateway(Settings(triton_urls=())), "10.0.0.1", transport=full)
        session = connection.session
        await connection.act(session.start())
        actions = session.receive(json.dumps({"type": "speak", "context_id": "a", "text": "Hello there."}))
        job = next(a.job for a in actions if isinstance(a, Synthesize))
        await connection.act([a for a in actions if not isinstance(a, Synthesize)])  # no Triton here
        pcm = np.zeros(EMBEDDED.sample_rate, np.float32)  # a second: 50 frames
        sending = asyncio.create_task(connection.act(session.audio(job.id, pcm, 0, []), job.id))
        await asyncio.sleep(0)  # the first frame is written and waits
        await connection.act(session.receive(json.dumps({"type": "cancel", "context_id": "a"})))
        ws.release.set()
        with pytest.raises(JobUnwanted):  # the job's task ends there, closing its Triton request
            await sending
        return ws.sent

    sent = asyncio.run(main())
    assert sent[:3] == ["ready", "audio_start", ("frame", 0)]
    assert sent[3:] == ["cancelled"]  # none of the other 49 frames after it


class StuckSocket:
    """Every send waits (longer than the test's send timeout)."""

    closed = False

    async def send_bytes(self, data):
        await asyncio.sleep(1)


@pytest.mark.parametrize("buffered, timed", [
    (0, False),  # empty: the frame fits, the send cannot wait on the client
    (Transport.LOW, False),  # at the low mark: not paused, and the frame stays under the high one
    (Transport.LOW + 1, True),  # past it: the transport may be paused
    (Transport.HIGH - 100, True),  # the frame would take it past the high mark
])
def test_only_a_send_that_can_wait_on_the_client_is_timed(buffered, timed):
    async def main():
        transport = Transport(buffered)
        gateway = Gateway(Settings(triton_urls=(), send_timeout_s=0.05))
        connection = Connection(StuckSocket(), gateway, "10.0.0.1", transport=transport)
        try:
            await connection.send(b"x" * 200)
        except ConnectionClosed:
            return True, transport.aborted
        return False, transport.aborted

    assert asyncio.run(main()) == (timed, timed)  # a timed send that ran out drops the client
