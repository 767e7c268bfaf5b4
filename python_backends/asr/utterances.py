"""One recognizer stream's audio cut into utterances, as a state machine (no engine, no thread, no
Triton here): its audio in, the events of `contract.models.ASR_EVENTS` out.

A VAD (`Vad`) says how likely each block of 512 samples is speech; a run of likely
blocks at least `Policy.min_speech_ms` long opens an utterance, and `Policy.hangover_ms`
of unlikely blocks after it mean the speech has stopped, for now. The transcriber
(`Transcriber`, Whisper) is run over the utterance's audio so far ("a pass"):

- while the speaker speaks, after each `Policy.partial_every_ms` of new audio: the words
  it and the previous pass agree on, but the last, go out as a partial
  (`stability.Agreement`);
- once the speech stops (the hangover), over the whole utterance at once: its words go
  out as a partial right away, since the audio will not change unless the speaker goes
  on, and become the final at the endpoint with no pass more. A voice chat's reply can
  start from them while the endpoint's silence is still being waited for;
- at the endpoint (ENDPOINT_MS of silence after the speech), END or STOP, over the whole
  utterance, unless the pass at the stop heard it all;
- with a turn detector asked (`smart`), sooner: at `Policy.smart_silence_ms` of silence
  the detector hears the utterance, and if it says the speaker's turn is over, the
  utterance ends there (the pass at the stop is its final); if not, the endpoint waits.

Passes are placed by the audio's position, not by the clock, so audio sent faster than
real time (a file) is cut and heard the same; without partials, only the endpoint's pass
runs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from contract.models import ASR_SAMPLE_RATE, FINAL, PARTIAL, SPEECH_STARTED, SPEECH_STOPPED
from python_backends.asr.stability import Agreement

BLOCK = 512  # samples the VAD judges at once: 32 ms at 16 kHz (Silero's block)
SENTENCE_ENDS = (".", "?", "!")


class Vad(Protocol):
    """One recognizer stream's voice activity detector, stateful: it hears the blocks in order."""

    def probabilities(self, blocks: np.ndarray) -> np.ndarray:
        """[blocks, BLOCK] float32 audio in [-1, 1] → [blocks], how likely each is speech."""
        ...


class TurnDetector(Protocol):
    def finished(self, audio: np.ndarray) -> float:
        """How likely `audio` (an utterance so far, float32 at ASR_SAMPLE_RATE) ends the speaker's turn."""
        ...


class Transcriber(Protocol):
    def transcribe(self, audio: np.ndarray) -> str:
        """The words in `audio` (float32 in [-1, 1] at ASR_SAMPLE_RATE, at most ~27 s)."""
        ...


@dataclass(frozen=True)
class Event:
    """One response of the `asr` model: an event of ASR_EVENTS in utterance `utterance`,
    at `audio_ms` of the recognizer stream's timeline, with a transcript's `text`."""

    kind: str
    utterance: int
    audio_ms: int
    text: str = ""


@dataclass(frozen=True)
class Policy:
    """How speech is told from silence, and when passes run; times in ms of audio."""

    threshold: float = 0.5  # a block at least this likely is speech (Silero's own threshold)
    release: float = 0.35  # speech goes on while blocks stay at least this likely (Silero's 0.5 − 0.15)
    min_speech_ms: int = 200  # shorter sounds (a click, a cough) open no utterance
    hangover_ms: int = 100  # this much silence, and the speech has stopped for now
    smart_silence_ms: int = 200  # this much, and a turn detector is asked whether the turn is over (as Pipecat asks)
    smart_threshold: float = 0.5  # the detector's probability from which it is
    preroll_ms: int = 300  # audio before the speech's start that passes hear (Whisper hears a first word better)
    tail_ms: int = 300  # and after its end, at most
    partial_every_ms: int = 300  # new audio between partial passes
    long_utterance_ms: int = 15_000  # an utterance this long ends at its next pause, not its endpoint
    max_utterance_ms: int = 25_000  # and this long, at once: Whisper hears 30 s at most

    def samples(self, ms: int) -> int:
        return ms * ASR_SAMPLE_RATE // 1000


def audio_ms(samples: int) -> int:
    return samples * 1000 // ASR_SAMPLE_RATE


@dataclass
class Utterance:
    """The utterance being heard."""

    number: int  # from 0 in its recognizer stream
    start: int  # the recognizer stream's sample where its speech began
    last_pass: int  # where the audio of the latest pass ended (its start, before any)
    silence_from: int | None = None  # where the silence since its speech began; None while spoken
    settled: tuple[str, int] | None = None  # the pass over it all since the speech stopped: its words, its end
    agreement: Agreement = field(default_factory=Agreement)


class Utterances:
    """One recognizer stream: its audio, heard request by request, cut into utterances."""

    def __init__(self, vad: Vad, transcriber: Transcriber, policy: Policy = Policy(),
                 turns: TurnDetector | None = None) -> None:
        self.vad, self.transcriber, self.policy, self.turns = vad, transcriber, policy, turns
        self.audio = np.zeros(0, np.float32)  # the recent audio: the utterance's, or the preroll's
        self.audio_start = 0  # the recognizer stream's sample at audio[0]
        self.judged = 0  # samples the VAD has judged: whole blocks (the rest waits for more)
        self.candidate: int | None = None  # where speech may have begun, not yet long enough
        self.utterance: Utterance | None = None
        self.count = 0  # utterances opened

    @property
    def received(self) -> int:
        """Samples of the recognizer stream's timeline received."""
        return self.audio_start + len(self.audio)

    def hear(self, pcm: np.ndarray, endpoint_ms: int, partials: bool = True, end: bool = False,
             smart: bool = False) -> list[Event]:
        """The next audio (float32 in [-1, 1]), then with `end` the end of the utterance
        in progress: the events they caused. Without `partials`, no pass runs but those
        that end an utterance; with `smart`, the turn detector may end one before its endpoint."""
        self.audio = np.concatenate([self.audio, pcm.astype(np.float32, copy=False)])
        blocks = self.audio[self.judged - self.audio_start:][: (self.received - self.judged) // BLOCK * BLOCK]
        events: list[Event] = []
        if blocks.size:
            for p in self.vad.probabilities(blocks.reshape(-1, BLOCK)):
                events += self._judge(float(p), self.policy.samples(endpoint_ms), partials, smart)
        if end:
            events += self._end()
        self._forget()
        return events

    def _judge(self, p: float, endpoint: int, partials: bool, smart: bool) -> list[Event]:
        """The next block, `p` likely speech."""
        at, self.judged = self.judged, self.judged + BLOCK
        u = self.utterance
        if u is None:
            return self._await_speech(p, at)
        if p >= (self.policy.release if u.silence_from is None else self.policy.threshold):
            return self._spoken(u, partials)
        if u.silence_from is None:
            u.silence_from = at
        silence = self.judged - u.silence_from
        events = []
        if silence - BLOCK < self.policy.samples(self.policy.hangover_ms) <= silence:  # the speech stopped now
            if self.judged - u.start >= self.policy.samples(self.policy.long_utterance_ms):
                return self._finish(u, self.judged)
            if partials:
                events = self._settle(u)
        if silence >= endpoint or (smart and self._turn_over(u, silence)):
            return events + self._finish(u, self.judged)
        return events

    def _turn_over(self, u: Utterance, silence: int) -> bool:
        """At smart_silence_ms of silence (once), whether the turn is over: its words, as
        the pass at the stop heard them, end as a sentence does (Whisper writes a comma, or
        nothing, where the speaker's voice goes on), and the turn detector hears it so."""
        asked_at = self.policy.samples(self.policy.smart_silence_ms)
        if self.turns is None or not silence - BLOCK < asked_at <= silence:
            return False
        if u.settled is not None and not u.settled[0].rstrip().endswith(SENTENCE_ENDS):
            return False
        start = max(self.audio_start, u.start - self.policy.samples(self.policy.preroll_ms))
        return self.turns.finished(self.audio[start - self.audio_start : self.judged - self.audio_start]) >= \
            self.policy.smart_threshold

    def _await_speech(self, p: float, at: int) -> list[Event]:
        if self.candidate is None and p >= self.policy.threshold:
            self.candidate = at
        elif self.candidate is not None and p < self.policy.release:
            self.candidate = None
        if self.candidate is not None and self.judged - self.candidate >= self.policy.samples(self.policy.min_speech_ms):
            return self._open(self.candidate)
        return []

    def _open(self, start: int) -> list[Event]:
        self.utterance = Utterance(self.count, start, last_pass=start)
        self.count += 1
        self.candidate = None
        return [Event(SPEECH_STARTED, self.utterance.number, audio_ms(start))]

    def _spoken(self, u: Utterance, partials: bool) -> list[Event]:
        """A block of speech: the speaker goes on (after a pause, in the same utterance)."""
        u.silence_from, u.settled = None, None
        if self.judged - u.start >= self.policy.samples(self.policy.max_utterance_ms):
            return self._finish(u, self.judged)
        if partials and self.judged - u.last_pass >= self.policy.samples(self.policy.partial_every_ms):
            text = self._pass(u, self.judged)
            if (shown := u.agreement.hypothesis(text)) is not None:
                return [Event(PARTIAL, u.number, audio_ms(self.judged), shown)]
        return []

    def _settle(self, u: Utterance) -> list[Event]:
        """The speech stopped: hear the whole utterance now, and show it all."""
        text = self._pass(u, self.judged)
        u.settled = (text, self.judged)
        shown = u.agreement.settled(text)
        return [] if shown is None else [Event(PARTIAL, u.number, audio_ms(self.judged), shown)]

    def _end(self) -> list[Event]:
        """END: the utterance in progress ends now, one still too short to be sure of too."""
        events = [] if self.utterance is not None or self.candidate is None else self._open(self.candidate)
        return events + ([] if self.utterance is None else self._finish(self.utterance, self.received))

    def _finish(self, u: Utterance, now: int) -> list[Event]:
        """The utterance is over at `now`: its speech_stopped, and its final, heard again
        unless the pass at its stop heard it all."""
        speech_end = now if u.silence_from is None else u.silence_from
        text, heard = u.settled or (None, min(now, speech_end + self.policy.samples(self.policy.tail_ms)))
        if text is None:
            text = self._pass(u, heard)
        self.utterance = None
        return [Event(SPEECH_STOPPED, u.number, audio_ms(speech_end)), Event(FINAL, u.number, audio_ms(heard), text)]

    def _pass(self, u: Utterance, end: int) -> str:
        """The transcriber over the utterance's audio up to `end`, its preroll first."""
        u.last_pass = end
        start = max(self.audio_start, u.start - self.policy.samples(self.policy.preroll_ms))
        return self.transcriber.transcribe(self.audio[start - self.audio_start : end - self.audio_start])

    def _forget(self) -> None:
        """Drop the audio no pass will hear: all before the utterance's preroll, or, with
        none open, before the preroll of where speech may begin."""
        if self.utterance is not None:
            keep_from = self.utterance.start
        else:
            keep_from = self.judged if self.candidate is None else self.candidate
        keep_from = max(self.audio_start, keep_from - self.policy.samples(self.policy.preroll_ms))
        self.audio = self.audio[keep_from - self.audio_start:]
        self.audio_start = keep_from
