"""The protocol-v1 client, in the manner of the `websockets` library: two clients side by
side over one sans-I/O core.

- speechstream.client.events: received messages and frames → events naming their contexts (`Router`).
- speechstream.client.resume: how a context goes on over another connection (`Progress`, `Splice`).
- speechstream.client.asyncio_client: `SpeechClient`, several contexts per connection, resuming.
- speechstream.client.sync_client: `SyncSpeechClient`, blocking, one utterance at a time.
- speechstream.client.say: `speechstream-say`.
- speechstream.client.listen: `speechstream-listen`, dictation and spoken conversations from files.

    async with await SpeechClient.connect("ws://127.0.0.1:8080/v1/stream") as client:
        async for frame in client.speak("Hello there."):
            ...  # frame.payload is one Opus packet

    with SyncSpeechClient.connect("ws://127.0.0.1:8080/v1/stream", format="pcm_s16le") as client:
        pcm = b"".join(frame.payload for frame in client.speak("Hello there."))
"""

from speechstream.client.asyncio_client import Context, Reconnect, SpeechClient, connection
from speechstream.client.events import (
    Event,
    Heard,
    Microphone,
    Router,
    SpeechError,
    SpeechStarted,
    SpeechStopped,
    Transcript,
    audio_end_s,
    frame_samples,
)
from speechstream.client.resume import Anchor, Progress, Splice
from speechstream.client.sync_client import SyncSpeechClient

__all__ = [
    "Anchor", "Context", "Event", "Heard", "Microphone", "Progress", "Reconnect", "Router", "SpeechClient",
    "SpeechError", "SpeechStarted", "SpeechStopped", "Splice", "SyncSpeechClient", "Transcript", "audio_end_s",
    "connection", "frame_samples",
]
