"""What the sans-I/O session asks its I/O shell (gateway/protocols/websocket.py) to do, in order:
send a frame, start or stop a synthesis job, start or stop a Thinker request, pass the
microphone's audio to the recognizer, close the connection."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from contract.text import Sentence


@dataclass(frozen=True)
class Job:
    """One `tts` request: a context's next sentences, spoken with its voice and parameters."""

    id: int
    context_id: str
    sentences: tuple[Sentence, ...]
    voice: str
    voice_params: tuple[tuple[str, float | int], ...]
    start_ms: float  # where its audio starts in the context's audio, for timestamps


@dataclass(frozen=True)
class Send:
    data: str | bytes
    audio_s: float = 0.0  # the audio it carries: unread by the client until its bytes are taken


@dataclass(frozen=True)
class Synthesize:
    job: Job


@dataclass(frozen=True)
class Stop:
    job_id: int


@dataclass(frozen=True)
class Close:
    code: int
    reason: str


@dataclass(frozen=True)
class Think:
    """One Thinker request of a chat turn: the reply to `messages`, verifying `draft`
    first, or going on after `prefix` (the reply's start, already decided)."""

    id: int
    turn_id: str
    messages: tuple[dict[str, str], ...]
    draft: tuple[int, ...]
    top_k: int
    max_tokens: int
    temperature: float
    prefix: tuple[int, ...] = ()
    seed: int | None = None


@dataclass(frozen=True)
class StopThinking:
    think_id: int


@dataclass(frozen=True)
class Hear:
    """Listen mode: the microphone's next audio for the recognizer (int16 PCM at
    contract.models.ASR_SAMPLE_RATE), or with `end`, the end of the speaker's turn now."""

    audio: np.ndarray | None = None
    end: bool = False
    at_ms: float = 0.0  # where the audio starts in the microphone's timeline


Action = Send | Synthesize | Stop | Close | Think | StopThinking | Hear
