"""Protocol v1's rules, sans I/O: one `Session` per WebSocket connection.

The session takes what happens — a client frame, a chunk of synthesized audio, the end
or failure of a synthesis job, the connection falling idle — and answers with actions
for its I/O shell (gateway/websocket.py) to carry out, in order (gateway/actions.py):
send this, start synthesizing that, stop that job, close the connection. No awaits, no
sockets, no Triton here, so every rule is tested without a server
(tests/unit/test_gateway_session.py). Chat mode's turns are run by gateway/turns.py; their
replies are spoken on contexts of the session's. Listen mode's audio and transcripts pass
through gateway/listening.py; a spoken turn is a chat turn when the config has `chat`.

Each context cuts its text into sentences (segmenter.Segmenter), queues them with the
flush and close marks between them, and has at most one synthesis job in flight: the
next job starts only when the shell reports the last one finished, and the shell
reports that only after the job's audio was sent. A client that stops reading thus
stops its contexts' synthesis, one bounded request (segmenter.REQUEST_CHARS) at most.
"""

from __future__ import annotations

import enum
import logging
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from contract import models as c
from contract.text import Sentence
from contract.voices import EMBEDDED_ONLY, VoiceInfo
from gateway.actions import Action, Close, Hear, Job, Send, Stop, Synthesize
from gateway.audio import FrameEncoder, pre_skip
from gateway.chat import Held
from gateway.listening import Microphone
from gateway.protocol import (
    TEXT_TYPES,
    Config,
    ContextMessage,
    EndOfSpeech,
    ProtocolError,
    UserMessage,
    encode,
    parse_message,
)
from gateway.protocol import error as error_message  # the frame; Session.error sends it
from gateway.segmenter import Segmenter, batches
from gateway.settings import Settings
from gateway.ssml import Pause, Spoken, SsmlError, read_ssml, with_phonemes
from gateway.start_gate import SpeakingPace, StartGate
from gateway.turns import ChatObserver, Turns
from speechstream import protocol as v1

log = logging.getLogger("speechstream.gateway")


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
    """Where a session reports what the gateway's metrics count."""

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


class Session:
    """One connection speaking protocol v1."""

    def __init__(
        self, limits: Limits, observer: Observer, clock: Callable[[], float] = time.monotonic,
        session_id: str | None = None, admission: Admission | None = None,
        voices: Mapping[str, VoiceInfo] = EMBEDDED_ONLY, chat: bool = False, listen: bool = False,
        start_when_safe: bool = True, pace: SpeakingPace | None = None,
    ) -> None:
        self.limits = limits
        self.start_when_safe = start_when_safe  # hold a context's first audio until a stall cannot follow (StartGate)
        self.pace = pace or SpeakingPace()  # what the gate expects of a voice's text (the gateway's, shared)
        self.observer = observer
        self.admission = admission or AdmitAll()  # asked before a context opens
        self.clock = clock
        self.id = session_id or uuid.uuid4().hex[:12]
        self.voices = voices  # the default first
        self.config = Config(next(iter(voices)))
        self.contexts: dict[str, Context] = {}
        self._last_stream_number = 0  # the last stream number given out; also: a context was opened
        self._jobs = 0
        self.chat = chat  # a Thinker serves chat mode
        self.listen = listen  # a recognizer serves listen mode
        self.microphone: Microphone | None = None  # once a config asked for it
        self._replies: dict[str, Context] = {}  # chat replies' contexts, kept after `done` while their audio plays
        # Chat turns, until their reply is written (each reply is a context of its turn's id).
        self.turns = Turns(self, observer, voices, limits.chat_speculation_chars)

    @property
    def history(self) -> list[dict[str, str]]:
        """The chat conversation: user turns and the replies spoken."""
        return self.turns.history

    @property
    def busy(self) -> bool:
        """Whether any context has text to speak: the connection is not idle."""
        return any(context.busy for context in self.contexts.values())

    @property
    def streams(self) -> int:
        """Contexts open and admitted: those that count against capacity."""
        return sum(not context.queued for context in self.contexts.values())

    def leads(self, but: str | None = None) -> list[float]:
        """How far each context being spoken (but the one named `but`) is ahead of its
        listener (Context.lead_s)."""
        now = self.clock()
        return [
            lead for context in self.contexts.values()
            if context.id != but and (lead := context.lead_s(now)) is not None
        ]

    def start(self) -> list[Action]:
        return [self._ready()]

    def is_current(self, job_id: int) -> bool:
        """Whether job `job_id` is still wanted (not cancelled, its context not failed)."""
        if self.turns.held(job_id) is not None:
            return True
        return any(context.job is not None and context.job.id == job_id for context in self.contexts.values())

    # Client frames

    def receive(self, frame: str | bytes) -> list[Action]:
        """The actions answering one client frame; a refused one gets an `error`."""
        try:
            return self._handle(self._parse(frame))
        except ProtocolError as e:
            return [self.error(e.code, e.message, e.context_id, e.retry_after_ms)]
        except Exception:
            log.exception("session %s: unexpected error handling a message", self.id)
            return [self.error(v1.INTERNAL_ERROR, "the server failed to handle this message")]

    def _parse(self, frame: str | bytes) -> Config | ContextMessage | UserMessage | EndOfSpeech | bytes:
        size = len(frame) if isinstance(frame, bytes) else len(frame.encode("utf-8", "surrogatepass"))
        if size > self.limits.max_message_bytes:
            raise ProtocolError(
                v1.MESSAGE_TOO_LARGE, f"message of {size} bytes; the limit is {self.limits.max_message_bytes}"
            )
        if isinstance(frame, bytes) and self.microphone is not None:
            return frame  # the microphone's audio
        return parse_message(frame, tuple(self.voices), self.limits.max_text_chars)

    def _handle(self, message: Config | ContextMessage | UserMessage | EndOfSpeech | bytes) -> list[Action]:
        if isinstance(message, bytes):
            return self.microphone.audio(message, self.clock())
        if isinstance(message, Config):
            return self._configure(message)
        if isinstance(message, UserMessage):
            return self._user(message)
        if isinstance(message, EndOfSpeech):
            if self.microphone is None:
                raise ProtocolError(v1.INVALID_MESSAGE, "end_of_speech is for listen mode: send a config with `listen` first")
            return [Hear(end=True)]
        if message.type == "cancel" and message.context_id in self.turns:
            return self.turns.cancel(message.context_id)
        context = self.contexts.get(message.context_id)
        if message.type in TEXT_TYPES:
            return self._text(context, message)
        if context is None:
            raise ProtocolError(v1.UNKNOWN_CONTEXT, f"no open context '{message.context_id}'", message.context_id)
        if message.type == "cancel":
            return self._cancel(context)
        if context.closed:
            raise ProtocolError(v1.CONTEXT_CLOSED, f"context '{context.id}' is closed", context.id)
        return self._submit(context, *context.segmenter.flush(), Mark.FLUSH if message.type == "flush" else Mark.CLOSE)

    def _configure(self, config: Config) -> list[Action]:
        if self._last_stream_number or self.turns.ids or self.microphone is not None:
            raise ProtocolError(v1.CONFIG_TOO_LATE, "config must come before the first speak, text, user or audio")
        if config.listen is not None and not self.listen:
            raise ProtocolError(v1.LISTEN_UNAVAILABLE, "this server runs no speech recognizer")
        if config.listen is not None and config.chat is not None and not self.chat:
            raise ProtocolError(v1.CHAT_UNAVAILABLE, "this server runs no chat model: `listen` without `chat` dictates")
        self.config = config
        if config.listen is not None:
            self.microphone = Microphone(config.listen)
        return [self._ready()]

    def _text(self, context: Context | None, message: ContextMessage) -> list[Action]:
        if context is not None and message.type == "speak":
            raise ProtocolError(v1.CONTEXT_EXISTS, f"context '{context.id}' is already open", context.id)
        if context is not None and context.closed:
            raise ProtocolError(v1.CONTEXT_CLOSED, f"context '{context.id}' is closed", context.id)
        if context is not None and (message.voice or message.voice_params):
            raise ProtocolError(
                v1.INVALID_FIELD, f"context '{context.id}' is open: its voice and parameters are set when it opens", context.id
            )
        waiting = 0 if context is None else context.waiting_chars
        if waiting + len(message.text) > self.limits.max_text_chars:
            raise ProtocolError(
                v1.TEXT_TOO_LONG,
                f"{waiting} characters are already waiting for synthesis; the limit is {self.limits.max_text_chars}",
                message.context_id,
            )
        ssml = message.ssml if message.ssml is not None else self.config.ssml
        document = self._read_ssml(message) if message.type == "speak" and ssml else None
        actions: list[Action] = []
        if context is None:
            context, actions = self._open(message)
        if document is not None:
            return actions + self._submit(context, *self._ssml_queue(context, document), Mark.CLOSE)
        sentences = context.segmenter.append(message.text)
        if message.type == "speak":
            return actions + self._submit(context, *sentences, *context.segmenter.flush(), Mark.CLOSE)
        return actions + self._submit(context, *sentences)

    @staticmethod
    def _read_ssml(message: ContextMessage) -> list[Spoken | Pause]:
        try:
            return read_ssml(message.text)
        except SsmlError as e:
            raise ProtocolError(v1.INVALID_SSML, str(e), message.context_id) from None

    @staticmethod
    def _ssml_queue(context: Context, document: list[Spoken | Pause]) -> list[Sentence | Pause | Rate]:
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

    def _open(self, message: ContextMessage) -> tuple[Context, list[Action]]:
        """A new context with the message's voice and parameters over the config's, and
        its first words: `audio_start`, or `queued` where the client asked to wait for
        capacity rather than be refused it."""
        context_id = message.context_id
        if len(self.contexts) >= self.limits.max_contexts:
            raise ProtocolError(v1.TOO_MANY_CONTEXTS, f"at most {self.limits.max_contexts} open contexts", context_id)
        cfg = self.config
        voice = self.voices[message.voice or cfg.voice]
        params = tuple((dict(cfg.voice_params) | dict(message.voice_params)).items())
        if problem := voice.speaker_problem(dict(params).get(c.SPEAKER, 0)):
            raise ProtocolError(v1.INVALID_FIELD, problem, context_id)
        position = None
        if refusal := self.admission.refusal():
            refusal.context_id = context_id
            if refusal.code != v1.SERVER_BUSY or not self.config.queue:
                raise refusal
            if (position := self.admission.wait(context_id)) is None:
                refusal.message += "; the admission queue is full too"
                raise refusal
        self._last_stream_number = self._last_stream_number % 0xFFFF + 1
        encoder = FrameEncoder(voice.sample_rate, cfg.sample_rate, cfg.frame_ms, cfg.format)
        segmenter = Segmenter(language=voice.language_family)
        context = Context(context_id, self._last_stream_number, voice.name, params, encoder, segmenter, queued=position is not None)
        self.contexts[context_id] = context
        if context.queued:
            return context, [self._queued(context, position)]
        return context, [self._audio_start(context)]

    def admitted(self, context_id: str) -> list[Action]:
        """The queued context's turn came: it starts speaking."""
        context = self.contexts.get(context_id)
        if context is None or not context.queued:
            return []
        context.queued = False
        return [self._audio_start(context)] + self._advance(context)

    def moved(self, context_id: str, position: int) -> list[Action]:
        """The queued context moved up to `position`."""
        context = self.contexts.get(context_id)
        return [self._queued(context, position)] if context is not None and context.queued else []

    def _cancel(self, context: Context) -> list[Action]:
        self._remove(context)
        stop = [Stop(context.job.id)] if context.job is not None else []
        return stop + [Send(encode("cancelled", context_id=context.id))]

    def _submit(self, context: Context, *items: Sentence | Mark) -> list[Action]:
        if not context.busy and any(isinstance(item, Sentence) for item in items):
            context.ready_at = self.clock()
        context.queue.extend(items)
        if items and items[-1] is Mark.CLOSE:
            context.closed = True
        return self._advance(context)

    def _advance(self, context: Context) -> list[Action]:
        """Deliver the marks at the head of the queue, then start the next job, if idle."""
        actions: list[Action] = []
        while context.job is None and context.queue and not context.queued:
            if isinstance(context.queue[0], Mark):
                actions += self._deliver_mark(context, context.queue.popleft())
                continue
            if isinstance(context.queue[0], Rate):
                context.rate = context.queue.popleft().rate
                continue
            if isinstance(context.queue[0], Pause):
                silence = np.zeros(context.queue.popleft().ms * context.encoder.source_rate // 1000, np.float32)
                frames = self._frames(context, context.encoder.push(silence))
                actions += self._through_gate(context, frames, len(silence) / context.encoder.source_rate)
                continue
            run = []
            while context.queue and isinstance(context.queue[0], Sentence):
                run.append(context.queue.popleft())
            batch = next(batches(run))
            context.queue.extendleft(reversed(run[len(batch) :]))
            start_ms = context.encoder.position_ms
            context.job = Job(self.new_job(), context.id, tuple(batch), context.voice, self._params(context), start_ms)
            if self.start_when_safe and context.ready_at is not None and context.gate is None and context.words is None:
                chars = sum(len(s.text) for s in batch) + context.waiting_chars
                expected_s = chars * self.pace.seconds_per_char(context.voice) / context.rate
                context.gate = StartGate(self.clock(), expected_s, self.pace.prompt_s(context.voice))
            actions.append(Synthesize(context.job))
        return actions

    def _params(self, context: Context) -> tuple[tuple[str, float | int], ...]:
        """The context's voice parameters, its length scale divided by SSML's rate."""
        if context.rate == 1.0:
            return context.voice_params
        params = dict(context.voice_params)
        params[c.LENGTH_SCALE] = params.get(c.LENGTH_SCALE, self.voices[context.voice].length_scale) / context.rate
        return tuple(params.items())

    def _deliver_mark(self, context: Context, mark: Mark) -> list[Action]:
        """Every sample so far goes out (the partial frame padded); then `flushed`, or
        `done` and the context ends."""
        actions = self._release(context, self._frames(context, context.encoder.finish(), last=mark is Mark.CLOSE))
        if mark is Mark.FLUSH:
            return actions + [Send(encode("flushed", context_id=context.id))]
        encoder = context.encoder
        ms = round((encoder.samples - encoder.padding) * 1000 / encoder.rate)  # without the padding
        del self.contexts[context.id]  # a chat reply's stays in _replies while it plays
        return actions + [Send(encode("done", context_id=context.id, audio_ms=ms))]

    # Synthesis events

    def audio(
        self, job_id: int, pcm: np.ndarray, sentence_index: int, words: list[tuple[str, int, int]]
    ) -> list[Action]:
        """A chunk of job `job_id`'s audio at the voice's rate; words (word, start, end
        sample of the job's audio) come with the first chunk of each sentence."""
        if (held := self.turns.held(job_id)) is not None:
            held.chunks.append((pcm, sentence_index, words))
            return []
        context = self._context_of(job_id)
        if context is None:
            return []  # cancelled meanwhile
        actions: list[Action] = []
        if self.config.timestamps and words:
            actions.append(Send(self._timestamps(context, sentence_index, words)))
        if context.words is not None:
            context.words += [(word, context.job.start_ms + end * 1000 / context.encoder.source_rate)
                              for word, _, end in words]
        if context.gate is not None and not context.gate.in_hand_s:
            self.pace.started(context.voice, self.clock() - context.gate.began)
        actions += self._frames(context, context.encoder.push(pcm))
        return self._through_gate(context, actions, len(pcm) / context.encoder.source_rate)

    def finished(self, job_id: int) -> list[Action]:
        """Job `job_id` delivered all its audio: the context goes on to its next item."""
        if (held := self.turns.held(job_id)) is not None:
            held.finished = True
            return []
        context = self._context_of(job_id)
        if context is None:
            return []
        job, context.job = context.job, None
        chars = sum(len(s.text) for s in job.sentences)
        self.pace.spoke(job.voice, chars, (context.encoder.position_ms - job.start_ms) / 1000 * context.rate)
        actions = self._advance(context)
        if context.job is None and context.gate is not None:  # no more audio is coming for now
            return self._release(context, []) + actions
        return actions

    def resuming(self, job_id: int, code: str, message: str, within_s: float) -> list[Action]:
        """Job `job_id`'s server or stage went away (`code`, `message`): what it had not
        delivered is being issued again for up to `within_s`. The client is told, and where
        in the context's audio the stream will go on (held audio is only late)."""
        context = None if self.turns.held(job_id) is not None else self._context_of(job_id)
        if context is None:
            return []
        return [Send(encode("resuming", context_id=context.id, code=code, message=message,
                            audio_ms=round(context.encoder.position_ms), within_ms=round(within_s * 1000)))]

    def failed(self, job_id: int, code: str, message: str) -> list[Action]:
        """Job `job_id` failed: its context ends with an `error` (held audio is only dropped)."""
        if self.turns.held_failed(job_id):
            return []
        context = self._context_of(job_id)
        if context is None:
            return []
        held = self._release(context, [])  # what came before the failure is heard
        del self.contexts[context.id]
        return held + [self.error(code, message, context.id)]

    def _context_of(self, job_id: int) -> Context | None:
        return next((x for x in self.contexts.values() if x.job is not None and x.job.id == job_id), None)

    # Chat mode (gateway/turns.py runs the turns by gateway/chat.py's rules)

    def _user(self, message: UserMessage) -> list[Action]:
        if not self.chat:
            raise ProtocolError(v1.CHAT_UNAVAILABLE, "this server runs no chat model", message.turn_id)
        if message.turn_id in self.contexts:
            raise ProtocolError(v1.CONTEXT_EXISTS, f"turn '{message.turn_id}' has ended: its reply is a context", message.turn_id)
        if message.turn_id not in self.turns and len(self.turns.ids | self.contexts.keys()) >= self.limits.max_contexts:
            raise ProtocolError(v1.TOO_MANY_CONTEXTS, f"at most {self.limits.max_contexts} open contexts and turns", message.turn_id)
        return self.turns.user(message)

    def thought(self, think_id: int, ids: list[int], text: str, accepted: int | None) -> list[Action]:
        """A piece of Thinker request `think_id`'s reply."""
        return self.turns.thought(think_id, ids, text, accepted)

    def thought_done(self, think_id: int) -> list[Action]:
        """Thinker request `think_id` ended."""
        return self.turns.thought_done(think_id)

    def thought_failed(self, think_id: int, code: str, message: str) -> list[Action]:
        """Thinker request `think_id` failed."""
        return self.turns.thought_failed(think_id, code, message)

    # Listen mode (gateway/listening.py checks the audio and words the messages)

    def recognized(self, kind: str, utterance: object, audio_ms: int, text: str) -> list[Action]:
        """A recognizer event (one of contract.models.ASR_EVENTS) of `utterance`, a key
        unique in the connection: its message, and in chat mode what the spoken turn does."""
        if self.microphone is None:
            return []
        event = self.microphone.recognized(kind, utterance, audio_ms, text)
        actions: list[Action] = [Send(event.message)]
        if self.config.chat is None:
            return actions  # dictation
        if kind == c.SPEECH_STARTED:
            return actions + (self._barge_in() if self.config.listen.barge_in else [])
        if kind == c.PARTIAL and text.strip():
            return actions + self._spoken(UserMessage(event.turn_id, text, final=False))
        if kind == c.FINAL:  # an empty one was noise: no turn
            return actions + (self._spoken(UserMessage(event.turn_id, text, final=True)) if text.strip()
                              else self.turns.forget(event.turn_id))
        return actions

    def _spoken(self, message: UserMessage) -> list[Action]:
        try:
            return self._user(message)
        except ProtocolError as e:
            return [self.error(e.code, e.message, e.context_id, e.retry_after_ms)]

    def _barge_in(self) -> list[Action]:
        """New speech: every reply answered or being spoken stops, and the conversation
        keeps of each only the words its listener heard."""
        now = self.clock()
        actions: list[Action] = []
        for turn_id in dict.fromkeys([*(t for t in self.turns.ids if self.turns.answering(t)), *self._replies]):
            reply = self._replies.pop(turn_id, None)
            if reply is not None and reply.id not in self.contexts and reply.heard_ms(now) >= reply.encoder.position_ms:
                continue  # heard whole
            actions += self.turns.interrupt(turn_id, "" if reply is None else reply.heard_text(now))
            if reply is not None and reply.id in self.contexts:
                actions += self._cancel(reply)
            elif reply is not None:
                actions.append(Send(encode("cancelled", context_id=turn_id)))  # all sent, still playing: the client stops it
        return actions

    # What chat turns ask of the session (turns.Replies): a turn's reply is a context of its id

    def refused(self) -> bool:
        return self.admission.refusal() is not None

    def new_job(self) -> int:
        self._jobs += 1
        return self._jobs

    def open_reply(self, turn_id: str) -> list[Action]:
        context, opened = self._open(ContextMessage("text", turn_id))
        context.closed = True  # the reply alone speaks on it
        if self.microphone is not None:
            context.words = []
            self._replies[turn_id] = context
        return opened

    def speak_held(self, turn_id: str, held: Held, text: str) -> list[Action]:
        """The held audio goes out now, as the reply's context's first job's."""
        context = self.contexts[turn_id]
        context.segmenter.append(text)
        context.segmenter.flush()  # spans stay those of the reply's text
        context.ready_at = self.clock()
        context.job = Job(held.job_id, turn_id, (held.sentence,), context.voice, context.voice_params, 0.0)
        actions: list[Action] = []
        for pcm, index, words in held.chunks:
            actions += self.audio(held.job_id, pcm, index, words)
        return actions + (self.finished(held.job_id) if held.finished else [])

    def speak_reply(self, turn_id: str, text: str) -> list[Action] | None:
        if (context := self.contexts.get(turn_id)) is None:
            return None
        return self._submit(context, *(context.segmenter.append(text) if text else []))

    def end_reply(self, turn_id: str) -> list[Action]:
        if (context := self.contexts.get(turn_id)) is None:
            return []
        return self._submit(context, *context.segmenter.flush(), Mark.CLOSE)

    def cancel_reply(self, turn_id: str) -> list[Action]:
        if (context := self.contexts.get(turn_id)) is not None:
            return self._cancel(context)
        return [Send(encode("cancelled", context_id=turn_id))]

    def fail_reply(self, turn_id: str) -> list[Action]:
        if (context := self.contexts.get(turn_id)) is None:
            return []
        self._remove(context)
        return [Stop(context.job.id)] if context.job is not None else []

    # The connection

    def idle(self, seconds: float) -> list[Action]:
        """No message for `seconds` (the idle timeout): close, unless a context is still
        speaking (a context left open with nothing to say is idle)."""
        if self.busy:
            return []
        log.info("session %s: idle for %g s, closing", self.id, seconds)
        return [self.error(v1.IDLE_TIMEOUT, f"no message for {seconds:g} s"), Close(1000, "idle timeout")]

    def abort(self) -> list[Action]:
        """The connection is gone: stop every job and Thinker request, give up every place in the queue."""
        jobs = [context.job.id for context in self.contexts.values() if context.job is not None]
        for context in list(self.contexts.values()):
            self._remove(context)
        return self.turns.abort() + [Stop(job_id) for job_id in jobs]

    def _remove(self, context: Context) -> None:
        del self.contexts[context.id]
        if context.queued:
            self.admission.leave(context.id)

    # Messages

    def _ready(self) -> Send:
        cfg = self.config
        return Send(encode(
            "ready", session_id=self.id, format=cfg.format, sample_rate=cfg.sample_rate,
            channels=1, frame_ms=cfg.frame_ms, pre_skip=pre_skip(cfg.format, cfg.sample_rate), voices=list(self.voices),
            # Voices without word timings (the AR family): their contexts get no `timestamps`.
            without_word_timestamps=[name for name, v in self.voices.items() if not v.word_timestamps],
        ))

    def _audio_start(self, context: Context) -> Send:
        return Send(encode(
            "audio_start", context_id=context.id, stream=context.stream_number, voice=context.voice,
            speaker=dict(context.voice_params).get(c.SPEAKER, 0), sample_rate=context.encoder.rate,
        ))

    def _queued(self, context: Context, position: int) -> Send:
        return Send(encode("queued", context_id=context.id, position=position))

    def error(
        self, code: str, message: str, context_id: str | None = None, retry_after_ms: int | None = None
    ) -> Send:
        """An `error` message, counted."""
        self.observer.error(code)
        return Send(error_message(code, message, context_id, retry_after_ms))

    def _frames(self, context: Context, payloads: list[bytes], last: bool = False) -> list[Action]:
        encoder = context.encoder
        first = encoder.samples - len(payloads) * encoder.frame_samples
        actions: list[Action] = []
        for i, payload in enumerate(payloads):
            end = last and i == len(payloads) - 1
            offset = first + i * encoder.frame_samples
            actions.append(Send(v1.audio_frame(context.stream_number, context.seq, offset, payload, end)))
            context.seq += 1
        if payloads and context.gate is not None and context.gate.first_sample is None:
            context.gate.first_sample = first
        elif payloads and context.ready_at is not None and context.gate is None:
            self._heard_from(context, first)
        self.observer.audio(len(payloads) * encoder.frame_samples / encoder.rate)
        return actions

    def _heard_from(self, context: Context, sample: int) -> None:
        """The first audio after idle goes out now, from `sample` of the context's audio."""
        self.observer.first_audio(self.clock() - context.ready_at)
        context.ready_at = None
        context.heard_at, context.heard_from_ms = self.clock(), sample * 1000 / context.encoder.rate

    def _through_gate(self, context: Context, actions: list[Action], seconds: float) -> list[Action]:
        """`actions`, with `seconds` of new audio among them, as they may go out: held
        while the context's start gate is shut (given the other streams starting) and the
        gateway cannot tell that it starts in time (Admission.starts_in_time); then all
        that was held."""
        if (gate := context.gate) is None:
            return actions
        gate.held += actions
        gate.arrived(seconds, self.clock())
        others_first_s = self.admission.others_first_s(context.id, gate.first_chunk_s)
        safe = gate.is_open(self.clock(), others_first_s) or self.admission.starts_in_time(context.id, gate.in_hand_s)
        return self._release(context, []) if safe else []

    def _release(self, context: Context, actions: list[Action]) -> list[Action]:
        """What the context's start gate held, if any, then `actions`: the gate is gone."""
        if (gate := context.gate) is None:
            return actions
        context.gate = None
        if gate.first_sample is not None:
            self._heard_from(context, gate.first_sample)
        return gate.held + actions

    def _timestamps(self, context: Context, sentence_index: int, words: list[tuple[str, int, int]]) -> str:
        """Word times in ms of the context's audio, and the sentence's span in its text."""
        job = context.job

        def ms(sample: int) -> int:
            return round(job.start_ms + sample * 1000 / context.encoder.source_rate)

        sentence = job.sentences[sentence_index]
        return encode(
            "timestamps", context_id=job.context_id, words=[w for w, _, _ in words],
            start_ms=[ms(a) for _, a, _ in words], end_ms=[ms(b) for _, _, b in words],
            text_span=[sentence.start, sentence.end],
        )
