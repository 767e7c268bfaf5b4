"""Speaking mode, sans I/O: a connection's contexts, their audio framed for the client
and timed by its listener's clock.

Each context cuts its text into sentences (segmenter.Segmenter), queues them with the
flush and close marks between them, and has at most one synthesis job in flight: the
next job starts only when the shell reports the last one finished, and the shell
reports that only after the job's audio was sent. A client that stops reading thus
stops its contexts' synthesis, one bounded request (segmenter.REQUEST_CHARS) at most.
A context's first audio after idle waits at its start gate (start_gate.StartGate) until
a stall cannot follow. Chat replies are contexts too, opened and fed by the chat turns
(chatting.Replies is what they ask of this mode).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from contract import models as c
from contract.text import Sentence
from contract.voices import VoiceInfo
from gateway.conversation.actions import Action, Job, Send, Stop, Synthesize
from gateway.conversation.audio import FrameEncoder
from gateway.conversation.contexts import (
    Admission,
    Context,
    Limits,
    Mark,
    Observer,
    Rate,
    read_document,
    ssml_queue,
)
from gateway.conversation.segmenter import Segmenter, batches
from gateway.conversation.speculation import Held
from gateway.conversation.ssml import Pause
from gateway.conversation.start_gate import SpeakingPace, StartGate
from gateway.messages import TEXT_TYPES, Config, ContextMessage, ProtocolError, encode
from gateway.messages import error as error_message
from speechstream import protocol as v1


class Speaking:
    """One connection's contexts: protocol v1's `speak`, `text`, `flush`, `close` and
    `cancel`, the synthesis jobs they start, and their audio as it comes back."""

    def __init__(
        self, session_id: str, limits: Limits, observer: Observer, clock: Callable[[], float],
        admission: Admission, voices: Mapping[str, VoiceInfo], start_when_safe: bool, pace: SpeakingPace,
    ) -> None:
        self.id = session_id
        self.limits = limits
        self.observer = observer
        self.clock = clock
        self.admission = admission  # asked before a context opens
        self.voices = voices  # the default first
        self.config = Config(next(iter(voices)))
        self.start_when_safe = start_when_safe  # hold a context's first audio until a stall cannot follow (StartGate)
        self.pace = pace  # what the gate expects of a voice's text (the gateway's, shared)
        self.contexts: dict[str, Context] = {}
        self.replies: dict[str, Context] = {}  # chat replies' contexts, kept after `done` while their audio plays
        self._last_stream_number = 0  # the last stream number given out
        self._jobs = 0

    @property
    def opened(self) -> bool:
        """Whether a context was opened: the config can no longer change."""
        return self._last_stream_number != 0

    @property
    def busy(self) -> bool:
        """Whether any context has text to speak."""
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

    def is_current(self, job_id: int) -> bool:
        """Whether job `job_id` is still wanted (not cancelled, its context not failed)."""
        return self._context_of(job_id) is not None

    # Client messages

    def message(self, message: ContextMessage) -> list[Action]:
        """A context's message: `speak` and `text` (which open it), `flush`, `close`, `cancel`."""
        context = self.contexts.get(message.context_id)
        if message.type in TEXT_TYPES:
            return self._text(context, message)
        if context is None:
            raise ProtocolError(v1.UNKNOWN_CONTEXT, f"no open context '{message.context_id}'", message.context_id)
        if message.type == "cancel":
            return self.cancel(context)
        if context.closed:
            raise ProtocolError(v1.CONTEXT_CLOSED, f"context '{context.id}' is closed", context.id)
        return self._submit(context, *context.segmenter.flush(), Mark.FLUSH if message.type == "flush" else Mark.CLOSE)

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
        document = read_document(message) if message.type == "speak" and ssml else None
        actions: list[Action] = []
        if context is None:
            context, actions = self._open(message, self.config.first_phrase)
        if document is not None:
            return actions + self._submit(context, *ssml_queue(context, document), Mark.CLOSE)
        sentences = context.segmenter.append(message.text)
        if message.type == "speak":
            return actions + self._submit(context, *sentences, *context.segmenter.flush(), Mark.CLOSE)
        return actions + self._submit(context, *sentences)

    def _open(self, message: ContextMessage, first_phrase: bool) -> tuple[Context, list[Action]]:
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
        segmenter = Segmenter(language=voice.language_family, first_phrase=first_phrase)
        context = Context(context_id, self._last_stream_number, voice.name, params, encoder, segmenter, queued=position is not None)
        self.contexts[context_id] = context
        if context.queued:
            return context, [context.queued_at(position)]
        return context, [context.audio_start()]

    def admitted(self, context_id: str) -> list[Action]:
        """The queued context's turn came: it starts speaking."""
        context = self.contexts.get(context_id)
        if context is None or not context.queued:
            return []
        context.queued = False
        return [context.audio_start()] + self._advance(context)

    def moved(self, context_id: str, position: int) -> list[Action]:
        """The queued context moved up to `position`."""
        context = self.contexts.get(context_id)
        return [context.queued_at(position)] if context is not None and context.queued else []

    def cancel(self, context: Context) -> list[Action]:
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
            params = context.params(self.voices[context.voice].length_scale)
            context.job = Job(self.new_job(), context.id, tuple(batch), context.voice, params, context.encoder.position_ms)
            if self.start_when_safe and context.ready_at is not None and context.gate is None and context.words is None:
                chars = sum(len(s.text) for s in batch) + context.waiting_chars
                expected_s = chars * self.pace.seconds_per_char(context.voice) / context.rate
                context.gate = StartGate(self.clock(), expected_s, self.pace.prompt_s(context.voice))
            actions.append(Synthesize(context.job))
        return actions

    def _deliver_mark(self, context: Context, mark: Mark) -> list[Action]:
        """Every sample so far goes out (the partial frame padded); then `flushed`, or
        `done` and the context ends."""
        actions = self._release(context, self._frames(context, context.encoder.finish(), last=mark is Mark.CLOSE))
        if mark is Mark.FLUSH:
            return actions + [Send(encode("flushed", context_id=context.id))]
        encoder = context.encoder
        ms = round((encoder.samples - encoder.padding) * 1000 / encoder.rate)  # without the padding
        del self.contexts[context.id]  # a chat reply's stays in `replies` while it plays
        return actions + [Send(encode("done", context_id=context.id, audio_ms=ms))]

    # Synthesis events

    def audio(
        self, job_id: int, pcm: np.ndarray, sentence_index: int, words: list[tuple[str, int, int]]
    ) -> list[Action]:
        """A chunk of job `job_id`'s audio at the voice's rate; words (word, start, end
        sample of the job's audio) come with the first chunk of each sentence."""
        context = self._context_of(job_id)
        if context is None:
            return []  # cancelled meanwhile
        actions: list[Action] = []
        if self.config.timestamps and words:
            actions.append(Send(context.timestamps(sentence_index, words)))
        if context.words is not None:
            context.words += [(word, context.job.start_ms + end * 1000 / context.encoder.source_rate)
                              for word, _, end in words]
        if context.gate is not None and not context.gate.in_hand_s:
            self.pace.started(context.voice, self.clock() - context.gate.began)
        actions += self._frames(context, context.encoder.push(pcm))
        return self._through_gate(context, actions, len(pcm) / context.encoder.source_rate)

    def finished(self, job_id: int) -> list[Action]:
        """Job `job_id` delivered all its audio: the context goes on to its next item."""
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
        context = self._context_of(job_id)
        if context is None:
            return []
        return [Send(encode("resuming", context_id=context.id, code=code, message=message,
                            audio_ms=round(context.encoder.position_ms), within_ms=round(within_s * 1000)))]

    def failed(self, job_id: int, code: str, message: str) -> list[Action]:
        """Job `job_id` failed: its context ends with an `error` (held audio is only dropped)."""
        context = self._context_of(job_id)
        if context is None:
            return []
        held = self._release(context, [])  # what came before the failure is heard
        del self.contexts[context.id]
        return held + [self.error(code, message, context.id)]

    def _context_of(self, job_id: int) -> Context | None:
        return next((x for x in self.contexts.values() if x.job is not None and x.job.id == job_id), None)

    # What chat turns ask (chatting.Replies): a turn's reply is a context of its id

    def refused(self) -> bool:
        return self.admission.refusal() is not None

    def new_job(self) -> int:
        self._jobs += 1
        return self._jobs

    def open_reply(self, turn_id: str) -> list[Action]:
        context, opened = self._open(ContextMessage("text", turn_id), first_phrase=True)  # a reply sounds at once
        context.closed = True  # the reply alone speaks on it
        if self.config.listen is not None:  # speech may interrupt it: keep it, with its words
            context.words = []
            self.replies[turn_id] = context
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
            return self.cancel(context)
        return [Send(encode("cancelled", context_id=turn_id))]

    def fail_reply(self, turn_id: str) -> list[Action]:
        if (context := self.contexts.get(turn_id)) is None:
            return []
        self._remove(context)
        return [Stop(context.job.id)] if context.job is not None else []

    def abort(self) -> list[Action]:
        """The connection is gone: stop every job, give up every place in the queue."""
        jobs = [context.job.id for context in self.contexts.values() if context.job is not None]
        for context in list(self.contexts.values()):
            self._remove(context)
        return [Stop(job_id) for job_id in jobs]

    def _remove(self, context: Context) -> None:
        del self.contexts[context.id]
        if context.queued:
            self.admission.leave(context.id)

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
            actions.append(Send(v1.audio_frame(context.stream_number, context.seq, offset, payload, end),
                                encoder.frame_samples / encoder.rate))
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
        gateway cannot tell that it starts in time (Admission.starts_in_time: served
        before the client's other streams) with audio in hand that outlasts the queue it
        waited in; then all that was held."""
        if (gate := context.gate) is None:
            return actions
        gate.held += actions
        gate.arrived(seconds, self.clock())
        others_first_s = self.admission.others_first_s(context.id, gate.first_chunk_s)
        safe = gate.is_open(self.clock(), others_first_s) or (
            gate.outlasts_its_queue() and self.admission.starts_in_time(context.id, gate.in_hand_s))
        return self._release(context, []) if safe else []

    def _release(self, context: Context, actions: list[Action]) -> list[Action]:
        """What the context's start gate held, if any, then `actions`: the gate is gone."""
        if (gate := context.gate) is None:
            return actions
        context.gate = None
        if gate.first_sample is not None:
            self._heard_from(context, gate.first_sample)
        return gate.held + actions

