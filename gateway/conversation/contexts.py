"""A context and what speaking mode needs around it, sans I/O: the marks and rates in
its queue, the connection's limits, the gateway's word on a new stream (Admission), and
where a connection reports what the metrics count (Observer).
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

from contract import models as c
from contract.text import Sentence
from gateway.conversation.actions import Job, Send
from gateway.conversation.audio import FrameEncoder
from gateway.conversation.chatting import ChatObserver
from gateway.conversation.segmenter import Segmenter
from gateway.conversation.ssml import Pause, Spoken, SsmlError, read_ssml, with_phonemes
from gateway.conversation.start_gate import StartGate
from gateway.messages import ContextMessage, ProtocolError, encode
from gateway.settings import Settings
from speechstream import protocol as v1


class Mark(enum.Enum):
    FLUSH = "flush"  # deliver every sample so far; the context goes on
    CLOSE = "close"  # deliver every sample so far; the context ends


@dataclass(frozen=True)
class Rate:
    """SSML's <prosody rate>: the sentences after it are spoken `rate` times as fast."""

    rate: float


@dataclass(frozen=True)
class Limits:
    """The per-connection limits a session enforces; the defaults are the settings'."""

    max_text_chars: int = Settings.max_text_chars
    max_contexts: int = Settings.max_contexts
    max_message_bytes: int = Settings.max_message_bytes
    chat_speculation_chars: int = Settings.chat_speculation_chars

    @classmethod
    def of(cls, settings: Settings) -> Limits:
        return cls(settings.max_text_chars, settings.max_contexts, settings.max_message_bytes,
                   settings.chat_speculation_chars)


class Admission(Protocol):
    """The gateway's word on a new stream (a context opening), and on how the streams
    being spoken keep up."""

    def refusal(self) -> ProtocolError | None:
        """Why the stream may not start now, or None."""
        ...

    def wait(self, context_id: str) -> int | None:
        """Queue the context for capacity: its position, or None when the queue is full.
        The gateway later calls Session.admitted or Session.moved for it."""
        ...

    def leave(self, context_id: str) -> None:
        """The queued context gave up its place."""
        ...

    def starts_in_time(self, context_id: str, in_hand_s: float) -> bool:
        """Whether the context, starting with `in_hand_s` of audio, will get the rest in
        time whatever the rate its audio came at so far: the servers have room to spare,
        and every other stream being spoken has sounded and is further ahead of its
        listener."""
        ...

    def others_first_s(self, context_id: str, first_chunk_s: float) -> float:
        """How long the servers will take to make the first chunks of the other streams
        being spoken that await their first audio, each taken to hold `first_chunk_s` of
        audio (streams starting together get first chunks sized alike): they go before the
        context's next chunk there."""
        ...


class AdmitAll:
    """An Admission for a session on its own: every stream starts at once; whether one
    starts in time is not known here."""

    def refusal(self) -> ProtocolError | None:
        return None

    def wait(self, context_id: str) -> int | None:
        return None

    def leave(self, context_id: str) -> None:
        pass

    def starts_in_time(self, context_id: str, in_hand_s: float) -> bool:
        return False

    def others_first_s(self, context_id: str, first_chunk_s: float) -> float:
        return 0.0


class Observer(ChatObserver, Protocol):
    """Where a connection reports what the gateway's metrics count."""

    def error(self, code: str) -> None: ...
    def first_audio(self, seconds: float) -> None: ...
    def audio(self, seconds: float) -> None: ...


@dataclass(eq=False)
class Context:
    id: str
    stream_number: int
    voice: str
    voice_params: tuple[tuple[str, float | int], ...]  # the config's, with the opening message's over them
    encoder: FrameEncoder
    segmenter: Segmenter
    queue: deque[Sentence | Mark | Pause | Rate] = field(default_factory=deque)  # Pause: SSML's <break>
    closed: bool = False
    job: Job | None = None  # the synthesis in flight
    seq: int = 0
    ready_at: float | None = None  # when text arrived while the context was idle
    # Its listener's clock: when the first audio after idle went out, and where in the audio.
    heard_at: float | None = None
    heard_from_ms: float = 0.0
    queued: bool = False  # waiting in the admission queue: it speaks once admitted
    # A chat reply's words as spoken, (word, end in ms of its audio), so that barge-in
    # keeps in the conversation what was heard; None for other contexts.
    words: list[tuple[str, float]] | None = None
    rate: float = 1.0  # the speed of the sentences now spoken, as SSML's <prosody rate> set it
    gate: StartGate | None = None  # holds its first audio after idle until a stall cannot follow

    @property
    def busy(self) -> bool:
        return self.job is not None or bool(self.queue)

    @property
    def starting(self) -> bool:
        """Whether it awaits its first audio after idle from the servers (none has come,
        held or sent)."""
        return self.busy and not self.queued and self.ready_at is not None and (
            self.gate is None or self.gate.in_hand_s == 0)

    def lead_s(self, now: float) -> float | None:
        """How far its audio is ahead of a listener playing it in real time since the
        first audio after idle (0 while that first audio is awaited); None when it has
        nothing to speak."""
        if not self.busy or self.queued:
            return None
        if self.heard_at is None or self.ready_at is not None:
            return 0.0
        return (self.encoder.position_ms - self.heard_from_ms) / 1000 - (now - self.heard_at)

    def heard_ms(self, now: float) -> float:
        """How much of its audio its listener has heard by `now`."""
        return 0.0 if self.heard_at is None else self.heard_from_ms + (now - self.heard_at) * 1000

    def heard_text(self, now: float) -> str:
        """The words its listener has heard whole by `now`."""
        heard = self.heard_ms(now)
        return " ".join(word for word, end_ms in self.words or () if end_ms <= heard)

    @property
    def waiting_chars(self) -> int:
        return sum(len(s.text) for s in self.queue if isinstance(s, Sentence)) + len(self.segmenter.pending)

    def audio_start(self) -> Send:
        return Send(encode(
            "audio_start", context_id=self.id, stream=self.stream_number, voice=self.voice,
            speaker=dict(self.voice_params).get(c.SPEAKER, 0), sample_rate=self.encoder.rate,
        ))

    def queued_at(self, position: int) -> Send:
        return Send(encode("queued", context_id=self.id, position=position))

    def params(self, length_scale: float) -> tuple[tuple[str, float | int], ...]:
        """Its voice parameters, its length scale (the voice's `length_scale` by default)
        divided by SSML's rate."""
        if self.rate == 1.0:
            return self.voice_params
        params = dict(self.voice_params)
        params[c.LENGTH_SCALE] = params.get(c.LENGTH_SCALE, length_scale) / self.rate
        return tuple(params.items())

    def timestamps(self, sentence_index: int, words: list[tuple[str, int, int]]) -> str:
        """Word times in ms of its audio, and the sentence's span in its text (the job's
        words, in samples of the job's audio)."""
        job = self.job

        def ms(sample: int) -> int:
            return round(job.start_ms + sample * 1000 / self.encoder.source_rate)

        sentence = job.sentences[sentence_index]
        return encode(
            "timestamps", context_id=job.context_id, words=[w for w, _, _ in words],
            start_ms=[ms(a) for _, a, _ in words], end_ms=[ms(b) for _, _, b in words],
            text_span=[sentence.start, sentence.end],
        )


def read_document(message: ContextMessage) -> list[Spoken | Pause]:
    """A `speak` message's SSML document; invalid_ssml if it is not one we read."""
    try:
        return read_ssml(message.text)
    except SsmlError as e:
        raise ProtocolError(v1.INVALID_SSML, str(e), message.context_id) from None


def ssml_queue(context: Context, document: list[Spoken | Pause]) -> list[Sentence | Pause | Rate]:
    """An SSML document's queue: each stretch of text cut into sentences of its own,
    after the rate it is read at where that changes; its pauses between."""
    items: list[Sentence | Pause | Rate] = []
    rate = context.rate
    for piece in document:
        if isinstance(piece, Pause):
            items.append(piece)
            continue
        if piece.rate != rate:
            items.append(Rate(piece.rate))
            rate = piece.rate
        at = context.segmenter.end
        items += with_phonemes(context.segmenter.append(piece.text) + context.segmenter.flush(), piece, at)
    return items
