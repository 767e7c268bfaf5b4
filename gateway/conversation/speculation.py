"""Protocol v1's chat mode, the pure parts: a turn's speculation rounds, the draft they
leave, the first phrase to hold, and the outcome of the final input. A connection's
turns (gateway/conversation/chatting.py) turn them into actions; tests/unit/test_gateway_chat.py tests
them without Triton.

A turn's transcript arrives word by word (`user` messages). While it does, a round asks
the Thinker to verify the turn's draft against the new partial question and to write on
from what it kept (one Thinker request; never two at once, at most MAX_ROUNDS a turn).
The gateway stops a round once its draft holds its first phrase (what the reply's
context would speak first: `first_phrase`), whose audio is then synthesized out of
sight, or DRAFT_TOKENS past the draft it verified; a later round that changes that
phrase discards it. On the final transcript, a round over the
very same conversation is the reply already, started early: it goes on as the final
request. A finished draft over it is taken whole, unverified, and the Thinker goes on
after it (PREFIX). Otherwise one more request verifies the draft and writes the rest of
the reply. Either way, if the reply keeps the tokens of the held phrase, that audio is
released at once.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from contract.text import Sentence
from gateway.conversation.segmenter import Segmenter
from gateway.messages import Speculation

MAX_ROUNDS = 8  # speculative rounds a turn may run: a bound on the Thinker's work for one question
DRAFT_TOKENS = 48  # what a round drafts past its draft: more than a first phrase, little to throw away

Messages = tuple[dict[str, str], ...]  # a Thinker request's conversation, the user's question last


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
    messages: Messages  # the conversation it answers
    draft: int = 0  # tokens of the draft it verifies first
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

    @property
    def started(self) -> bool:
        """Whether its first piece came (a final request's first piece decides the reply)."""
        return bool(self.ids) or self.accepted is not None

    def enough(self, language: str) -> bool:
        """Whether a speculative round has what speculation needs: its first phrase, or
        DRAFT_TOKENS past its draft. Writing on would cost the CPU the next round needs."""
        return len(self.ids) >= self.draft + DRAFT_TOKENS or first_phrase(self.text, False, language) is not None


@dataclass
class Held:
    """A draft's first phrase and its audio, synthesized before the question ended."""

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
    drafted_for: Messages = ()  # the conversation the draft was written for
    complete: bool = False  # the draft ended the reply
    thought: Thought | None = None  # the Thinker request in flight
    changed: bool = False  # the transcript changed since the thought in flight began
    held: Held | None = None
    spoken_from: int = 0  # where the reply's text goes on after the held phrase
    said: int = 0  # the reply's characters released (to the client and to speech), a clause at a time

    def wants_round(self) -> bool:
        return not self.final and self.thought is None and self.changed and self.rounds < MAX_ROUNDS

    def adopt(self, finished: Thought, complete: bool) -> None:
        """A speculative round ended (`complete`: the Thinker ended its reply): its text is
        the draft now, and its tokens up to the end of that text (a character whose bytes
        were not all written is not the draft's), so that the draft's tokens decode to it."""
        tokens = (tokens_covering(finished.marks, len(finished.text)) or 0) if finished.text else 0
        self.draft, self.draft_text = finished.ids[:tokens], finished.text
        self.marks = [m for m in finished.marks if m[0] <= tokens]
        self.drafted_for, self.complete = finished.messages, complete

    def written_for(self, messages: Messages) -> bool:
        """Whether the draft is a finished round's over exactly `messages`: the reply's
        start as the Thinker writes it (greedy: the very tokens), needing no verification."""
        return bool(self.draft) and self.drafted_for == messages


def reads_whole(transcript: str) -> bool:
    """Whether a partial transcript reads as a whole question or sentence: it ends as one
    does. A recognizer's stable partials hold back their last words, so this is its pass
    over the whole utterance at a pause, which the final usually repeats."""
    return transcript.rstrip().endswith(("?", ".", "!"))


def first_phrase(text: str, complete: bool, language: str) -> Sentence | None:
    """What a reply's context would speak first of a draft's text, once it is known: its
    first phrase, or its first sentence once whole (`complete`: the draft ended the
    reply), as the reply's segmenter cuts them."""
    segmenter = Segmenter(language=language, first_phrase=True)
    pieces = segmenter.append(text) + (segmenter.flush() if complete else [])
    return pieces[0] if pieces and pieces[0].text.strip() else None


def tokens_covering(marks: list[tuple[int, int]], chars: int) -> int | None:
    """The fewest tokens whose text holds the first `chars` characters, by the marks."""
    return next((tokens for tokens, length in marks if length >= chars), None)


def outcome(speculation: Speculation, accepted: int | None, held: Held | None) -> Outcome:
    if speculation is Speculation.OFF:
        return Outcome.OFF
    if held is not None and accepted is not None and accepted >= held.tokens:
        return Outcome.HELD
    return Outcome.PARTIAL if accepted else Outcome.REJECTED
