"""Protocol v1's chat mode, the pure parts: a turn's speculation rounds, the draft they
leave, the first sentence to hold, and the outcome of the final verification. A
connection's turns (gateway/turns.py) turn them into actions; tests/unit/test_gateway_chat.py
tests them without Triton.

A turn's transcript arrives word by word (`user` messages). While it does, a round asks
the Thinker to verify the turn's draft against the new partial question and to draft on
from what it kept (one Thinker request; never two at once, at most MAX_ROUNDS a turn).
A round ends once its draft holds a complete first sentence, whose audio is then
synthesized out of sight; a later round that changes that sentence discards it. On the final transcript, one
more request verifies the draft and writes the rest of the reply: if it kept the tokens
of the held sentence, that audio is released at once.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from contract.text import Sentence
from gateway.protocol import Speculation
from gateway.segmenter import Segmenter

MAX_ROUNDS = 8  # speculative rounds a turn may run: a bound on the Thinker's work for one question
DRAFT_TOKENS = 48  # what a round drafts: more than a first sentence, little to throw away


class Outcome(enum.Enum):
    HELD = "held"  # the held first sentence was verified, and its audio released
    PARTIAL = "partial"  # part of the draft kept
    REJECTED = "rejected"  # none of it (or there was none)
    OFF = "off"  # no speculation


@dataclass
class Thought:
    """One Thinker request of a turn, as its pieces arrive."""

    id: int
    final: bool
    max_tokens: int
    ids: list[int] = field(default_factory=list)
    text: str = ""
    accepted: int | None = None  # of the draft it verified
    marks: list[tuple[int, int]] = field(default_factory=list)  # (tokens, characters) at each piece's end

    def add(self, ids: list[int], text: str, accepted: int | None, earlier: list[tuple[int, int]]) -> None:
        """A piece; the first of a verifying thought keeps `accepted` of the draft, whose
        `earlier` marks still hold up to there."""
        if accepted is not None:
            self.accepted = accepted
            self.marks = [m for m in earlier if m[0] <= accepted]
        self.ids += ids
        self.text += text
        self.marks.append((len(self.ids), len(self.text)))


@dataclass
class Held:
    """A draft's first sentence and its audio, synthesized before the question ended."""

    sentence: Sentence  # its span in the draft's text
    tokens: int  # draft tokens that cover it: the verification must keep these
    job_id: int
    chunks: list[tuple] = field(default_factory=list)  # audio events held back, in order
    finished: bool = False


@dataclass
class Turn:
    id: str
    transcript: str = ""
    final: bool = False
    rounds: int = 0  # speculative rounds run
    draft: list[int] = field(default_factory=list)
    draft_text: str = ""
    marks: list[tuple[int, int]] = field(default_factory=list)
    thought: Thought | None = None  # the Thinker request in flight
    changed: bool = False  # the transcript changed since the thought in flight began
    held: Held | None = None
    spoken_from: int = 0  # where the reply's text goes on after the held sentence

    def wants_round(self) -> bool:
        return not self.final and self.thought is None and self.changed and self.rounds < MAX_ROUNDS

    def adopt(self, finished: Thought) -> None:
        """A speculative round ended: its text is the draft now."""
        self.draft, self.draft_text, self.marks = finished.ids, finished.text, finished.marks


def first_sentence(text: str, complete: bool, language: str) -> Sentence | None:
    """The first sentence of a draft's text, once it is known to be whole (`complete`:
    the draft ended the reply)."""
    segmenter = Segmenter(language=language)
    sentences = segmenter.append(text) + (segmenter.flush() if complete else [])
    return sentences[0] if sentences and sentences[0].text.strip() else None


def tokens_covering(marks: list[tuple[int, int]], chars: int) -> int | None:
    """The fewest tokens whose text holds the first `chars` characters, by the marks."""
    return next((tokens for tokens, length in marks if length >= chars), None)


def outcome(speculation: Speculation, accepted: int | None, held: Held | None) -> Outcome:
    if speculation is Speculation.OFF:
        return Outcome.OFF
    if held is not None and accepted is not None and accepted >= held.tokens:
        return Outcome.HELD
    return Outcome.PARTIAL if accepted else Outcome.REJECTED
