"""Resuming a `tts` request whose Triton, or a stage under it, died, or that was paused
for a client that does not read: sans I/O.

The gateway knows a request's sentences and what of their audio it has delivered. When
the request fails because its server or a stage went away (`backend_unavailable`, or no
progress for the stage timeout: a stage that hangs or died), the sentences not yet
delivered whole are issued again — to another Triton at once, or to the same one once
it serves again — until `within_s` after the failure. The sentence that was cut is
synthesized again from its start, and the samples of it already delivered are dropped:
the request carries a seed, so the sentence sounds the same and the listener hears the
rest of it, sample offsets continuing. Past the bound, the failure is the request's
error, as it would have been without resuming.

A request paused because its client has not read its audio (gateway/backends/synthesis.py)
is closed between two sentences and issued again from the next: nothing is synthesized
twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from contract.text import Sentence

RETRY_S = 0.25  # the wait before issuing again, times the attempts of this outage...
RETRY_MAX_S = 1.0  # ...up to this


@dataclass(frozen=True)
class TtsChunk:
    """A chunk of a `tts` request's audio."""

    pcm: np.ndarray  # float32 at the voice's rate
    sentence_index: int  # which of the request's sentences it speaks
    words: list[tuple[str, int, int]]  # (word, start, end sample of this request's audio)


class Resumption:
    """Where a request stands in its sentences, and whether and when to issue the rest again."""

    def __init__(self, sentences: Sequence[Sentence], mid_stream: bool = False) -> None:
        self.sentences = tuple(sentences)
        # Whether the listener hears this request's audio after audio it heard already: a
        # stream's first request that finds no server up fails at once, as a new stream
        # should while no server can speak it (its client may go elsewhere).
        self.mid_stream = mid_stream
        self.first = 0  # the first sentence of the request now issued
        self.origin = 0  # the sample of the whole request's audio where that sentence starts
        self.skip = 0  # the samples of that sentence to drop: delivered before the failure
        self.sentence = 0  # the sentence whose audio is being delivered
        self.before = 0  # the samples delivered before it
        self.samples = 0  # its own samples delivered
        self.gives_up_at: float | None = None  # set during an outage: past it, the failure stands
        self.attempts = 0  # issues again in this outage

    @property
    def rest(self) -> tuple[Sentence, ...]:
        """The sentences the request issued now speaks."""
        return self.sentences[self.first :]

    def delivered(self, chunk: TtsChunk) -> TtsChunk | None:
        """A chunk of the request issued now, as a chunk of the whole request (its
        sentences and samples counted from the whole request's first); None when all of
        it was delivered before. Audio coming means the outage, if any, is over."""
        pcm, words = chunk.pcm, chunk.words
        index = self.first + chunk.sentence_index
        if index != self.sentence:
            self.sentence, self.before, self.samples = index, self.before + self.samples, 0
        if index == self.first and self.skip:
            dropped = min(self.skip, len(pcm))
            pcm, self.skip, words = pcm[dropped:], self.skip - dropped, []  # its words were told before
            if not len(pcm):
                return None
        self.samples += len(pcm)
        self.gives_up_at, self.attempts, self.mid_stream = None, 0, True
        return TtsChunk(pcm, index, [(w, self.origin + a, self.origin + b) for w, a, b in words])

    def paused_before(self, index: int) -> None:
        """The request was closed before sentence `index` of the whole request, every
        sentence before it delivered whole: what is issued next starts there."""
        self.sentence, self.before, self.samples = index, self.before + self.samples, 0
        self.first, self.origin, self.skip = index, self.before, 0

    def failed(self, gone: bool, now: float, within_s: float, served: bool = True) -> float | None:
        """The request failed at `now`, because its server or a stage went away (`gone`) or
        not, having reached a server (`served`) or found none up: the seconds to wait
        before issuing the rest again, or None when the failure stands (not a going away, a
        new stream that found no server, or the outage has outlasted `within_s`). During an
        outage every failure is retried: a server coming back refuses requests until its
        models are loaded."""
        if self.gives_up_at is None:
            if not gone or within_s <= 0 or not (self.mid_stream or served):
                return None
            self.gives_up_at = now + within_s
        elif now >= self.gives_up_at:
            return None
        self.attempts += 1
        self.first, self.origin, self.skip = self.sentence, self.before, self.samples
        return min(RETRY_S * self.attempts, RETRY_MAX_S, self.gives_up_at - now)
