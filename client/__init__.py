"""The protocol-v1 client: `SpeechClient` (asyncio, several contexts per connection),
`SyncSpeechClient` (blocking), and `speechstream-say` (client.say)."""

from client.speech import (
    Anchor, Context, Event, Progress, Reconnect, Router, SpeechClient, SpeechError, Splice, SyncSpeechClient, audio_end_s,
    connection, frame_samples,
)

__all__ = [
    "Anchor", "Context", "Event", "Progress", "Reconnect", "Router", "SpeechClient", "SpeechError", "Splice",
    "SyncSpeechClient", "audio_end_s", "connection", "frame_samples",
]
