"""The protocol-v1 client: `SpeechClient` (asyncio, several contexts per connection),
`SyncSpeechClient` (blocking), and `speechstream-say` (client.say)."""

from client.speech import Context, Event, Router, SpeechClient, SpeechError, SyncSpeechClient, audio_end_s, connection

__all__ = ["Context", "Event", "Router", "SpeechClient", "SpeechError", "SyncSpeechClient", "audio_end_s", "connection"]
