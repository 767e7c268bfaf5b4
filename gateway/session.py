"""Protocol v1's rules, sans I/O: one `Session` per WebSocket connection.

The session takes what happens — a client frame, a chunk of synthesized audio, the end
or failure of a synthesis job, the connection falling idle — and answers with actions
for its I/O shell (gateway/websocket.py) to carry out, in order: send this, start
synthesizing that, stop that job, close the connection. No awaits, no sockets, no
Triton here, so every rule is tested without a server (tests/test_gateway_session.py).

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
from contract.voices import EMBEDDED_ONLY, VoiceInfo
from contract.text import Sentence

from gateway import chat as ch
from gateway import protocol as p
from gateway.actions import Action, Close, Job, Send, Stop, StopThinking, Synthesize, Think
from gateway.audio import FrameEncoder, pre_skip
from gateway.segmenter import Segmenter, batches
from gateway.settings import Settings
from contract import protocol as v1

log = logging.getLogger("speechstream.gateway")

class Mark(enum.Enum):
    FLUSH = "flush"  # deliver every sample so far; the context goes on
    CLOSE = "close"  # deliver every sample so far; the context ends


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
    """The gateway's word on a new stream (a context opening)."""

    def refusal(self) -> p.ProtocolError | None:
        """Why the stream may not start now, or None."""
        ...

    def wait(self, context_id: str) -> int | None:
        """Queue the context for capacity: its position, or None when the queue is full.
        The gateway later calls Session.admitted or Session.moved for it."""
        ...

    def leave(self, context_id: str) -> None:
        """The queued context gave up its place."""
        ...


class AdmitAll:
    """An Admission for a session on its own: every stream starts at once."""

    def refusal(self) -> p.ProtocolError | None:
        return None

    def wait(self, context_id: str) -> int | None:
        return None

    def leave(self, context_id: str) -> None:
        pass


class Observer(Protocol):
    """Where a session reports what the gateway's metrics count."""

    def error(self, code: str) -> None: ...
    def first_audio(self, seconds: float) -> None: ...
    def audio(self, seconds: float) -> None: ...
    def chat_turn(self, outcome: str) -> None: ...
    def chat_round(self) -> None: ...
    def held_audio(self, seconds: float, released: bool) -> None: ...


HISTORY_CHARS = 8_000  # the conversation a turn's prompt carries, newest first


@dataclass(eq=False)
class Context:
    id: str
    stream: int
    voice: str
    voice_params: tuple[tuple[str, float | int], ...]  # the config's, with the opening message's over them
    encoder: FrameEncoder
    segmenter: Segmenter
    queue: deque[Sentence | Mark] = field(default_factory=deque)
    closed: bool = False
    job: Job | None = None  # the synthesis in flight
    seq: int = 0
    ready_at: float | None = None  # when text arrived while the context was idle
    # Its listener's clock: when the first audio after idle went out, and where in the audio.
    heard_at: float | None = None
    heard_from_ms: float = 0.0
    queued: bool = False  # waiting in the admission queue: it speaks once admitted

    @property
    def busy(self) -> bool:
        return self.job is not None or bool(self.queue)

    def lead_s(self, now: float) -> float | None:
        """How far its audio is ahead of a listener playing it in real time since the
        first audio after idle (0 while that first audio is awaited); None when it has
        nothing to speak."""
        if not self.busy or self.queued:
            return None
        if self.heard_at is None or self.ready_at is not None:
            return 0.0
        return (self.encoder.position_ms - self.heard_from_ms) / 1000 - (now - self.heard_at)

    @property
    def waiting_chars(self) -> int:
        return sum(len(s.text) for s in self.queue if isinstance(s, Sentence)) + len(self.segmenter.pending)


class Session:
    """One connection speaking protocol v1."""

    def __init__(
        self, limits: Limits, observer: Observer, clock: Callable[[], float] = time.monotonic,
        session_id: str | None = None, admission: Admission | None = None,
        voices: Mapping[str, VoiceInfo] = EMBEDDED_ONLY, chat: bool = False,
    ) -> None:
        self.limits = limits
        self.observer = observer
        self.admission = admission or AdmitAll()  # asked before a context opens
        self.clock = clock
        self.id = session_id or uuid.uuid4().hex[:12]
        self.voices = voices  # the default first
        self.config = p.Config(next(iter(voices)))
        self.contexts: dict[str, Context] = {}
        self._streams = 0  # stream numbers given out; also: a context was opened
        self._jobs = 0
        self.chat = chat  # a Thinker serves chat mode
        self.turns: dict[str, ch.Turn] = {}  # chat turns until their reply is decided
        self.history: list[dict[str, str]] = []  # the conversation: user turns and the replies spoken
        self._held: dict[int, ch.Turn] = {}  # held audio's jobs, and their turns
        self._thinks = 0

    @property
    def busy(self) -> bool:
        """Whether any context has text to speak: the connection is not idle."""
        return any(context.busy for context in self.contexts.values())

    @property
    def streams(self) -> int:
        """Contexts open and admitted: those that count against capacity."""
        return sum(not context.queued for context in self.contexts.values())

    def leads(self) -> list[float]:
        """How far each context being spoken is ahead of its listener (Context.lead_s)."""
        now = self.clock()
        return [lead for context in self.contexts.values() if (lead := context.lead_s(now)) is not None]

    def start(self) -> list[Action]:
        return [self._ready()]

    def is_current(self, job_id: int) -> bool:
        """Whether job `job_id` is still wanted (not cancelled, its context not failed)."""
        return job_id in self._held or any(context.job is not None and context.job.id == job_id for context in self.contexts.values())

    # Client frames

    def receive(self, frame: str | bytes) -> list[Action]:
        """The actions answering one client frame; a refused one gets an `error`."""
        try:
            return self._handle(self._parse(frame))
        except p.ProtocolError as e:
            return [self._error(e.code, e.message, e.context_id, e.retry_after_ms)]
        except Exception:
            log.exception("session %s: unexpected error handling a message", self.id)
            return [self._error(v1.INTERNAL_ERROR, "the server failed to handle this message")]

    def _parse(self, frame: str | bytes) -> p.Config | p.ContextMessage | p.UserMessage:
        size = len(frame) if isinstance(frame, bytes) else len(frame.encode("utf-8", "surrogatepass"))
        if size > self.limits.max_message_bytes:
            raise p.ProtocolError(
                v1.MESSAGE_TOO_LARGE, f"message of {size} bytes; the limit is {self.limits.max_message_bytes}"
            )
        return p.parse_message(frame, tuple(self.voices), self.limits.max_text_chars)

    def _handle(self, message: p.Config | p.ContextMessage | p.UserMessage) -> list[Action]:
        if isinstance(message, p.Config):
            if self._streams or self.turns:
                raise p.ProtocolError(v1.CONFIG_TOO_LATE, "config must come before the first speak, text or user")
            self.config = message
            return [self._ready()]
        if isinstance(message, p.UserMessage):
            return self._user(message)
        if message.type == "cancel" and message.context_id in self.turns:
            return self._cancel_turn(self.turns[message.context_id])
        context = self.contexts.get(message.context_id)
        if message.type in p.TEXT_TYPES:
            return self._text(context, message)
        if context is None:
            raise p.ProtocolError(v1.UNKNOWN_CONTEXT, f"no open context '{message.context_id}'", message.context_id)
        if message.type == "cancel":
            return self._cancel(context)
        if context.closed:
            raise p.ProtocolError(v1.CONTEXT_CLOSED, f"context '{context.id}' is closed", context.id)
        return self._submit(context, *context.segmenter.flush(), Mark.FLUSH if message.type == "flush" else Mark.CLOSE)

    def _text(self, context: Context | None, message: p.ContextMessage) -> list[Action]:
        if context is not None and message.type == "speak":
            raise p.ProtocolError(v1.CONTEXT_EXISTS, f"context '{context.id}' is already open", context.id)
        if context is not None and context.closed:
            raise p.ProtocolError(v1.CONTEXT_CLOSED, f"context '{context.id}' is closed", context.id)
        if context is not None and (message.voice or message.voice_params):
            raise p.ProtocolError(
                v1.INVALID_FIELD, f"context '{context.id}' is open: its voice and parameters are set when it opens", context.id
            )
        waiting = 0 if context is None else context.waiting_chars
        if waiting + len(message.text) > self.limits.max_text_chars:
            raise p.ProtocolError(
                v1.TEXT_TOO_LONG,
                f"{waiting} characters are already waiting for synthesis; the limit is {self.limits.max_text_chars}",
                message.context_id,
            )
        actions: list[Action] = []
        if context is None:
            context, actions = self._open(message)
        sentences = context.segmenter.append(message.text)
        if message.type == "speak":
            return actions + self._submit(context, *sentences, *context.segmenter.flush(), Mark.CLOSE)
        return actions + self._submit(context, *sentences)

    def _open(self, message: p.ContextMessage) -> tuple[Context, list[Action]]:
        """A new context with the message's voice and parameters over the config's, and
        its first words: `audio_start`, or `queued` where the client asked to wait for
        capacity rather than be refused it."""
        context_id = message.context_id
        if len(self.contexts) >= self.limits.max_contexts:
            raise p.ProtocolError(v1.TOO_MANY_CONTEXTS, f"at most {self.limits.max_contexts} open contexts", context_id)
        cfg = self.config
        voice = self.voices[message.voice or cfg.voice]
        params = tuple((dict(cfg.voice_params) | dict(message.voice_params)).items())
        if problem := voice.speaker_problem(dict(params).get(c.SPEAKER, 0)):
            raise p.ProtocolError(v1.INVALID_FIELD, problem, context_id)
        position = None
        if refusal := self.admission.refusal():
            refusal.context_id = context_id
            if refusal.code != v1.SERVER_BUSY or not self.config.queue:
                raise refusal
            if (position := self.admission.wait(context_id)) is None:
                refusal.message += "; the admission queue is full too"
                raise refusal
        self._streams = self._streams % 0xFFFF + 1
        encoder = FrameEncoder(voice.sample_rate, cfg.sample_rate, cfg.frame_ms, cfg.format)
        segmenter = Segmenter(language=voice.language_family)
        context = Context(context_id, self._streams, voice.name, params, encoder, segmenter, queued=position is not None)
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
        return stop + [Send(p.encode("cancelled", context_id=context.id))]

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
            run = []
            while context.queue and isinstance(context.queue[0], Sentence):
                run.append(context.queue.popleft())
            batch = next(batches(run))
            context.queue.extendleft(reversed(run[len(batch) :]))
            self._jobs += 1
            start_ms = context.encoder.position_ms
            context.job = Job(self._jobs, context.id, tuple(batch), context.voice, context.voice_params, start_ms)
            actions.append(Synthesize(context.job))
        return actions

    def _deliver_mark(self, context: Context, mark: Mark) -> list[Action]:
        """Every sample so far goes out (the partial frame padded); then `flushed`, or
        `done` and the context ends."""
        actions = self._frames(context, context.encoder.finish(), last=mark is Mark.CLOSE)
        if mark is Mark.FLUSH:
            return actions + [Send(p.encode("flushed", context_id=context.id))]
        encoder = context.encoder
        ms = round((encoder.samples - encoder.padding) * 1000 / encoder.rate)  # without the padding
        del self.contexts[context.id]
        return actions + [Send(p.encode("done", context_id=context.id, audio_ms=ms))]

    # Synthesis events

    def audio(
        self, job_id: int, pcm: np.ndarray, sentence_index: int, words: list[tuple[str, int, int]]
    ) -> list[Action]:
        """A chunk of job `job_id`'s audio at the voice's rate; words (word, start, end
        sample of the job's audio) come with the first chunk of each sentence."""
        if (turn := self._held.get(job_id)) is not None:
            turn.held.chunks.append((pcm, sentence_index, words))
            return []
        context = self._context_of(job_id)
        if context is None:
            return []  # cancelled meanwhile
        actions: list[Action] = []
        if self.config.timestamps and words:
            actions.append(Send(self._timestamps(context, sentence_index, words)))
        return actions + self._frames(context, context.encoder.push(pcm))

    def finished(self, job_id: int) -> list[Action]:
        """Job `job_id` delivered all its audio: the context goes on to its next item."""
        if (turn := self._held.get(job_id)) is not None:
            turn.held.finished = True
            return []
        context = self._context_of(job_id)
        if context is None:
            return []
        context.job = None
        return self._advance(context)

    def resuming(self, job_id: int, code: str, message: str, within_s: float) -> list[Action]:
        """Job `job_id`'s server or stage went away (`code`, `message`): what it had not
        delivered is being issued again for up to `within_s`. The client is told, and where
        in the context's audio the stream will go on (held audio is only late)."""
        context = None if job_id in self._held else self._context_of(job_id)
        if context is None:
            return []
        return [Send(p.encode("resuming", context_id=context.id, code=code, message=message,
                              audio_ms=round(context.encoder.position_ms), within_ms=round(within_s * 1000)))]

    def failed(self, job_id: int, code: str, message: str) -> list[Action]:
        """Job `job_id` failed: its context ends with an `error` (held audio is only dropped)."""
        if (turn := self._held.pop(job_id, None)) is not None:
            turn.held = None
            return []
        context = self._context_of(job_id)
        if context is None:
            return []
        del self.contexts[context.id]
        return [self._error(code, message, context.id)]

    def _context_of(self, job_id: int) -> Context | None:
        return next((x for x in self.contexts.values() if x.job is not None and x.job.id == job_id), None)

    # Chat mode (gateway/chat.py holds its rules)

    def _user(self, message: p.UserMessage) -> list[Action]:
        if not self.chat:
            raise p.ProtocolError(v1.CHAT_UNAVAILABLE, "this server runs no chat model", message.turn_id)
        if message.turn_id in self.contexts:
            raise p.ProtocolError(v1.CONTEXT_EXISTS, f"turn '{message.turn_id}' has ended: its reply is a context", message.turn_id)
        turn = self.turns.get(message.turn_id)
        if turn is None:
            if len(self.turns.keys() | self.contexts.keys()) >= self.limits.max_contexts:
                raise p.ProtocolError(v1.TOO_MANY_CONTEXTS, f"at most {self.limits.max_contexts} open contexts and turns", message.turn_id)
            turn = self.turns[message.turn_id] = ch.Turn(message.turn_id)
        if message.text != turn.transcript:
            turn.transcript, turn.changed = message.text, True
        if message.final:
            return self._final(turn)
        if not self._speculates(turn) or not turn.wants_round() or self.admission.refusal():
            return []  # under load, speculation yields: it takes no capacity a listener needs
        return [self._think(turn, final=False)]

    def _speculates(self, turn: ch.Turn) -> bool:
        """Whether the turn drafts while the question arrives: speculation is on, and the
        conversation is short enough that verifying a draft costs less than it can save."""
        limit = self.limits.chat_speculation_chars
        chars = sum(len(m["content"]) for m in self._messages(turn.transcript))
        return self._chat_config.speculation is not p.Speculation.OFF and (not limit or chars <= limit)

    @property
    def _chat_config(self) -> p.ChatConfig:
        return self.config.chat or p.ChatConfig()

    def _messages(self, transcript: str) -> tuple[dict[str, str], ...]:
        history, chars = [], 0
        for message in reversed(self.history):
            chars += len(message["content"])
            if chars > HISTORY_CHARS:
                break
            history.insert(0, message)
        system = [{"role": "system", "content": self._chat_config.system}] if self._chat_config.system else []
        return (*system, *history, {"role": "user", "content": transcript})

    def _think(self, turn: ch.Turn, final: bool) -> Think:
        """The turn's next Thinker request: a speculative round, or the final one."""
        cfg = self._chat_config
        self._thinks += 1
        draft = tuple(turn.draft[: cfg.max_tokens - 1]) if self._speculates(turn) else ()
        max_tokens = cfg.max_tokens if final else min(cfg.max_tokens, len(draft) + ch.DRAFT_TOKENS)
        turn.round, turn.changed = ch.Round(self._thinks, final, max_tokens), False
        turn.rounds += not final
        return Think(self._thinks, turn.id, self._messages(turn.transcript), draft, cfg.k, max_tokens, cfg.temperature)

    def _final(self, turn: ch.Turn) -> list[Action]:
        """The question ended: its reply becomes a context, and one request verifies the draft and writes the rest."""
        if not turn.transcript.strip():
            return self._drop_turn(turn) + [self._error(v1.INVALID_FIELD, "the final transcript is empty", turn.id)]
        stop: list[Action] = []
        if turn.round is not None:  # what the round in flight drafted so far is a draft as good as any: verified anyway
            stop.append(StopThinking(turn.round.id))
            if turn.round.ids:
                turn.adopt(turn.round)
        turn.round, turn.final = None, True
        try:
            context, opened = self._open(p.ContextMessage("text", turn.id))
        except p.ProtocolError as e:  # refused (busy, draining): the turn ends, and what it ran stops
            return stop + self._drop_turn(turn) + [self._error(e.code, e.message, turn.id, e.retry_after_ms)]
        context.closed = True  # the reply alone speaks on it
        return stop + opened + [self._think(turn, final=True)]

    def thought(self, think_id: int, ids: list[int], text: str, accepted: int | None) -> list[Action]:
        """A piece of Thinker request `think_id`'s reply."""
        turn = self._turn_thinking(think_id)
        if turn is None:
            return []
        first = not turn.round.ids and turn.round.accepted is None
        turn.round.add(ids, text, accepted, turn.marks)
        if not turn.round.final:
            if self._first_sentence(turn.round.text, complete=False) is None:
                return []
            # The draft holds its first sentence: what speculation needs. Drafting on would only cost time.
            return [StopThinking(turn.round.id)] + self._end_round(turn, complete=False)
        actions = self._decide(turn) if first else []
        return actions + self._reply_text(turn, text)

    def _first_sentence(self, text: str, complete: bool) -> Sentence | None:
        return ch.first_sentence(text, complete, self.voices[self.config.voice].language_family)

    def _decide(self, turn: ch.Turn) -> list[Action]:
        """The final request verified the draft: say how, and release or drop the held audio."""
        round_ = turn.round
        speculation = self._chat_config.speculation if self._speculates(turn) else p.Speculation.OFF
        outcome = ch.outcome(speculation, round_.accepted, turn.held)
        self.observer.chat_turn(outcome.value)
        actions: list[Action] = [Send(p.encode(
            "reply", turn_id=turn.id, outcome=outcome.value, rounds=turn.rounds, draft_tokens=len(turn.draft),
            accepted_tokens=round_.accepted or 0,
        ))]
        if outcome is ch.Outcome.HELD:
            return actions + self._release(turn)
        return actions + self._drop_held(turn)

    def _release(self, turn: ch.Turn) -> list[Action]:
        """The held first sentence is the reply's: its audio goes out now, and the reply's text after it follows."""
        held, context = turn.held, self.contexts[turn.id]
        del self._held[held.job_id]
        self.observer.held_audio(self._held_seconds(held), released=True)
        turn.spoken_from = held.sentence.end
        context.segmenter.append(turn.draft_text[: held.sentence.end])
        context.segmenter.flush()  # spans stay those of the reply's text
        context.ready_at = self.clock()
        context.job = Job(held.job_id, turn.id, (held.sentence,), context.voice, context.voice_params, 0.0)
        actions: list[Action] = []
        for pcm, index, words in held.chunks:
            actions += self.audio(held.job_id, pcm, index, words)
        return actions + (self.finished(held.job_id) if held.finished else [])

    def _reply_text(self, turn: ch.Turn, text: str) -> list[Action]:
        """A delta of the decided reply: to the client, and into the context's speech past the held sentence."""
        context = self.contexts.get(turn.id)
        if not text or context is None:
            return []
        said = len(turn.round.text) - len(text)  # the reply's characters before this delta
        skip = max(0, turn.spoken_from - said)
        sentences = context.segmenter.append(text[skip:]) if skip < len(text) else []
        return [Send(p.encode("reply_text", turn_id=turn.id, text=text))] + self._submit(context, *sentences)

    def thought_done(self, think_id: int) -> list[Action]:
        """Thinker request `think_id` ended: the reply is whole, or the round's draft is the turn's now."""
        turn = self._turn_thinking(think_id)
        if turn is None:
            return []
        if turn.round.final:
            return self._end_reply(turn)
        return self._end_round(turn, complete=len(turn.round.ids) < turn.round.max_tokens)

    def _end_round(self, turn: ch.Turn, complete: bool) -> list[Action]:
        """A speculative round is over (`complete`: its draft ended the reply): its draft
        is the turn's, its first sentence held, and the next round starts if new words came."""
        turn.adopt(turn.round)
        turn.round = None
        self.observer.chat_round()
        # A draft of words already revised is verified by the next round, not held: its TTS would compete with that round.
        actions = [] if turn.changed else self._hold(turn, complete)
        if turn.wants_round() and not self.admission.refusal():
            actions.append(self._think(turn, final=False))
        return actions

    def _end_reply(self, turn: ch.Turn) -> list[Action]:
        del self.turns[turn.id]
        actions: list[Action] = []
        if (context := self.contexts.get(turn.id)) is not None:
            actions += self._submit(context, *context.segmenter.flush(), Mark.CLOSE)
        self.history += [{"role": "user", "content": turn.transcript}, {"role": "assistant", "content": turn.round.text}]
        return actions

    def _hold(self, turn: ch.Turn, complete: bool) -> list[Action]:
        """Synthesize the draft's first sentence out of sight, unless it is held already."""
        sentence = self._first_sentence(turn.draft_text, complete)
        held = turn.held
        if held is not None and sentence == held.sentence:
            return []
        actions = self._drop_held(turn)
        tokens = None if sentence is None else ch.tokens_covering(turn.marks, sentence.end)
        if sentence is None or tokens is None or self.admission.refusal():
            return actions
        self._jobs += 1
        job = Job(self._jobs, turn.id, (sentence,), self.config.voice, self.config.voice_params, 0.0)
        turn.held = ch.Held(sentence, tokens, job.id)
        self._held[job.id] = turn
        return actions + [Synthesize(job)]

    def _drop_held(self, turn: ch.Turn) -> list[Action]:
        if turn.held is None:
            return []
        self._held.pop(turn.held.job_id, None)
        self.observer.held_audio(self._held_seconds(turn.held), released=False)
        job_id, turn.held = turn.held.job_id, None
        return [Stop(job_id)]

    def _held_seconds(self, held: ch.Held) -> float:
        """The held audio synthesized so far."""
        return sum(len(pcm) for pcm, _, _ in held.chunks) / self.voices[self.config.voice].sample_rate

    def _drop_turn(self, turn: ch.Turn) -> list[Action]:
        """The turn goes: its Thinker request and its held audio stop."""
        self.turns.pop(turn.id, None)
        stop = [StopThinking(turn.round.id)] if turn.round is not None else []
        turn.round = None
        return stop + self._drop_held(turn)

    def _cancel_turn(self, turn: ch.Turn) -> list[Action]:
        actions = self._drop_turn(turn)
        if (context := self.contexts.get(turn.id)) is not None:
            return actions + self._cancel(context)
        return actions + [Send(p.encode("cancelled", context_id=turn.id))]

    def thought_failed(self, think_id: int, code: str, message: str) -> list[Action]:
        """Thinker request `think_id` failed: a final one ends its turn with an `error`; a speculative one is only given up."""
        turn = self._turn_thinking(think_id)
        if turn is None:
            return []
        if not turn.round.final:
            log.info("session %s: a speculative round of turn %s failed: %s", self.id, turn.id, message)
            turn.round = None
            return []
        actions = self._drop_turn(turn)
        if (context := self.contexts.get(turn.id)) is not None:
            actions += [Stop(context.job.id)] if context.job is not None else []
            self._remove(context)
        return actions + [self._error(code, message, turn.id)]

    def _turn_thinking(self, think_id: int) -> ch.Turn | None:
        return next((t for t in self.turns.values() if t.round is not None and t.round.id == think_id), None)

    # The connection

    def idle(self, seconds: float) -> list[Action]:
        """No message for `seconds` (the idle timeout): close, unless a context is still
        speaking (a context left open with nothing to say is idle)."""
        if self.busy:
            return []
        log.info("session %s: idle for %g s, closing", self.id, seconds)
        return [self._error(v1.IDLE_TIMEOUT, f"no message for {seconds:g} s"), Close(1000, "idle timeout")]

    def abort(self) -> list[Action]:
        """The connection is gone: stop every job and Thinker request, give up every place in the queue."""
        jobs = [context.job.id for context in self.contexts.values() if context.job is not None]
        for context in list(self.contexts.values()):
            self._remove(context)
        stops = [a for turn in list(self.turns.values()) for a in self._drop_turn(turn)]
        return stops + [Stop(job_id) for job_id in jobs]

    def _remove(self, context: Context) -> None:
        del self.contexts[context.id]
        if context.queued:
            self.admission.leave(context.id)

    # Messages

    def _ready(self) -> Send:
        cfg = self.config
        return Send(p.encode(
            "ready", session_id=self.id, format=cfg.format, sample_rate=cfg.sample_rate,
            channels=1, frame_ms=cfg.frame_ms, pre_skip=pre_skip(cfg.format, cfg.sample_rate), voices=list(self.voices),
            # Voices without word timings (the AR family): their contexts get no `timestamps`.
            without_word_timestamps=[name for name, v in self.voices.items() if not v.word_timestamps],
        ))

    def _audio_start(self, context: Context) -> Send:
        return Send(p.encode(
            "audio_start", context_id=context.id, stream=context.stream, voice=context.voice,
            speaker=dict(context.voice_params).get(c.SPEAKER, 0), sample_rate=context.encoder.rate,
        ))

    def _queued(self, context: Context, position: int) -> Send:
        return Send(p.encode("queued", context_id=context.id, position=position))

    def _error(
        self, code: str, message: str, context_id: str | None = None, retry_after_ms: int | None = None
    ) -> Send:
        self.observer.error(code)
        return Send(p.error(code, message, context_id, retry_after_ms))

    def _frames(self, context: Context, payloads: list[bytes], last: bool = False) -> list[Action]:
        encoder = context.encoder
        first = encoder.samples - len(payloads) * encoder.frame_samples
        actions: list[Action] = []
        for i, payload in enumerate(payloads):
            end = last and i == len(payloads) - 1
            offset = first + i * encoder.frame_samples
            actions.append(Send(v1.audio_frame(context.stream, context.seq, offset, payload, end)))
            context.seq += 1
        if payloads and context.ready_at is not None:
            self.observer.first_audio(self.clock() - context.ready_at)
            context.ready_at = None
            context.heard_at, context.heard_from_ms = self.clock(), first * 1000 / encoder.rate
        self.observer.audio(len(payloads) * encoder.frame_samples / encoder.rate)
        return actions

    def _timestamps(self, context: Context, sentence_index: int, words: list[tuple[str, int, int]]) -> str:
        """Word times in ms of the context's audio, and the sentence's span in its text."""
        job = context.job

        def ms(sample: int) -> int:
            return round(job.start_ms + sample * 1000 / context.encoder.source_rate)

        sentence = job.sentences[sentence_index]
        return p.encode(
            "timestamps", context_id=job.context_id, words=[w for w, _, _ in words],
            start_ms=[ms(a) for _, a, _ in words], end_ms=[ms(b) for _, _, b in words],
            text_span=[sentence.start, sentence.end],
        )
