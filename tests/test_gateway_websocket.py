"""The WebSocket shell's ordering: a job's frames that wait on a slow client must not
follow its context's `cancelled`. The exact interleaving (a send blocked while the
cancel is handled) cannot be produced on demand over a real socket, so this test stands
a minimal WebSocket in for aiohttp's: sends that block until released, and a record of
what went out in which order. Everything else (Session, Connection) is the real code."""

import asyncio
import json

import numpy as np
import pytest

from gateway.service import Gateway
from gateway.session import Synthesize
from gateway.settings import Settings
from gateway.websocket import Connection, JobUnwanted
from contract.voices import EMBEDDED
from contract import protocol as v1


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


def test_frames_waiting_on_a_slow_client_stop_at_the_cancel():
    async def main():
        ws = SlowSocket()
        connection = Connection(ws, Gateway(Settings(triton_urls=())), "10.0.0.1", transport=None)
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
