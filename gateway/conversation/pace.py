"""How far a streamed HTTP speech body is ahead of its listener: the lead that admission
weighs for it, as it does a WebSocket context's (contexts.Context.lead_s)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(eq=False)
class Pace:
    """A streamed HTTP speech body against a listener playing it from its first audio."""

    client: str = ""  # the address that asked for it
    heard_at: float | None = None  # when its first audio went out (time.monotonic)
    audio_s: float = 0.0  # the audio sent since
    streamed: bool = True  # False: a whole body, which no listener plays as it comes

    @property
    def starting(self) -> bool:
        """Whether it awaits its first audio from the servers (a transcription never does)."""
        return self.streamed and self.heard_at is None

    def lead_s(self, now: float) -> float | None:
        if not self.streamed:
            return None
        return 0.0 if self.heard_at is None else self.audio_s - (now - self.heard_at)
